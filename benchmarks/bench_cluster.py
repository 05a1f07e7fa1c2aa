"""The flights job on the two-worker standalone cluster against ``local[2]`` (issue #29 item 2).

Three placements of the same job, side by side in one run, rounds rotating which goes first:

- ``local``: ``local[2,4]``, the input landed on local disk, state and the Delta table on local
  paths (``make demo``'s job);
- ``local-s3``: ``local[2,4]`` with everything on MinIO as on the cluster (input, checkpoints,
  Spark's checkpoint, the Delta table), which parts the cost of S3 from the cost of the cluster;
- ``cluster``: the standalone cluster of ``twophase services up --spark-cluster`` (two workers of
  one core), everything on MinIO, twophase shipped to the executors as a wheel.

Each round of a placement is a fresh job in its own driver process
(``python -m twophase.integration.jobs.flights``), so each pays its Spark session: JVM start, and
on the cluster executors registering and the wheel shipped. Every round is read back and must be
exact in all three sinks. Where the time goes comes from the driver (session, the epochs' Spark
jobs, the coordinator's share of each epoch) and from Spark's event log (task metrics summed over
the run: executor deserialize and run time, GC, shuffle fetch wait and write, input bytes; when
the executors registered).

Then the Kafka, Delta and S3 benchmarks (``bench_kafka``, ``bench_delta``, ``bench_s3``, each
twophase against Spark's own writer) run on ``local[2]`` and on the cluster
(``TWOPHASE_BENCH_MASTER``, :mod:`benchmarks.common`), one process each, the placement that goes
first alternating from one benchmark to the next.

Environment: ``TWOPHASE_BENCH_RUNS`` rounds (default 3, also each sink benchmark's),
``TWOPHASE_BENCH_DAYS`` days of input (default 365, 31 per micro-batch as the demo),
``TWOPHASE_BENCH_PLACEMENTS`` (default all three), ``TWOPHASE_BENCH_SINKS`` (default
``kafka,delta,s3``; empty: none).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import load_at_end, machine, runs

PLACEMENTS = ("local", "local-s3", "cluster")
FILES_PER_TRIGGER = 31
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
"""Spark's progress report of one micro-batch, in the event log: ``durationMs`` per phase."""


def _days() -> int:
    return int(os.environ.get("TWOPHASE_BENCH_DAYS", "365"))


def chosen(variable: str, known: Sequence[str]) -> tuple[str, ...]:
    """The comma-separated names in environment ``variable`` (default: all of ``known``).

    Raises:
        ValueError: a name not in ``known``.
    """
    names = tuple(n for n in os.environ.get(variable, ",".join(known)).split(",") if n)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"{variable}: unknown {unknown}; choose from {', '.join(known)}")
    return names


def _placements() -> tuple[str, ...]:
    return chosen("TWOPHASE_BENCH_PLACEMENTS", PLACEMENTS)


def task_metrics(event_log_dir: Path) -> dict[str, Any]:
    """Task metrics summed over every event log in ``event_log_dir`` (``SparkListenerTaskEnd``):
    seconds of executor deserialize, run, JVM GC, result serialization, shuffle fetch wait and
    shuffle write; bytes of input read and shuffle written; tasks; seconds from the
    application's start to its last executor's registration (``SparkListenerExecutorAdded``); and
    per phase of the streaming query's micro-batches (``durationMs`` of each progress event:
    ``queryPlanning``, ``latestOffset``, ``getBatch``, ``addBatch``, ``walCommit``,
    ``commitOffsets``, ``triggerExecution``), seconds summed, as ``stream_<phase>_s``."""
    ms = {"deserialize_s": 0.0, "run_s": 0.0, "gc_s": 0.0, "result_serialize_s": 0.0, "fetch_wait_s": 0.0}
    shuffle_write_ns = 0
    input_bytes = shuffle_bytes = tasks = 0
    started: int | None = None
    executors_at: list[int] = []
    stream_ms: dict[str, int] = {}
    for path in sorted(p for p in event_log_dir.rglob("*") if p.is_file()):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = event.get("Event")
            if kind == PROGRESS_EVENT:
                for key, value in ((event.get("progress") or {}).get("durationMs") or {}).items():
                    stream_ms[key] = stream_ms.get(key, 0) + int(value)
            elif kind == "SparkListenerApplicationStart":
                started = event.get("Timestamp")
            elif kind == "SparkListenerExecutorAdded":
                executors_at.append(int(event.get("Timestamp", 0)))
            elif kind == "SparkListenerTaskEnd":
                m = event.get("Task Metrics") or {}
                tasks += 1
                ms["deserialize_s"] += m.get("Executor Deserialize Time", 0)
                ms["run_s"] += m.get("Executor Run Time", 0)
                ms["gc_s"] += m.get("JVM GC Time", 0)
                ms["result_serialize_s"] += m.get("Result Serialization Time", 0)
                ms["fetch_wait_s"] += (m.get("Shuffle Read Metrics") or {}).get("Fetch Wait Time", 0)
                write = m.get("Shuffle Write Metrics") or {}
                shuffle_write_ns += write.get("Shuffle Write Time", 0)
                shuffle_bytes += write.get("Shuffle Bytes Written", 0)
                input_bytes += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
    out: dict[str, Any] = {k: round(v / 1000.0, 2) for k, v in ms.items()}
    out["shuffle_write_s"] = round(shuffle_write_ns / 1e9, 2)
    out["input_mb"] = round(input_bytes / 1e6, 1)
    out["shuffle_mb"] = round(shuffle_bytes / 1e6, 1)
    out["tasks"] = tasks
    out.update({f"stream_{key}_s": round(value / 1000.0, 2) for key, value in sorted(stream_ms.items())})
    out["executors_ready_s"] = (
        round((max(executors_at) - started) / 1000.0, 2) if started is not None and executors_at else None
    )
    return out


