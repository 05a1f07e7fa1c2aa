"""A job of N partitions per epoch on the standalone cluster, twophase against Spark's writers
(issue #42, second done-when).

One Spark session on the two-worker standalone cluster (``twophase services up --spark-cluster``:
two workers of one core; Kafka and MinIO beside it), and the flights job's stream
(:func:`~twophase.integration.jobs.flights.flights_stream`) hash-partitioned by ``flight_id`` into
``N`` partitions (``FlightsJobSpec.shuffle_partitions``), so that every micro-batch has ``N``
tasks, each holding a few records. Side by side in that session, rounds rotating which goes first:

- ``twophase``: the one-pass job, every record to the Kafka, S3 Parquet and Delta 2PC sinks in the
  same checkpoints (``N`` subtasks × 3 sinks per epoch), ending with the final checkpoint; the
  Kafka sink with the settings of :data:`KAFKA_SINK_SETTINGS`;
- ``spark_expert``: the same stream, same partitioning, through ``foreachBatch`` with Spark's own
  writers, the tuned expert recipe of :mod:`benchmarks.bench_fanout` (``persist()``; the three
  writers at once from three kept driver threads in FAIR pools; Spark's Kafka sink with
  :data:`~benchmarks.bench_fanout.KAFKA_TUNED`; Parquet through the S3A magic committer; Delta
  with ``txnAppId``/``txnVersion`` and :data:`~benchmarks.bench_fanout.EXPERT_TUNED`).
  At-least-once, as Spark's writers are.

Every run of both is read back exactly with readers that are not the writers: the Kafka topic
``read_committed`` (confluent-kafka), the S3 Parquet files with pyarrow, the Delta table with
deltalake (delta-rs); twophase's run also with ``verify_run`` (no lingering transaction, upload or
file; its checkpoints complete).

Reported per epoch (Spark's progress events and task metrics from the event log, attributed to a
micro-batch by when its jobs were submitted): wall time (``triggerExecution``), ``addBatch``,
tasks, task run time and executor CPU; twophase's own epoch metrics (its Spark job, the
checkpoint's publish and the commit: the driver's coordinator share). Per run: wall time, the
time outside the micro-batches (query start, twophase's final checkpoint), CPU-seconds of the
driver (its Python and JVM), of the cluster's processes (executors and their Python workers) and of
Kafka and MinIO, and the load. The ratio is per epoch: the median epoch after the first of Spark's
writers over twophase's (> 1: twophase is faster), and the same of the whole runs.

Environment: ``TWOPHASE_BENCH_PARTITIONS`` (default ``1000,10000``: the points, in order),
``TWOPHASE_BENCH_EPOCHS`` micro-batches per run (default 3, 31 days each, about 27k flights),
``TWOPHASE_BENCH_RUNS`` rounds (default 1), ``TWOPHASE_BENCH_WARM_UP=0`` no warm-up run,
``TWOPHASE_BENCH_EVENTS`` a folder that receives Spark's event log, ``TWOPHASE_BENCH_PARTIAL`` a
file that receives each run (and each twophase epoch) as a JSON line as it ends (a point cut short
still reports), ``TWOPHASE_BENCH_WORK_DIR`` where the scratch folder goes.

``python -m benchmarks.bench_many_partitions`` (or ``python -m benchmarks.run -k
many_partitions``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FILES_PER_TRIGGER = 31
"""Days of input per micro-batch, as the flights job (about 27k flights)."""
KAFKA_TOPIC_PARTITIONS = 3
"""Partitions of each run's topic, both sides (the flights job's default). The topic's partitions
do not bound the subtasks: each subtask has its own transactional id, and a transaction of a few
records touches at most this many partitions (its commit writes one marker to each)."""
KAFKA_SINK_SETTINGS: dict[str, int] = {
    "pool_size": 3,
    "transaction_timeout_ms": 3_600_000,
    "max_epoch_ms": 3_000_000,
    "max_commit_delay_ms": 600_000,
}
"""What a user sets on the Kafka sink for epochs of 10⁴ subtasks on two cores: the least pool of
transactional ids (``max_pending_checkpoints`` 1 + 2: 3 ids per partition, 3·N ids in all), and a
transaction timeout of the broker's ``transaction.max.timeout.ms`` (:data:`BROKER_SETTINGS`),
since the first subtask's transaction stays open until the checkpoint commits;
``max_epoch_ms + max_commit_delay_ms`` must fit in it."""
BROKER_SETTINGS: dict[str, str] = {"transaction.max.timeout.ms": "3600000"}
"""The broker's longest transaction timeout, raised from Kafka's default of 15 minutes to an hour:
on two one-core executors the write of one epoch of 10⁴ subtasks took 20 minutes (2026-12-05), so
under the default the broker aborted the epoch's first transactions before its checkpoint could
complete (the sink's verification refused the checkpoint, naming them). A user whose epochs run
that long raises it too, or gives the job more executors."""
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
SIDES = ("twophase", "spark_expert")
WARM_UP_PARTITIONS = 4
"""Each side runs once first, untimed, at this many partitions and one micro-batch."""


def partitions() -> list[int]:
    """The points of ``TWOPHASE_BENCH_PARTITIONS`` (default 1000 and 10000).

    Raises:
        ValueError: a point that is not a positive integer.
    """
    points = [int(p) for p in os.environ.get("TWOPHASE_BENCH_PARTITIONS", "1000,10000").split(",") if p]
    if not points or min(points) < 1:
        raise ValueError(f"TWOPHASE_BENCH_PARTITIONS must list positive integers, got {points}")
    return points


def epochs() -> int:
    """Micro-batches per run: ``TWOPHASE_BENCH_EPOCHS`` (default 3)."""
    return int(os.environ.get("TWOPHASE_BENCH_EPOCHS", "3"))


def warm_up() -> bool:
    """Whether each side runs once first (:data:`WARM_UP_PARTITIONS`): ``TWOPHASE_BENCH_WARM_UP``,
    default 1 (0: no warm-up; the per-epoch ratio leaves each run's first epoch out anyway)."""
    return os.environ.get("TWOPHASE_BENCH_WARM_UP", "1") != "0"


def _iso_ms(stamp: str) -> float:
    """Spark's progress ``timestamp`` (``2026-12-03T09:01:02.345Z``) as epoch milliseconds."""
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def batches(event_log: Path, windows: Sequence[tuple[str, float, float]]) -> dict[str, list[dict[str, Any]]]:
    """Each micro-batch of every streaming query in ``event_log``, grouped by the run whose window
    ``(label, start_ms, end_ms)`` of ``windows`` holds the batch's start.

    A batch's wall time is its progress event's ``triggerExecution`` (``addBatch``: the sinks'
    work). Its Spark jobs are those submitted within ``[start, start + triggerExecution]`` (the runs
    do not overlap), whatever thread submitted them (``foreachBatch``'s writer threads too), and
    their tasks give ``tasks``, ``task_run_s`` (``Executor Run Time``) and ``task_cpu_s``
    (``Executor CPU Time`` + ``Executor Deserialize CPU Time``).

    Returns:
        ``{label: [{"batch", "rows", "wall_s", "add_batch_s", "jobs", "tasks", "task_run_s",
        "task_cpu_s"}, ...]}`` in batch order; batches outside every window are left out.
    """
    progress: list[dict[str, Any]] = []
    job_at: dict[int, float] = {}
    stage_job: dict[int, int] = {}
    job_tasks: dict[int, list[float]] = {}
    for event in common.spark_events(event_log):
        kind = event.get("Event")
        if kind == PROGRESS_EVENT:
            progress.append(event.get("progress") or {})
        elif kind == "SparkListenerJobStart":
            job_at[event["Job ID"]] = float(event.get("Submission Time", 0))
            for stage in event.get("Stage IDs", ()):
                stage_job[stage] = event["Job ID"]
        elif kind == "SparkListenerTaskEnd":
            job = stage_job.get(event.get("Stage ID", -1))
            if job is None:
                continue
            m = event.get("Task Metrics") or {}
            totals = job_tasks.setdefault(job, [0.0, 0.0, 0.0])
            totals[0] += 1
            totals[1] += m.get("Executor Run Time", 0) / 1000
            totals[2] += (m.get("Executor CPU Time", 0) + m.get("Executor Deserialize CPU Time", 0)) / 1e9
    out: dict[str, list[dict[str, Any]]] = {}
    for p in progress:
        start = _iso_ms(p["timestamp"])
        wall_ms = float((p.get("durationMs") or {}).get("triggerExecution", 0))
        labels = [label for label, s, e in windows if s <= start <= e]
        if not labels:
            continue
        jobs = [j for j, at in job_at.items() if start <= at <= start + wall_ms]
        sums = [sum(job_tasks.get(j, [0.0, 0.0, 0.0])[i] for j in jobs) for i in range(3)]
        out.setdefault(labels[0], []).append(
            {
                "batch": p.get("batchId"),
                "rows": sum(int(source.get("numInputRows", 0)) for source in p.get("sources") or ()),
                "wall_s": round(wall_ms / 1000, 3),
                "add_batch_s": round(float((p.get("durationMs") or {}).get("addBatch", 0)) / 1000, 3),
                "jobs": len(jobs),
                "tasks": int(sums[0]),
                "task_run_s": round(sums[1], 2),
                "task_cpu_s": round(sums[2], 2),
            }
        )
    for rows in out.values():
        rows.sort(key=lambda b: b["batch"])
    return out


@contextlib.contextmanager
def cluster() -> Iterator[tuple[Any, str, list[int], list[int]]]:
    """Kafka and MinIO, then the standalone cluster (running ones or temporary ones): the
    endpoints, the master URL, and the processes of the services and of the cluster this process
    started (their CPU is counted apart from the driver's)."""
    from benchmarks.flink.watcher import children_of
    from twophase.integration.jobs.flights import FlightsEndpoints
    from twophase.integration.services import kafka_service, s3_service, spark_cluster_service

    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(kafka_service(BROKER_SETTINGS))
        s3 = stack.enter_context(s3_service())
        services = children_of(os.getpid())
        master = stack.enter_context(spark_cluster_service())
        workers = [p for p in children_of(os.getpid()) if p not in services]
        yield FlightsEndpoints(bootstrap, s3, keys_from_environment=True), master, services, workers


def session(stack: contextlib.ExitStack, master: str, endpoints: Any, event_log_dir: Path) -> SparkSession:
    """The session on the cluster: the flights job's cluster conf (the wheel shipped, jars on the
    class path) with ``spark-hadoop-cloud`` added for the magic committer, the FAIR scheduler for the
    expert recipe's writer threads, and ``s3://`` served by S3A (the Delta table's URI is
    ``s3://``, which delta-rs reads as is and Spark reads through S3A)."""
    from twophase.integration.jobs.flights_cluster import cluster_conf, driver_environment, jar_conf
    from twophase.integration.spark import build_spark_session, spark_jars
    from twophase.integration.spark_shipping import build_wheel, executor_python, ship_conf

    python = executor_python()
    shipping = ship_conf(build_wheel(), str(python))
    stack.enter_context(driver_environment(endpoints.s3, python))
    conf = {
        **cluster_conf(master, endpoints.s3, shipping, event_log_dir),
        **jar_conf(spark_jars()),
        **SESSION_SETTINGS,
    }
    spark = build_spark_session("twophase-bench-partitions", extra_conf=conf, s3=endpoints.s3, s3_keys=False)
    stack.callback(spark.stop)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


SESSION_SETTINGS = {
    "spark.scheduler.mode": "FAIR",
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "spark.files.io.connectionTimeout": "600s",
}
"""Beyond the flights job's cluster conf (``flights_cluster.cluster_conf``: one core per executor,
4 task attempts, no speculation, UTC)."""


def _epoch(m: Any) -> dict[str, Any]:
    """twophase's metrics of one epoch (``EpochMetrics``), seconds."""
    return {
        "checkpoint": m.checkpoint_id,
        "partitions": m.partitions,
        "records": m.records,
        "epoch_s": round(m.epoch_ms / 1000, 3),
        "write_s": round(m.write_ms / 1000, 3),
        "publish_s": round(m.persist_ms / 1000, 3),
        "commit_s": round(m.commit_ms / 1000, 3),
        "coordinator_share": round(m.coordinator_share, 4),
        "committed": m.transactions_committed,
        "aborted": m.transactions_aborted,
    }


def _partial(row: Mapping[str, Any]) -> None:
    """``row`` on stderr, and as a JSON line appended to ``TWOPHASE_BENCH_PARTIAL`` if set."""
    line = json.dumps({**row, "at": time.strftime("%H:%M:%S"), "load": os.getloadavg()}, default=str)
    print(line, file=sys.stderr, flush=True)
    partial = os.environ.get("TWOPHASE_BENCH_PARTIAL")
    if partial:
        with open(partial, "a") as f:
            f.write(line + "\n")


class Partitions:
    """The runs of one benchmark: both sides at each point, each run read back."""

    def __init__(self, spark: SparkSession, endpoints: Any, scratch: Path, services: list[int]) -> None:
        from benchmarks.bench_fanout import FanOut

        self.spark = spark
        self.endpoints = endpoints
        self.scratch = scratch
        self.run_id = uuid.uuid4().hex[:8]
        self.fanout = FanOut(spark, endpoints, scratch, self.run_id, services)
        self.windows: list[tuple[str, float, float]] = []
        self.readers = dataclasses.replace(endpoints, keys_from_environment=False)
        self.results: dict[tuple[int, str], list[dict[str, Any]]] = {}
        """(partitions, side) → its runs, as :meth:`measured` records them."""

    def spec(self, n: int, side: str, r: int) -> Any:
        """Round ``r``'s run of ``side`` at ``n`` partitions: everything on S3 in the fan-out
        benchmark's bucket, ``epochs()`` micro-batches of :data:`FILES_PER_TRIGGER` days (the
        warm-up, round -1: one)."""
        from benchmarks.bench_fanout import BUCKET
        from twophase.integration.jobs.flights_spec import FlightsJobSpec

        job = f"parts_{n}_{side}_{self.run_id}_{r + 1}"
        return FlightsJobSpec.on_s3_bucket(
            job,
            self.scratch / job,
            bucket=BUCKET,
            days=(epochs() if r >= 0 else 1) * FILES_PER_TRIGGER,
            files_per_trigger=FILES_PER_TRIGGER,
            shuffle_partitions=n,
            kafka_partitions=KAFKA_TOPIC_PARTITIONS,
        )

    def twophase(self, n: int, r: int) -> dict[str, Any]:
        """The one-pass job into the three 2PC sinks; its epochs' own metrics."""
        from twophase.connectors.kafka import KafkaSink
        from twophase.coordinator.spark.job import Job
        from twophase.coordinator.state.job_lifecycle import JobState
        from twophase.integration.jobs.flights import KAFKA_SINK, build_sinks, flights_stream, runtime_config

        spec = self.spec(n, "twophase", r)
        spec.save()
        kafka, files, delta = build_sinks(spec, self.endpoints)
        kafka = KafkaSink(KAFKA_SINK, dataclasses.replace(kafka.config, **KAFKA_SINK_SETTINGS))
        job = Job(
            self.spark,
            spec.job_id,
            spec.checkpoint_dir,
            job_id=spec.job_id,
            config=runtime_config(spec),
            storage_options=self.endpoints.store_options(spec.store),
        )
        for sink in (kafka, files, delta):
            job.sink(sink)
        handle = job.start(
            flights_stream(self.spark, spec),
            spark_checkpoint_location=spec.spark_checkpoint,
            trigger={"availableNow": True},
            query_name=f"flights_{spec.job_id}",
        )
        reported = 0
        while not handle.await_termination(1.0):
            for m in handle.metrics[reported:]:  # each epoch as it ends: what a run cut short still says
                _partial({"partitions": n, "side": "twophase", "round": r, "epoch": _epoch(m)})
                reported += 1
        if handle.status is not JobState.FINISHED:
            raise RuntimeError(f"twophase at {n} partitions ended {handle.status}")
        return {"spec": spec, "epochs": [_epoch(m) for m in handle.metrics]}

    def spark_expert(self, n: int, r: int) -> dict[str, Any]:
        """bench_fanout's tuned expert recipe on the same stream; its per-writer times."""
        stages: dict[str, list[dict[str, float]]] = {}
        self.fanout.at = f"N{n}"
        run = self.fanout.recipe(lambda side, rr: self.spec(n, side, rr), "spark_expert", "expert", 1, stages)
        spec = run(r)
        spent = stages.get("spark_expert", [{}])[0]  # none for the warm-up
        return {"spec": spec, "writers_ms": {k: round(v, 1) for k, v in spent.items()}}

    def read_back(self, side: str, spec: Any) -> dict[str, Any]:
        """Every sink of ``spec`` read back with readers that are not the writers.

        Raises:
            AssertionError: a sink does not hold every record exactly once.
        """
        from twophase.integration.jobs.flights_sinks import verify_run
        from twophase.integration.verify import compare, expected_input, read_delta, read_files, read_kafka

        started = time.perf_counter()
        if side == "twophase":
            report = verify_run(spec, self.readers)
            if not report.ok:
                raise AssertionError(f"twophase run {spec.job_id} is not exact: {report}")
            sinks = {s.sink: s.records for s in report.sinks}
        else:
            expected = expected_input(spec)
            from twophase.integration.verify import _content_schema

            kafka, _ = read_kafka(self.endpoints.kafka_bootstrap, spec.topic)
            files, _ = read_files(spec, self.readers)
            delta, _ = read_delta(spec, self.readers, None)
            sinks = {}
            for name, table in (("kafka", kafka), ("s3", files), ("delta", delta)):
                found = compare(name, name, table.cast(_content_schema(table)), expected)
                if not found.exactly_once:
                    raise AssertionError(f"Spark's writers, {name}: not exact: {found}")
                sinks[name] = found.records
        return {"read_back_s": round(time.perf_counter() - started, 1), "records": sinks}

    def measured(self, n: int, side: str, cpu: Mapping[str, Callable[[], float]]) -> Callable[[int], object]:
        """One run of ``side`` at ``n`` for :func:`common.side_by_side`: its window, CPU-seconds
        and load; read back after it (untimed)."""
        results = self.results.setdefault((n, side), [])

        def run(r: int) -> object:
            before = {k: f() for k, f in cpu.items()}
            load = os.getloadavg()[0]
            start = time.time() * 1000
            out: dict[str, Any] = getattr(self, side)(n, r)
            end = time.time() * 1000
            self.windows.append((f"N{n}/{side}|{r}", start, end))
            row = {
                "side": side,
                "partitions": n,
                "round": r,
                "wall_s": round((end - start) / 1000, 2),
                **{f"{k}_cpu_s": round(f() - before[k], 1) for k, f in cpu.items()},
                "load_1m_before": round(load, 2),
                "load_1m_after": round(os.getloadavg()[0], 2),
                **{k: v for k, v in out.items() if k != "spec"},
            }
            row.update(self.read_back(side, out["spec"]))
            results.append(row)
            _partial(row)
            return None

        return run


def summarize(
    results: Mapping[tuple[int, str], list[dict[str, Any]]], per_batch: Mapping[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Per point: each run with its micro-batches (from the event log), and the ratios."""
    out: dict[str, Any] = {}
    for n in sorted({n for n, _ in results}):
        point: dict[str, Any] = {"runs": {}}
        for side in SIDES:
            for row in results.get((n, side), []):
                row["batches"] = per_batch.get(f"N{n}/{side}|{row['round']}", [])
                row["outside_batches_s"] = round(row["wall_s"] - sum(b["wall_s"] for b in row["batches"]), 2)
                point["runs"][f"{side}|{row['round']}"] = row
        # each run's first epoch pays its own warm-up (topic, table, the Python workers' imports)
        ours = [b["wall_s"] for row in results.get((n, "twophase"), []) for b in row["batches"][1:]]
        theirs = [b["wall_s"] for row in results.get((n, "spark_expert"), []) for b in row["batches"][1:]]
        walls = {s: [row["wall_s"] for row in results.get((n, s), [])] for s in SIDES}
        point["spark_over_twophase"] = {
            "epoch (median of the epochs after each run's first)": (
                round(statistics.median(theirs) / statistics.median(ours), 3) if ours and theirs else None
            ),
            "run": round(statistics.median(walls["spark_expert"]) / statistics.median(walls["twophase"]), 3)
            if all(walls.values())
            else None,
        }
        out[f"N={n}"] = point
    return out


def run() -> dict[str, Any]:
    """Run the benchmark; see the module docstring."""
    from benchmarks.bench_fanout import BUCKET, EXPERT_TUNED, KAFKA_TUNED
    from benchmarks.flink.watcher import tree_cpu_s
    from twophase.integration.jobs.flights_cluster import stage_input

    start = common.machine()
    started_at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    rounds = common.runs(1)
    with (
        cluster() as (endpoints, master, services, workers),
        tempfile.TemporaryDirectory(
            prefix="twophase-bench-partitions-", dir=os.environ.get("TWOPHASE_BENCH_WORK_DIR")
        ) as tmp,
        contextlib.ExitStack() as stack,
    ):
        events = Path(tmp) / "events"
        spark = session(stack, master, endpoints, events)
        bench = Partitions(spark, endpoints, Path(tmp), services)
        endpoints.s3.ensure_bucket(BUCKET)
        for r in (-1, 0):  # once, untimed: both sides read the same S3 copy (the warm-up a shorter one)
            stage_input(bench.spec(1, "stage", r), endpoints.s3)
        driver = [os.getpid()]
        cpu: dict[str, Callable[[], float]] = {
            # the driver's Python and JVM (the JVM is its child), without the services and cluster
            "driver": lambda: tree_cpu_s(driver, exclude=[*services, *workers]),
            # the cluster's daemons, executors and their Python workers (temporary cluster only)
            "cluster": lambda: tree_cpu_s(workers),
            "services": lambda: tree_cpu_s(services),
        }
        for side in SIDES if warm_up() else ():  # untimed: Python workers, imports, first table and topic
            bench.read_back(side, getattr(bench, side)(WARM_UP_PARTITIONS, -1)["spec"])
        for n in partitions():
            writers = {side: bench.measured(n, side, cpu) for side in SIDES}
            common.side_by_side(writers, rounds)
        stack.close()  # the event log is complete once the session stops
        logs = sorted(p for p in events.iterdir() if p.is_file()) if events.is_dir() else []
        keep = os.environ.get("TWOPHASE_BENCH_EVENTS")
        if keep and events.is_dir():  # the raw event log, for reading it further
            shutil.copytree(events, keep, dirs_exist_ok=True)
        per_batch: dict[str, list[dict[str, Any]]] = {}
        for log in logs:
            per_batch.update(batches(log, bench.windows))
        points = summarize(bench.results, per_batch)
    return {
        "started": started_at,
        "master": master,
        "epochs per run": epochs(),
        "rows per epoch": "31 days of flights (about 27k)",
        "rounds": rounds,
        "settings": {
            "twophase kafka sink": KAFKA_SINK_SETTINGS,
            "kafka topic partitions": KAFKA_TOPIC_PARTITIONS,
            "spark kafka producer": KAFKA_TUNED,
            "spark expert tuned": EXPERT_TUNED,
            "magic committer": common.MAGIC_COMMITTER,
            "session": SESSION_SETTINGS,
        },
        "points": points,
        **common.load_at_end(start),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2, default=str))
