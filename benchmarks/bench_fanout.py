"""Benchmark: the flights job's three-sink fan-out against what users write today (issue #18 §7,
issue #44 item 2).

Same input stream, same services, same ``local[2]`` session, side by side in one run:

- ``twophase``: the flights job (:func:`twophase.integration.jobs.flights.run_flights`): one
  streaming query whose every micro-batch goes to the Kafka, S3 Parquet and Delta 2PC sinks in the
  same checkpoints, exactly once, ending with the final checkpoint;
- ``foreach_batch``: the same stream (:func:`~twophase.integration.jobs.flights.flights_stream`)
  with ``foreachBatch``: ``persist()`` the batch, then Spark's own three writers one after the
  other — ``format("kafka")`` (key/value, the same topic settings), ``partitionBy("origin",
  "month").parquet("s3a://…")`` through the default (rename) committer and ``format("delta")``
  (the same kind of location as the 2PC Delta sink: local) — then ``unpersist()``. At-least-once:
  a failure between the writers, or a retried batch, duplicates data.
- ``foreach_batch_expert``: the recipe a Spark performance engineer writes (issue #44 item 2):
  ``persist()`` and ``count()`` the batch (materialized once), then the three writers at once from
  three driver threads, each in its own pool of the FAIR scheduler
  (``spark.scheduler.mode=FAIR``); Parquet through the S3A **magic committer** (``spark-hadoop-cloud``'s
  ``PathOutputCommitProtocol`` and ``BindingParquetOutputCommitter``, ``fs.s3a.committer.name=magic``:
  no rename, no copy); Delta written idempotently (``txnAppId`` = the run, ``txnVersion`` = the
  batch id: a replayed batch is skipped); the Kafka writer with the producer settings twophase's
  sink uses, stated in :data:`KAFKA_TUNED`. Tuned from Spark's own metrics of its first version
  (BENCHMARKS.md): Delta's snapshot state, which every ``txnVersion`` check rebuilds, on one
  partition per core (:data:`EXPERT_TUNED`), and the three writer threads kept for the run.
- ``foreach_batch_expert_first`` (at the first sweep point only): the expert recipe as first
  built (Delta's default of 50 snapshot partitions, three new threads per batch), for the
  breakdown beside the tuned one.
- ``foreach_batch_recompute`` (at the first sweep point only): the serial recipe without
  ``persist()``: each writer recomputes the batch's plan. A new user's first try.

The sweep (:data:`SWEEP`): about 28k, 280k and 2.8M rows per micro-batch, ``FILES_PER_TRIGGER``
days a batch with every flight repeated 1, 10 or 100 times (``flights_stream(copies=…)``, the same
stream for every writer). Rounds rotate which goes first. Reported per point: median wall-clock
seconds per run (min–max), rows/s, the CPU-seconds of the engine's process tree per run (the
driver's Python, the JVM, its Python workers; the services' own processes are reported apart), and
the ratio of twophase to each recipe (> 1: twophase is faster), the better recipe first.

The breakdown (untimed by ``side_by_side``, from the same runs): the one-pass job's epochs split
into the Spark job that writes and pre-commits (``write_ms``: hand-off and every sink's writes),
the checkpoint's publish and the commit (the driver's work), the rest of each epoch (planning,
Spark's own bookkeeping) and the time outside epochs (query start and stop, the final
checkpoint); each recipe's batches split per writer (``persist``, ``kafka``, ``parquet``,
``delta``; the expert recipe's ``writers`` is the three together). At the first point the one-pass
job also runs with each sink alone (``twophase_kafka``, ``twophase_s3``, ``twophase_delta``).

Spark's own metrics per writer and phase (``spark_jobs``): every job a recipe's writer submits
carries the local property :data:`PHASE_PROPERTY` (``<point>/<writer>|<round>|<phase>``), Delta's
internal jobs included (they run in the writer's thread); the session writes its event log and
:func:`job_breakdown` sums each phase's jobs, tasks, executor CPU, task run time, GC and job wall
time from it (medians over the rounds). Beside them: each phase's CPU on the driver JVM thread
that ran it (``*_driver_cpu_ms``: planning, the committer's job commit, Delta's commit) and the
CPU of the JVM's process tree per run (``jvm_cpu_s``: tasks, driver threads, GC, JIT and the
Python workers the JVM forks; the engine's ``cpu_s`` adds the driver's Python).

``python -m benchmarks.bench_fanout``; ``TWOPHASE_BENCH_RUNS`` sets the rounds,
``TWOPHASE_BENCH_FANOUT_SWEEP=28k,280k`` the points, ``TWOPHASE_BENCH_SCALE`` the share of each
point's days (see :mod:`benchmarks.common`), ``TWOPHASE_BENCH_FANOUT_WRITERS`` a subset of the
recipes (twophase always runs), ``TWOPHASE_BENCH_FANOUT_WARM_UP=first`` warms up at the first
point only, ``TWOPHASE_BENCH_FANOUT_BATCHES=28k=4,280k=1`` fewer micro-batches per run at a point,
``TWOPHASE_BENCH_FANOUT_RUNS`` a file that receives each run as a JSON line,
``TWOPHASE_BENCH_FANOUT_EVENTS`` a folder that receives the event
log, ``TWOPHASE_BENCH_FANOUT_PARTIAL`` a file that receives each point's figures as it ends, and
``TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY`` the ``local[2]`` JVM's heap for every writer
(``spark.driver.memory``; Spark's default of 1g when unset: the serial recipe's ``persist()`` of a
2.8M-row batch does not fit it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DAYS = 365
FILES_PER_TRIGGER = 31
ROUNDS = 3
BUCKET = "twophase-bench-fanout"

SWEEP: dict[str, tuple[int, int]] = {"28k": (1, 365), "280k": (10, 93), "2.8M": (100, 62)}
"""Rows per micro-batch → (copies of each flight, days of input). A batch is ``FILES_PER_TRIGGER``
days (about 28.6k flights) repeated ``copies`` times; the larger points read fewer days (3 and 2
batches) so that a run takes minutes, not hours, on two cores."""

KAFKA_TUNED = {
    "kafka.linger.ms": "20",
    "kafka.batch.size": "1000000",
    "kafka.compression.type": "lz4",
    "kafka.acks": "all",
    "kafka.enable.idempotence": "true",
}
"""The expert recipe's producer: what twophase's Kafka sink runs with in the flights job
(``linger.ms=20``, ``compression.type=lz4``; librdkafka's ``batch.size`` default of 1,000,000 bytes;
``acks=all`` and idempotence, which a transactional producer implies). The Java producer's own
defaults are ``linger.ms`` 0 (5 from Kafka 4.0), ``batch.size`` 16,384 and no compression."""

EXPERT_TUNED = {"spark.databricks.delta.snapshotPartitions": "2"}
"""What the tuned expert recipe sets beyond the first one (issue #44 item 2), from Spark's own
metrics of the first (see BENCHMARKS.md): each write with ``txnAppId``/``txnVersion`` reads the
table's set transactions from the snapshot's full state (delta-spark 4.4's
``Snapshot.transactions`` computes the state; the ``.crc`` file's copy is not used there), a Spark
job of ``spark.databricks.delta.snapshotPartitions`` tasks, 50 by default: on 2 cores and a table
of a few dozen files, 50 tasks a batch cost more CPU than the three writers together. Delta's own
description of the setting: "Number of partitions to use when building a Delta Lake snapshot";
one per core here."""

KAFKA_FIRST_TRY = {"kafka.linger.ms": "20", "kafka.compression.type": "lz4"}
"""The serial recipes' producer settings, as earlier runs of this benchmark had them."""


def driver_memory() -> str | None:
    """``TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY``, the ``local[2]`` JVM's heap for every writer (a
    ``spark.driver.memory`` value such as ``6g``), or ``None`` for Spark's default (1g).

    Raises:
        ValueError: the value is not a JVM memory size (digits and one of k, m, g, t).
    """
    heap = os.environ.get("TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY", "").strip().lower()
    if not heap:
        return None
    if not re.fullmatch(r"[1-9][0-9]*[kmgt]", heap):
        raise ValueError(
            f"TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY must be a JVM memory size such as 6g, got {heap!r}"
        )
    return heap


def sweep_points() -> dict[str, tuple[int, int]]:
    """The points ``TWOPHASE_BENCH_FANOUT_SWEEP`` names (all of :data:`SWEEP` by default)."""
    wanted = os.environ.get("TWOPHASE_BENCH_FANOUT_SWEEP")
    names = [n.strip() for n in wanted.split(",")] if wanted else list(SWEEP)
    return {n: SWEEP[n] for n in names}


PHASE_PROPERTY = "twophase.bench.phase"
"""The Spark local property naming the run and phase (``<writer>|<round>|<phase>``) of the jobs a
driver thread submits: Spark copies a thread's local properties into each job's
``SparkListenerJobStart``, so the event log attributes every job (Delta's own included) to it."""


JOB_FIELDS: dict[str, float] = {
    "jobs": 0,
    "tasks": 0,
    "task_cpu_s": 0.0,
    "task_run_s": 0.0,
    "gc_s": 0.0,
    "job_wall_s": 0.0,
}
"""What :func:`job_breakdown` sums per phase, each starting at 0."""


def job_breakdown(
    event_log: Path, windows: Sequence[tuple[str, float, float]] = ()
) -> dict[str, dict[str, float]]:
    """Spark's own task metrics per tagged phase (:data:`PHASE_PROPERTY`), from one event log.

    Returns:
        ``{"<writer>|<round>|<phase>": {"jobs", "tasks", "task_cpu_s" (executor CPU, from
        ``Executor CPU Time`` + ``Executor Deserialize CPU Time``), "task_run_s" (``Executor Run
        Time``), "gc_s", "job_wall_s" (submission to completion, summed)}}``; a Delta job (its
        description starts with ``Delta``) under ``<phase>/delta-log`` too. Jobs without the
        property go to ``"<label>|other"`` of the window ``(label, start_ms, end_ms)`` of
        ``windows`` their submission falls in (a run whose query thread did not inherit the
        property), else to ``"untagged"``.
    """
    stage_job: dict[int, str] = {}
    submitted: dict[int, tuple[str, int]] = {}
    out: dict[str, dict[str, float]] = {}

    def add(key: str, field: str, value: float) -> None:
        out.setdefault(key, dict(JOB_FIELDS))[field] += value

    for event in common.spark_events(event_log):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            at = event.get("Submission Time", 0)
            inside = [label for label, start, end in windows if start <= at <= end]
            key = props.get(PHASE_PROPERTY) or (f"{inside[0]}|other" if inside else "untagged")
            if str(props.get("spark.job.description", "")).startswith("Delta"):
                key += "/delta-log"
            for stage in event.get("Stage IDs", ()):
                stage_job[stage] = key
            submitted[event["Job ID"]] = (key, event.get("Submission Time", 0))
            add(key, "jobs", 1)
        elif kind == "SparkListenerJobEnd" and event.get("Job ID") in submitted:
            key, at = submitted.pop(event["Job ID"])
            add(key, "job_wall_s", (event.get("Completion Time", at) - at) / 1000)
        elif kind == "SparkListenerTaskEnd":
            key = stage_job.get(event.get("Stage ID", -1), "untagged")
            m = event.get("Task Metrics") or {}
            add(key, "tasks", 1)
            cpu_ns = m.get("Executor CPU Time", 0) + m.get("Executor Deserialize CPU Time", 0)
            add(key, "task_cpu_s", cpu_ns / 1e9)
            add(key, "task_run_s", m.get("Executor Run Time", 0) / 1000)
            add(key, "gc_s", m.get("JVM GC Time", 0) / 1000)
    return {key: {field: round(value, 3) for field, value in row.items()} for key, row in out.items()}


def phase_medians(jobs: dict[str, dict[str, float]], writer: str, rounds: int) -> dict[str, dict[str, float]]:
    """``writer``'s phases from :func:`job_breakdown`, each field's median over ``rounds`` rounds
    (a round without the phase counts 0)."""
    phases = {key.split("|", 2)[2] for key in jobs if key.startswith(f"{writer}|") and key.count("|") == 2}
    return {
        phase: {
            field: round(
                statistics.median(
                    jobs.get(f"{writer}|{r}|{phase}", JOB_FIELDS)[field] for r in range(rounds)
                ),
                2,
            )
            for field in JOB_FIELDS
        }
        for phase in sorted(phases)
    }


class FanOut:
    """One benchmark run's Spark session, services and scratch space; :meth:`point` measures one
    sweep point (every writer, side by side)."""

    def __init__(
        self, spark: SparkSession, endpoints: Any, scratch: Path, run_id: str, services: list[int]
    ) -> None:
        self.spark = spark
        self.endpoints = endpoints
        self.bootstrap: str = endpoints.kafka_bootstrap
        self.scratch = scratch
        self.run_id = run_id
        self.services = services
        """The services' processes (Kafka, MinIO): their CPU is reported apart from the engine's."""
        self.windows: list[tuple[str, float, float]] = []
        """Each run's ``(<point>/<writer>|<round>, start, end)``, epoch ms (:func:`job_breakdown`)."""
        self.at = ""
        """The sweep point being measured (tags the jobs, :data:`PHASE_PROPERTY`)."""

    def spec(self, point: str, tag: str, r: int, days: int) -> Any:
        """The job spec of ``tag``'s round ``r`` (-1: the warm-up) at ``point``."""
        from twophase.integration.jobs.flights_spec import FlightsJobSpec

        job = f"fanout_{point.replace('.', '_')}_{tag}_{self.run_id}_{r + 1}"
        return FlightsJobSpec(
            job_id=job,
            work_dir=str(self.scratch / job),
            days=days,
            files_per_trigger=FILES_PER_TRIGGER,
            bucket=BUCKET,
        )

    def point(self, point: str, copies: int, days: int, first: bool) -> dict[str, Any]:
        """Every writer at ``copies`` × ``days``, ``common.runs(ROUNDS)`` rounds after a warm-up.

        Returns:
            ``{"rows", "copies", "days", "writers", "ratios", "breakdown_ms"}``.
        """
        from benchmarks.flink.watcher import tree_cpu_s
        from twophase.integration.jobs import flights_data

        rows = flights_data.land(days).rows * copies
        self.at = point
        stages: dict[str, list[dict[str, float]]] = {}
        cpu: dict[str, list[float]] = {}
        service_cpu: dict[str, list[float]] = {}

        jvm_cpu: dict[str, list[float]] = {}
        jvm = [int(self.spark._jvm.java.lang.ProcessHandle.current().pid())]  # type: ignore[union-attr]

        def metered(name: str, fn: Callable[[int], object]) -> Callable[[int], object]:
            def measured(r: int) -> object:
                engine, svc = tree_cpu_s([os.getpid()], exclude=self.services), tree_cpu_s(self.services)
                in_jvm = tree_cpu_s(jvm)
                # the run's jobs not tagged by a phase of their own (the one-pass job's, the stream's)
                self.spark.sparkContext.setLocalProperty(PHASE_PROPERTY, f"{point}/{name}|{r}|other")
                start = time.time() * 1000
                try:
                    out = fn(r)
                finally:
                    self.spark.sparkContext.setLocalProperty(PHASE_PROPERTY, None)  # type: ignore[arg-type]
                    self.windows.append((f"{point}/{name}|{r}", start, time.time() * 1000))
                if r >= 0:
                    cpu.setdefault(name, []).append(tree_cpu_s([os.getpid()], exclude=self.services) - engine)
                    jvm_cpu.setdefault(name, []).append(tree_cpu_s(jvm) - in_jvm)
                    service_cpu.setdefault(name, []).append(tree_cpu_s(self.services) - svc)
                    figures = {"cpu_s": cpu[name][-1], "jvm_cpu_s": jvm_cpu[name][-1]}
                    figures["services_cpu_s"] = service_cpu[name][-1]
                    self.log_run(point, name, r, start, figures, stages.get(name, [{}])[-1])
                return out

            return measured

        def spec(tag: str, r: int) -> Any:
            return self.spec(point, tag, r, days)

        writers: dict[str, Callable[[int], object]] = {
            "twophase": self.one_pass(spec, "twophase", ("kafka", "s3", "delta"), rows, copies, stages),
            "foreach_batch": self.recipe(spec, "foreach_batch", "serial", copies, stages),
            "foreach_batch_expert": self.recipe(spec, "foreach_batch_expert", "expert", copies, stages),
        }
        if first:
            writers["foreach_batch_expert_first"] = self.recipe(
                spec, "foreach_batch_expert_first", "expert_first", copies, stages
            )
            writers["foreach_batch_recompute"] = self.recipe(
                spec, "foreach_batch_recompute", "recompute", copies, stages
            )
            for sink in ("kafka", "s3", "delta"):
                writers[f"twophase_{sink}"] = self.one_pass(
                    spec, f"twophase_{sink}", (sink,), rows, copies, stages
                )
        wanted = os.environ.get("TWOPHASE_BENCH_FANOUT_WRITERS")
        if wanted:  # a diagnostic run of some writers (twophase always: the ratios need it)
            names = {"twophase", *(n.strip() for n in wanted.split(","))}
            writers = {name: fn for name, fn in writers.items() if name in names}
        writers = {name: metered(name, fn) for name, fn in writers.items()}

        def check(writer: str, r: int, result: object) -> None:
            if writer.startswith("foreach_batch") and r == 0 and result is not None:
                count = self.spark.read.format("delta").load(result.delta_uri).count()  # type: ignore[attr-defined]
                assert count == rows, count
                magic = self.committed_by(result.s3_prefix) == "magic"  # type: ignore[attr-defined]
                if magic is not writer.startswith("foreach_batch_expert"):
                    raise AssertionError(f"{writer}: Parquet committed by the magic committer: {magic}")

        # every path once: JVM, Python workers, jars, connection pools; with
        # TWOPHASE_BENCH_FANOUT_WARM_UP=first only at the first point (the later points find every
        # path warm: each writer ran 1 + rounds times in this JVM already)
        if first or os.environ.get("TWOPHASE_BENCH_FANOUT_WARM_UP") != "first":
            for warm_up in writers.values():
                warm_up(-1)
        times = common.side_by_side(writers, common.runs(ROUNDS), check)
        recipes = sorted(
            (w for w in writers if w.startswith("foreach_batch")), key=lambda w: statistics.median(times[w])
        )
        return {
            "rows": rows,
            "copies": copies,
            "days": days,
            "writers": {
                w: {
                    **common.summary(t, rows),
                    "cpu_s": round(statistics.median(cpu[w]), 1),
                    "jvm_cpu_s": round(statistics.median(jvm_cpu[w]), 1),
                    "services_cpu_s": round(statistics.median(service_cpu[w]), 1),
                }
                for w, t in times.items()
            },
            # the better (faster) recipe first
            "ratios": {f"twophase_over_{w}": common.ratio(times, "twophase", w) for w in recipes},
            "breakdown_ms": {
                w: {k: round(statistics.median(run.get(k, 0.0) for run in runs), 1) for k in runs[0]}
                for w, runs in stages.items()
            },
        }

    def log_run(
        self,
        point: str,
        writer: str,
        r: int,
        start_ms: float,
        figures: dict[str, float],
        breakdown: dict[str, float],
    ) -> None:
        """One timed run's figures (CPU-seconds) and breakdown (ms) as a JSON line appended to
        ``TWOPHASE_BENCH_FANOUT_RUNS`` (if set): what a sweep cut short still reports (its wall
        seconds include the run's own set-up, the topic's creation)."""
        path = os.environ.get("TWOPHASE_BENCH_FANOUT_RUNS")
        if not path:
            return
        line = {
            "point": point,
            "writer": writer,
            "round": r,
            "wall_s": round(time.time() - start_ms / 1000, 3),
            **{k: round(v, 2) for k, v in figures.items()},
            "breakdown_ms": {k: round(v, 1) for k, v in breakdown.items()},
            "load": os.getloadavg(),
        }
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")

    def committed_by(self, prefix: str) -> str | None:
        """:func:`common.committed_by` in the benchmark's bucket."""
        return common.committed_by(self.endpoints.s3.boto3_client(), BUCKET, prefix)

    def one_pass(
        self,
        spec: Callable[[str, int], Any],
        tag: str,
        sinks: tuple[str, ...],
        rows: int,
        copies: int,
        stages: dict[str, list[dict[str, float]]],
    ) -> Callable[[int], object]:
        """The flights job into ``sinks``, every record exactly once; its breakdown into ``stages``."""
        from twophase.coordinator.state.job_lifecycle import JobState
        from twophase.integration.jobs.flights import run_flights

        def run_job(r: int) -> object:
            s = dataclasses.replace(spec(tag, r), sinks=sinks)
            start = time.perf_counter()
            result = run_flights(self.spark, s, self.endpoints, copies=copies)
            wall = (time.perf_counter() - start) * 1000
            assert result.state is JobState.FINISHED, result.state
            assert sum(m.records for m in result.epochs) == rows
            epoch = sum(m.epoch_ms for m in result.epochs)
            write = sum(m.write_ms for m in result.epochs)
            driver = sum(m.persist_ms + m.commit_ms for m in result.epochs)
            if r >= 0:
                stages.setdefault(tag, []).append(
                    {
                        "write_ms": write,
                        "driver_ms": driver,
                        "rest_ms": epoch - write - driver,
                        # query start and stop, the final checkpoint, the job's own set-up
                        "outside_epochs_ms": wall - epoch,
                    }
                )
            return None

        return run_job

    def recipe(
        self,
        spec: Callable[[str, int], Any],
        tag: str,
        how: str,
        copies: int,
        stages: dict[str, list[dict[str, float]]],
    ) -> Callable[[int], object]:
        """``foreachBatch`` with Spark's three writers: ``how`` is ``serial`` (persisted),
        ``recompute`` or ``expert`` (see the module docstring); per-writer times into ``stages``."""
        from support.kafka.support import create_topic

        from twophase.integration.jobs.flights import KEY_COLUMN, TYPED_COLUMNS, VALUE_COLUMN, flights_stream

        spark = self.spark

        expert = how in ("expert", "expert_first")

        def run_recipe(r: int) -> object:
            s = spec(tag, r)
            # the tuned recipe keeps its three writer threads for the whole run (each Python
            # thread is pinned to a JVM thread of its own); the first one started three per batch
            kept = ThreadPoolExecutor(3, thread_name_prefix="fan-out") if how == "expert" else None
            create_topic(self.bootstrap, s.topic, s.kafka_partitions)
            parquet = f"s3a://{BUCKET}/{s.s3_prefix}"
            spent: dict[str, float] = {}

            threads = spark._jvm.java.lang.management.ManagementFactory.getThreadMXBean()  # type: ignore[union-attr]

            def timed(stage: str, step: Callable[[], object]) -> None:
                """``step`` with its jobs tagged ``stage`` (:data:`PHASE_PROPERTY`); its wall time
                and the CPU of the driver's JVM thread that runs it (planning, the committer's job
                commit, Delta's log) into ``spent``."""
                phase = stage.removesuffix("_ms")
                before = spark.sparkContext.getLocalProperty(PHASE_PROPERTY)
                spark.sparkContext.setLocalProperty(PHASE_PROPERTY, f"{self.at}/{tag}|{r}|{phase}")
                cpu, start = threads.getCurrentThreadCpuTime(), time.perf_counter()
                try:
                    step()
                finally:
                    spent[stage] = spent.get(stage, 0.0) + (time.perf_counter() - start) * 1000
                    driver_cpu = (threads.getCurrentThreadCpuTime() - cpu) / 1e6
                    spent[f"{phase}_driver_cpu_ms"] = spent.get(f"{phase}_driver_cpu_ms", 0.0) + driver_cpu
                    spark.sparkContext.setLocalProperty(PHASE_PROPERTY, before)  # type: ignore[arg-type]

            def to_kafka(batch: Any) -> None:
                records = batch.selectExpr(f"CAST({KEY_COLUMN} AS STRING) AS key", VALUE_COLUMN)
                tuned = KAFKA_TUNED if expert else KAFKA_FIRST_TRY
                writer = records.write.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
                writer.options(**tuned).option("topic", s.topic).save()

            def to_parquet(typed: Any) -> None:
                typed.write.mode("append").partitionBy("origin", "month").parquet(parquet)

            def to_delta(typed: Any, batch_id: int) -> None:
                writer = typed.write.format("delta").mode("append")
                if expert:  # idempotent: a replayed batch is skipped
                    writer = writer.option("txnAppId", s.job_id).option("txnVersion", batch_id)
                writer.save(s.delta_uri)

            def in_pool(pool: str, step: Callable[[], object]) -> None:
                spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
                try:
                    step()
                finally:
                    spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]

            def fan_out(batch: Any, batch_id: int) -> None:
                typed = batch.select(*TYPED_COLUMNS)
                if expert:
                    timed("persist_ms", lambda: batch.persist().count())
                    steps = {
                        "kafka": lambda: timed("kafka_ms", lambda: to_kafka(batch)),
                        "parquet": lambda: timed("parquet_ms", lambda: to_parquet(typed)),
                        "delta": lambda: timed("delta_ms", lambda: to_delta(typed, batch_id)),
                    }

                    def all_three() -> None:
                        if kept is not None:
                            for done in [kept.submit(in_pool, name, step) for name, step in steps.items()]:
                                done.result()
                            return
                        with ThreadPoolExecutor(len(steps), thread_name_prefix="fan-out") as pool:
                            for done in [pool.submit(in_pool, name, step) for name, step in steps.items()]:
                                done.result()

                    timed("writers_ms", all_three)
                else:
                    if how == "serial":  # persist() is lazy: the first writer materializes it
                        timed("persist_ms", batch.persist)
                    timed("kafka_ms", lambda: to_kafka(batch))
                    timed("parquet_ms", lambda: to_parquet(typed))
                    timed("delta_ms", lambda: to_delta(typed, batch_id))
                if how != "recompute":
                    timed("persist_ms", batch.unpersist)

            with common.session_conf(
                spark,
                {**common.MAGIC_COMMITTER, **(EXPERT_TUNED if how == "expert" else {})}
                if expert
                else common.CLASSIC_COMMITTER,
            ):
                query = (
                    flights_stream(spark, s, copies)
                    .writeStream.foreachBatch(fan_out)
                    .option("checkpointLocation", s.spark_checkpoint)
                    .trigger(availableNow=True)
                    .start()
                )
                try:
                    query.awaitTermination()
                finally:
                    if kept is not None:
                        kept.shutdown()
            if r >= 0:
                stages.setdefault(tag, []).append(spent)
            return s

        return run_recipe


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    from benchmarks.flink.watcher import children_of
    from twophase.integration.jobs.flights import FlightsEndpoints, flights_spark_session
    from twophase.integration.services import kafka_service, s3_service
    from twophase.integration.spark import spark_jars

    env = common.machine()
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-fanout-"))
    points = sweep_points()
    # TWOPHASE_BENCH_FANOUT_BATCHES="28k=4,280k=1": micro-batches per run at a point (whole batches
    # of FILES_PER_TRIGGER days), fewer than SWEEP's on a machine too loaded for the full input
    batches = {
        name.strip(): int(count)
        for name, _, count in (
            item.partition("=")
            for item in os.environ.get("TWOPHASE_BENCH_FANOUT_BATCHES", "").split(",")
            if item
        )
    }
    hadoop_cloud = common.hadoop_cloud_jar()
    heap = driver_memory()
    results: dict[str, Any] = {}
    with kafka_service() as bootstrap, s3_service() as s3:
        services = children_of(os.getpid())  # started before Spark: every child now is a service
        endpoints = FlightsEndpoints(bootstrap, s3)
        s3.ensure_bucket(BUCKET)
        events = scratch / "events"
        spark = flights_spark_session(
            endpoints,
            event_log_dir=events,
            extra_conf={
                "spark.scheduler.mode": "FAIR",
                "spark.jars": ",".join([*spark_jars(), hadoop_cloud]),
                **({"spark.driver.memory": heap} if heap else {}),
            },
        )
        spark.sparkContext.setLogLevel("ERROR")
        bench = FanOut(spark, endpoints, scratch, uuid.uuid4().hex[:8], services)
        try:
            for i, (point, (copies, point_days)) in enumerate(points.items()):
                days = max(
                    FILES_PER_TRIGGER,
                    min(point_days, round(point_days * common.scaled(1_000_000) / 1_000_000)),
                )
                if point in batches:
                    days = min(point_days, batches[point] * FILES_PER_TRIGGER)
                results[point] = bench.point(point, copies, days, first=i == 0)
                partial = os.environ.get("TWOPHASE_BENCH_FANOUT_PARTIAL")
                if partial:  # each point as it completes (a long sweep may be cut short)
                    done = {"points": results, "windows": bench.windows, "load": os.getloadavg()}
                    Path(partial).write_text(json.dumps(done, indent=2))
        finally:
            spark.stop()
            # Spark's own metrics per writer and phase, read once the event log is complete
            logs = sorted(p for p in events.iterdir() if p.is_file()) if events.is_dir() else []
            jobs: dict[str, dict[str, float]] = {}
            for event_log in logs:
                jobs.update(job_breakdown(event_log, bench.windows))
            for point, result in results.items():
                result["spark_jobs"] = {
                    w: phase_medians(jobs, f"{point}/{w}", common.runs(ROUNDS)) for w in result["writers"]
                }
            keep = os.environ.get("TWOPHASE_BENCH_FANOUT_EVENTS")
            if keep and events.is_dir():  # the raw event log, for reading it further
                shutil.copytree(events, keep, dirs_exist_ok=True)
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "files_per_trigger": FILES_PER_TRIGGER,
        "rounds": common.runs(ROUNDS),
        **env,
        "load_1m_at_end": round(os.getloadavg()[0], 2),
        "settings": {
            "scheduler": "FAIR, one pool per writer thread (expert recipe)",
            "kafka_expert": KAFKA_TUNED,
            "kafka_serial": KAFKA_FIRST_TRY,
            "magic_committer": common.MAGIC_COMMITTER,
            "classic_committer": common.CLASSIC_COMMITTER,
            "hadoop_cloud_jar": Path(hadoop_cloud).name,
            "spark_driver_memory": heap or "1g (Spark's default)",
        },
        "points": results,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