class Placements:
    """The running services and the three placements' job specs; one fresh job per round."""

    def __init__(self, root: Path, endpoints: Any, master: str | None) -> None:
        self.root = root
        self.endpoints = endpoints
        self.master = master
        self.counter = 0

    def spec(self, placement: str) -> Any:
        from twophase.integration.jobs.flights_spec import FlightsJobSpec

        self.counter += 1
        job_id = f"bench_cluster_{placement.replace('-', '_')}_{os.getpid()}_{self.counter}"
        work_dir = self.root / job_id
        if placement == "local":
            spec = FlightsJobSpec(
                job_id=job_id, work_dir=str(work_dir), days=_days(), files_per_trigger=FILES_PER_TRIGGER
            )
        else:
            spec = FlightsJobSpec.on_s3_bucket(
                job_id, work_dir, days=_days(), files_per_trigger=FILES_PER_TRIGGER
            )
        spec.save()
        return spec

    def run(self, placement: str) -> dict[str, Any]:
        """One round: a fresh job in its own driver process, timed, then read back (untimed).

        Raises:
            RuntimeError: the driver failed, or a sink is not exact.
        """
        from twophase.integration.chaos.runner import service_env
        from twophase.integration.jobs.flights_sinks import verify_run

        spec = self.spec(placement)
        events = Path(spec.work_dir) / "events"
        command = [sys.executable, "-m", "twophase.integration.jobs.flights", "--work-dir", spec.work_dir]
        command += ["--event-log-dir", str(events)]
        if placement == "cluster":
            assert self.master is not None
            command += ["--master", self.master]
        started = time.perf_counter()
        env = {**os.environ, **service_env(self.endpoints)}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        process_s = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{placement}: the driver exited {done.returncode}: {done.stderr[-2000:]}")
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        report = verify_run(spec, self.endpoints)
        if not report.ok:
            raise RuntimeError(f"{placement}: job {spec.job_id} is not exact: {report}")
        metrics = task_metrics(events)
        # what the run spent outside Spark's micro-batches: starting the query (restore, the
        # sinks' checks, Spark's start) and ending it (the final checkpoint, FLIP-147)
        outside = outcome["wall_s"] - metrics.get("stream_triggerExecution_s", 0.0)
        return {
            "process_s": round(process_s, 2),
            **outcome,
            **metrics,
            "outside_batches_s": round(outside, 2),
        }


SINK_BENCHMARKS = {
    # benchmark → (its twophase writer, Spark's writer, the result's key of the twophase epochs)
    "kafka": ("twophase", "spark_kafka", "twophase_epoch_median_ms"),
    "delta": ("twophase", "delta_spark", "twophase_epoch_median"),
    "s3": ("twophase_s3_p8_f2", "spark_s3a", "twophase_epoch_median"),
}


def _sink_benchmarks() -> tuple[str, ...]:
    return chosen("TWOPHASE_BENCH_SINKS", tuple(SINK_BENCHMARKS))


def sink_benchmark(name: str, master: str | None, work: Path, endpoints: Any) -> dict[str, Any]:
    """One run of benchmark ``name`` in its own process, on ``master`` (``None``: ``local[2]``),
    against the services of ``endpoints``: its twophase writer's and Spark writer's rows/s
    (medians), their ratio and the coordinator's share of the twophase epochs.

    Raises:
        RuntimeError: the benchmark failed.
    """
    ours, theirs, epochs_key = SINK_BENCHMARKS[name]
    out_json = work / f"{name}-{'cluster' if master else 'local'}.json"
    from twophase.integration.chaos.runner import service_env

    env = {k: v for k, v in os.environ.items() if k != "TWOPHASE_BENCH_MASTER"} | service_env(endpoints)
    if master is not None:
        env["TWOPHASE_BENCH_MASTER"] = master
    command = [sys.executable, "-m", "benchmarks.run", "-k", name, "--json", str(out_json)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"bench_{name} on {master or 'local[2]'} failed: {done.stderr[-2000:]}")
    result = json.loads(out_json.read_text())
    result = result.get(name, result)
    writers = result["writers"]
    return {
        "twophase rows/s": writers[ours]["rows_per_s"],
        "Spark rows/s": writers[theirs]["rows_per_s"],
        "twophase ÷ Spark": round(writers[theirs]["median_s"] / writers[ours]["median_s"], 3),
        "coordinator share": result[epochs_key]["coordinator_share"],
        "rows": result["rows"],
        "rounds": result["rounds"],
    }


@contextlib.contextmanager
def services() -> Iterator[tuple[Any, str | None]]:
    """Kafka, MinIO and (if a placement needs it) the cluster: running ones or temporary ones."""
    from twophase.integration.jobs.flights import FlightsEndpoints
    from twophase.integration.services import kafka_service, s3_service, spark_cluster_service

    with contextlib.ExitStack() as stack:
        master = stack.enter_context(spark_cluster_service()) if "cluster" in _placements() else None
        bootstrap = stack.enter_context(kafka_service())
        s3 = stack.enter_context(s3_service())
        yield FlightsEndpoints(bootstrap, s3), master


def _median(rows: Sequence[Mapping[str, Any]], key: str) -> Any:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return round(statistics.median(values), 3) if values else ""


def run() -> dict[str, Any]:
    from twophase.integration.jobs.flights_cluster import stage_input

    rounds = runs(3)
    placements = _placements()
    start = machine()
    out: dict[str, Any] = {}
    sinks: dict[str, dict[str, Any]] = {}
    with (
        services() as (endpoints, master),
        tempfile.TemporaryDirectory(
            prefix="twophase-bench-cluster-", dir=os.environ.get("TWOPHASE_BENCH_WORK_DIR")
        ) as tmp,
    ):
        placement = Placements(Path(tmp), endpoints, master)
        if any(p != "local" for p in placements):  # the S3 copy of the input is made once, untimed
            staged = placement.spec("local-s3")
            endpoints.s3.ensure_bucket(staged.bucket)
            stage_input(staged, endpoints.s3)
        results: dict[str, list[dict[str, Any]]] = {p: [] for p in placements}
        for r in range(rounds):
            order = list(placements[r % len(placements) :] + placements[: r % len(placements)])
            for name in order:
                row = placement.run(name)
                results[name].append(row)
                print(json.dumps({"round": r, "placement": name, **row}), file=sys.stderr, flush=True)
        # the sink benchmarks against the same services and cluster
        for i, name in enumerate(_sink_benchmarks()):
            masters: list[str | None] = [None, master] if i % 2 == 0 else [master, None]
            for where in masters:
                if where is None or "cluster" in placements:
                    row = sink_benchmark(name, where, Path(tmp), endpoints)
                    sinks[f"{name} on {'the cluster' if where else 'local[2]'}"] = row
                    print(
                        json.dumps({"benchmark": name, "master": where, **row}), file=sys.stderr, flush=True
                    )
    records = next(iter(results.values()))[0]["records"]
    per_placement: dict[str, dict[str, Any]] = {}
    for name, rows in results.items():
        per_placement[name] = {
            "rows_per_s (run)": int(records / statistics.median(r["wall_s"] for r in rows)),
            **{
                key: _median(rows, key)
                for key in (
                    "process_s",
                    "session_s",
                    "wall_s",
                    "write_s",
                    "epoch_s",
                    "coordinator_share",
                    "executors_ready_s",
                    "deserialize_s",
                    "run_s",
                    "gc_s",
                    "fetch_wait_s",
                    "shuffle_write_s",
                    "input_mb",
                    "shuffle_mb",
                    "tasks",
                    "stream_queryPlanning_s",
                    "stream_latestOffset_s",
                    "stream_getBatch_s",
                    "stream_addBatch_s",
                    "stream_walCommit_s",
                    "stream_commitOffsets_s",
                    "stream_triggerExecution_s",
                    "outside_batches_s",
                )
            },
            "wall_s per round": ", ".join(f"{r['wall_s']:.1f}" for r in rows),
        }
    out["placements (medians of the rounds)"] = per_placement
    if "local" in results:
        base = statistics.median(r["wall_s"] for r in results["local"])
        out["ratios against local (run wall time)"] = {
            name: round(base / statistics.median(r["wall_s"] for r in rows), 3)
            for name, rows in results.items()
        }
    if sinks:
        out["sink benchmarks, local[2] and the cluster"] = sinks
    out["records per round"] = records
    out["days"] = _days()
    out["rounds"] = rounds
    out.update(load_at_end(start))
    return out
