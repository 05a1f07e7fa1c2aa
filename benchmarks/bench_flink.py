"""Benchmark: the flights job on Flink, all in the JVM, against twophase on Spark, at steady state
on one unbounded Kafka source (issue #44 item 1).

Both engines read ONE pre-filled Kafka topic (10× the flights year by default: 3,367,760 JSON
records, ``flight_id`` unique per copy; produced once by Spark's Kafka writer and reused while the
broker keeps it) as an unbounded source that never ends on its own, do the flights job's work
(three dimension lookups, ``delay_class``, ``sched_dep_at``) and write Kafka, S3 Parquet or both
exactly once:

- ``twophase_<sinks>``: :func:`twophase.integration.jobs.flights.enrich` on Spark's Kafka source
  (``maxOffsetsPerTrigger`` = the records per checkpoint, a ``processingTime`` 0 trigger: one
  checkpoint per micro-batch), the twophase sinks of :func:`~twophase.integration.jobs.flights.start_flights`;
- ``twophase_kafka_staged``, ``twophase_s3_staged``: the same with the one sink's ``write_path="spark"``
  (issue #44 item 4: twophase's JVM Kafka writer; Spark's Parquet writer through twophase's S3A
  committer, under Spark's cloud commit protocol for that writer's runs): the rows stay in the JVM;
- ``flink_<sinks>``: the Java job of ``benchmarks/flink/java`` (Flink SQL; lookups and
  ``make_timestamp``'s arithmetic as Java scalar functions; every plan's EXPLAIN is refused if it
  names a Python operator) in a local MiniCluster, Flink's ``KafkaSink`` exactly once and the
  filesystem sink's Parquet files through the S3 plugin; ``flink_kafka_pooling`` is the Kafka
  sink with the pooled transactional ids (``sink.transaction-naming-strategy`` POOLING).

A watcher in its own process (:mod:`benchmarks.flink.watcher`) samples what each writer has made
visible (the sink topic's last stable offsets; the committed Parquet files' rows) and the CPU of
the engine's process tree. Each writer's steady state is the window between the row markers
``--warm-up`` and ``--end`` (shares of the input) (:mod:`benchmarks.flink.analysis`); planning,
deployment and the time to the first visible row are reported apart. Flink's time-based
checkpoint interval is set from its own measured rate so that both commit about the same records
per checkpoint (twophase: ``--records-per-checkpoint`` exactly), and both sides' records per
checkpoint, files per checkpoint and bytes per file are reported. Rounds rotate which writer goes
first; after each writer the output is read back (count and distinct ids, nothing left open).

    python -m benchmarks.bench_flink --out build/bench-flink [--rounds N --rows N]

writes ``result.json`` and ``result.md`` (every setting of both sides in ``settings``) after
every round, and the watcher's samples of every writer and round
(``samples/<writer>_<round>.jsonl``). A round that fails is recorded under ``failures`` and the
run goes on; ratios take the rounds every writer finished. All ten writers take 3–5 hours on
two cores: ``--writers`` splits the run into parts that each hold both sides of their ratios
(BENCHMARKS.md).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from benchmarks import common
from benchmarks.flink import analysis
from benchmarks.flink.engine import FLINK_VERSION, KAFKA_CONNECTOR_VERSION, FlinkBuild, FlinkJob, build
from benchmarks.flink.watcher import children_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints

log = logging.getLogger(__name__)

YEAR_ROWS = 336_776
PARALLELISM = 2
INPUT_PARTITIONS = PARALLELISM
"""The input topic's partitions: one per source subtask / Spark task on both sides."""
OUTPUT_PARTITIONS = 3
HEAP = "2g"
BUCKET = "twophase-bench-flink"
KAFKA_PRODUCER = {
    "linger.ms": "20",
    "compression.type": "lz4",
    "transaction.timeout.ms": "600000",
    "acks": "all",
    "enable.idempotence": "true",
}
"""Producer settings of both sides (the flights job's Kafka sink's). Flink's Java producer also
gets ``batch.size`` 1,000,000 bytes, librdkafka's default (Java's own is 16 KiB)."""
FLINK_BATCH_SIZE = "1000000"
SPARK_KAFKA_PRODUCER = {
    **{k: v for k, v in KAFKA_PRODUCER.items() if k != "transaction.timeout.ms"},
    "batch.size": FLINK_BATCH_SIZE,
}
"""``spark_kafka``'s producer (Spark's Kafka sink, Java kafka-clients): the same settings but the
transaction timeout (it opens no transaction), ``batch.size`` as Flink's."""
SINK_SETS: dict[str, tuple[str, ...]] = {"kafka": ("kafka",), "s3": ("s3",), "all": ("kafka", "s3")}
WRITERS: dict[str, tuple[str, str]] = {
    "twophase_kafka": ("twophase", "kafka"),
    "twophase_kafka_staged": ("twophase", "kafka"),
    "flink_kafka": ("flink", "kafka"),
    "flink_kafka_pooling": ("flink", "kafka"),
    "twophase_s3": ("twophase", "s3"),
    "twophase_s3_staged": ("twophase", "s3"),
    "flink_s3": ("flink", "s3"),
    "twophase_all": ("twophase", "all"),
    "flink_all": ("flink", "all"),
    "spark_kafka": ("spark", "kafka"),
}
"""Writer name → (engine, sink set). ``spark_kafka`` is no exactly-once peer: Spark's own Kafka
sink (at least once, no transactions) on the same stream, the floor of what Spark itself does
with this job, beside which twophase's and Flink's figures say what the engine costs and what the
two-phase commit does."""
STAGED = frozenset({"twophase_kafka_staged", "twophase_s3_staged"})
"""twophase writers whose one sink stages its epochs with a JVM writer (``write_path="spark"``:
twophase's Kafka writer; Spark's Parquet writer through twophase's committer): no row reaches Python."""


@dataclass
class Options:
    """The run's settings (the command line's; these defaults are the full run's)."""

    out: Path = Path("build/bench-flink")
    rows: int = 10 * YEAR_ROWS
    rounds: int = 5
    records_per_checkpoint: int = 100_000
    warm_up: float = 0.2
    end: float = 0.95
    sample_s: float = 0.1
    writers: tuple[str, ...] = tuple(WRITERS)
    verify: bool = True
    timeout_s: float = 1800.0


@dataclass
class Measured:
    """One writer's round: its window, start-up and read-back.

    Attributes:
        plan_s: twophase: Spark's ``queryPlanning`` of the first micro-batch; Flink: the JVM's
            start to the plan's EXPLAIN (table environment, DDL, optimizer).
        deploy_s: twophase: ``start_flights`` (sinks built and checked, the query started; its
            tasks start with the first micro-batch, after planning); Flink: ``execute()`` (the
            MiniCluster's start, the submission) until every vertex RUNNING. Not the same span:
            reported apart, in no ratio.
        first_visible_s: from the end of planning to the first row visible in every sink:
            twophase from the start request (``start_flights``) plus its first micro-batch's
            ``queryPlanning``; Flink from ``execute()``, which follows its EXPLAIN. Both include
            deployment.
        end_of_input_to_visible_ms: sink → ms (:func:`analysis.end_of_input_to_visible_ms`).
        engine: what the engine itself reports (epochs, checkpoints, interval).
        check: the read-back (:meth:`Bench.read_back`).
    """

    writer: str
    window: analysis.Window
    plan_s: float | None
    deploy_s: float | None
    first_visible_s: float | None
    end_of_input_to_visible_ms: dict[str, Any]
    engine: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """For the JSON report."""
        return {
            "window": self.window.as_dict(),
            "plan_s": self.plan_s,
            "deploy_s": self.deploy_s,
            "first_visible_s": self.first_visible_s,
            "end_of_input_to_visible_ms": self.end_of_input_to_visible_ms,
            "engine": self.engine,
            "check": self.check,
        }


# ------------------------------------------------------------------------------------ services


def s3_staged_settings() -> dict[str, str]:
    """The session settings the S3 sink's staged writes need (Spark's cloud commit protocol)."""
    from twophase.connectors.s3.internal.staged_write import SESSION_SETTINGS

    return dict(SESSION_SETTINGS)


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Create ``topic`` (replication 1) and wait for it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})]).values():
        f.result(60)


def topic_rows(bootstrap: str, topic: str) -> int | None:
    """Records in ``topic`` (sum of high watermarks), or None if it does not exist."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    # all topics: a metadata request naming one creates it where the broker auto-creates topics
    meta = admin.list_topics(timeout=30).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in meta.partitions})
    return sum(f.result().offset for f in futures.values())


def _await_gone(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until the broker lists ``topic`` no more (a deletion completes asynchronously).

    Raises:
        TimeoutError: still listed after ``timeout_s``.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while topic in admin.list_topics(timeout=30).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} still listed {timeout_s} s after its deletion")
        time.sleep(0.5)


def delete_output(endpoints: FlightsEndpoints, topic: str | None, prefix: str | None) -> None:
    """Delete a measured writer's sink topic and objects."""
    from confluent_kafka.admin import AdminClient

    if topic is not None:
        admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
        for f in admin.delete_topics([topic]).values():
            f.result(60)
    if prefix is not None:
        client = endpoints.s3.boto3_client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def input_topic(spark: SparkSession, bootstrap: str, rows: int) -> str:
    """The pre-filled input topic of ``rows`` records, produced once (kept while the broker keeps
    it): ``common.flights`` copies of the year (``flight_id`` ``<id>#<copy>``), in the order of
    their scheduled departure (a stream in event time: a checkpoint's records fall into a few
    ``month`` partitions, not all twelve), JSON values of ``FLIGHT_SCHEMA`` by Spark's
    ``to_json``, key ``flight_id``, written by one task of Spark's Kafka writer (keeps the order)."""
    from pyspark.sql import functions as F

    topic = f"twophase-bench-flink-input-v2-{rows}"
    have = topic_rows(bootstrap, topic)
    if have == rows:
        return topic
    if have is not None:  # an earlier production that did not finish: produce it again
        log.warning("input topic %s holds %s records, not %s: producing it again", topic, have, rows)
        from confluent_kafka.admin import AdminClient

        for f in AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic]).values():
            f.result(60)
        _await_gone(bootstrap, topic)
    create_topic(bootstrap, topic, INPUT_PARTITIONS, {"retention.ms": "-1", "retention.bytes": "-1"})
    copies = -(-rows // YEAR_ROWS)
    df = common.flights(spark, copies, PARALLELISM).limit(rows).orderBy("month", "day", "hour", "minute")
    df = df.coalesce(1)
    started = time.perf_counter()
    (
        df.select(F.col("flight_id").alias("key"), F.to_json(F.struct(*df.columns)).alias("value"))
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.linger.ms", "20")
        .option("kafka.batch.size", "1000000")
        .save()
    )
    produced = topic_rows(bootstrap, topic)
    log.warning("input topic %s: %s records in %.1f s", topic, produced, time.perf_counter() - started)
    if produced != rows:
        raise RuntimeError(f"input topic {topic}: produced {produced} records, not {rows}")
    return topic


# ------------------------------------------------------------------------------------ watching


class Watcher:
    """The watcher process of one writer's run (:mod:`benchmarks.flink.watcher`)."""

    def __init__(
        self,
        out: Path,
        pids: Sequence[int],
        exclude: Sequence[int],
        topic: str | None,
        prefix: str | None,
        env: dict[str, str],
        sample_s: float,
        transactional: bool = True,
    ) -> None:
        self.out = out
        self._read = 0
        self._samples: list[analysis.Sample] = []
        args = [
            sys.executable,
            "-m",
            "benchmarks.flink.watcher",
            "--out",
            str(out),
            "--interval-s",
            str(sample_s),
        ]
        args += [a for p in pids for a in ("--pid", str(p))] + [
            a for p in exclude for a in ("--exclude", str(p))
        ]
        if topic is not None:
            args += ["--topic", topic, "--partitions", str(OUTPUT_PARTITIONS)]
            args += [] if transactional else ["--no-transactions"]
        if prefix is not None:
            args += ["--bucket", BUCKET, "--prefix", prefix]
        root = Path(__file__).resolve().parents[1]
        self._proc = subprocess.Popen(args, cwd=root, env={**os.environ, **env})

    def samples(self) -> list[analysis.Sample]:
        """The samples so far (read on from where the last call stopped: the harness's polling
        is in twophase's CPU tree, so it stays small)."""
        if self.out.is_file():
            with self.out.open() as f:
                f.seek(self._read)
                for line in f:
                    if not line.endswith("\n"):  # a line being written: read it next time
                        break
                    self._samples.append(analysis.Sample(**json.loads(line)))
                    self._read += len(line.encode())
        return list(self._samples)

    def wait_visible(
        self,
        sinks: Sequence[str],
        rows: int,
        timeout_s: float,
        alive: Callable[[], bool],
        quiet_s: float = 3.0,
    ) -> list[analysis.Sample]:
        """Poll the samples until ``rows`` are visible in every sink and the output has not
        changed for ``quiet_s`` (the marker count may be one short per partition, so the quiet
        time must span a commit: a Flink writer's is twice its checkpoint interval).

        Raises:
            TimeoutError: not within ``timeout_s``.
            RuntimeError: the watcher ended, or the engine did (``alive()`` false) before it.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the watcher ended (exit {self._proc.returncode})")
            if not alive():
                raise RuntimeError(
                    f"the engine ended before {rows:,} rows were visible in {', '.join(sinks)}"
                )
            samples = self.samples()
            if samples and samples[-1].visible(sinks) >= rows and analysis.quiet(samples, quiet_s):
                return samples
            time.sleep(0.5)
        raise TimeoutError(f"{rows:,} rows not visible in {', '.join(sinks)} within {timeout_s} s")

    def stop(self) -> list[analysis.Sample]:
        """End the watcher; every sample."""
        self._proc.terminate()
        self._proc.wait(60)
        return self.samples()


# ------------------------------------------------------------------------------------ the run


class Bench:
    """One benchmark run: the services, the Spark session, the Flink build, the input topic."""

    def __init__(
        self, opts: Options, spark: SparkSession, endpoints: FlightsEndpoints, flink: FlinkBuild
    ) -> None:
        from twophase.integration.jobs import flights_data
        from twophase.integration.services.launcher import given_env

        self.opts, self.spark, self.endpoints, self.flink = opts, spark, endpoints, flink
        self.env = given_env(endpoints.kafka_bootstrap, endpoints.s3)
        self.scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-flink-"))
        self.run_id = uuid.uuid4().hex[:8]
        self.topic = input_topic(spark, endpoints.kafka_bootstrap, opts.rows)
        self.lo, self.hi = analysis.markers(opts.rows, opts.warm_up, opts.end)
        self.data = flights_data.land()
        self.dimensions = self._dimension_files()
        self.interval_ms: dict[str, int] = {}
        self.rates: dict[str, list[float]] = {}

    def _dimension_files(self) -> tuple[Path, Path]:
        """The airlines and airports tables as TSV for the Java job (the same rows Spark joins;
        an empty field is a null).

        Raises:
            ValueError: a value holds a tab or a line break.
        """
        import pyarrow.parquet as pq

        out = []
        for path in (self.data.airlines_path, self.data.airports_path):
            rows = pq.read_table(path).to_pylist()
            lines = ["\t".join(rows[0])] + [
                "\t".join("" if v is None else str(v) for v in r.values()) for r in rows
            ]
            if any(line.count("\t") != lines[0].count("\t") or "\n" in line for line in lines):
                raise ValueError(f"{path.name}: a value holds a tab or a line break")
            target = self.scratch / (path.stem + ".tsv")
            target.write_text("\n".join(lines) + "\n")
            out.append(target)
        return out[0], out[1]

    # -- one writer

    def run(self, writer: str, r: int) -> Measured:
        """Run ``writer`` for round ``r`` (0: the warm-up), measure, read back, clean up."""
        engine, tag = WRITERS[writer]
        sinks = SINK_SETS[tag]
        name = f"{writer}_{self.run_id}_{r}"
        topic = f"flights.{name}" if "kafka" in sinks else None
        prefix = f"flights/{name}" if "s3" in sinks else None
        if topic is not None:
            create_topic(self.endpoints.kafka_bootstrap, topic, OUTPUT_PARTITIONS)
        runner = {"twophase": self._twophase, "spark": self._spark, "flink": self._flink}[engine]
        try:
            # Spark's cloud commit protocol is session-wide: set for the S3-staged writer's runs only
            with common.session_conf(
                self.spark, s3_staged_settings() if writer in STAGED and "s3" in sinks else {}
            ):
                measured = runner(writer, name, sinks, topic, prefix)
            if engine != "flink":  # Flink's first interval before any Flink writer has run
                self.interval_ms.setdefault(
                    "default",
                    analysis.matched_interval_ms(
                        self.opts.records_per_checkpoint, measured.window.rows_per_s
                    ),
                )
            samples = self.opts.out / "samples"
            samples.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.scratch / f"{name}.jsonl", samples / f"{writer}_{r}.jsonl")  # to analyse again
            if self.opts.verify:
                measured.check = self.read_back(topic, prefix)
        finally:
            delete_output(self.endpoints, topic, prefix)
        return measured

    def _measure(
        self,
        writer: str,
        sinks: Sequence[str],
        samples: list[analysis.Sample],
        since: float,
        plan_s: float | None,
        deploy_s: float | None,
        engine: dict[str, Any],
    ) -> Measured:
        return Measured(
            writer,
            analysis.steady_window(samples, sinks, self.lo, self.hi),
            plan_s,
            deploy_s,
            analysis.first_visible_s(samples, sinks, since),
            analysis.end_of_input_to_visible_ms(samples, sinks, self.opts.rows),
            engine,
        )

    def _stream(self) -> Any:
        """The input topic as Spark's unbounded stream of flights (``maxOffsetsPerTrigger`` = the
        records per checkpoint), parsed from JSON: the same for every Spark writer."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        from twophase.integration.jobs.flights_data import FLIGHT_SCHEMA

        raw = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", self.endpoints.kafka_bootstrap)
            .option("subscribe", self.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", self.opts.records_per_checkpoint)
            .load()
        )
        schema = from_arrow_schema(FLIGHT_SCHEMA)
        return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*")

    def _spark_watcher(
        self, name: str, topic: str | None, prefix: str | None, transactional: bool = True
    ) -> Watcher:
        """The watcher of a Spark writer: this process and Spark's JVM measured, the harness's
        other children (an earlier watcher) not; ``transactional`` as the sink topic's producer."""
        jvm = self.spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        others = [p for p in children_of(os.getpid()) if p != jvm]
        return Watcher(
            self.scratch / f"{name}.jsonl",
            [os.getpid(), jvm],
            others,
            topic,
            prefix,
            self.env,
            self.opts.sample_s,
            transactional,
        )

    def _spark(
        self, writer: str, name: str, sinks: Sequence[str], topic: str | None, prefix: str | None
    ) -> Measured:
        """Spark's own Kafka sink on the same stream (:data:`WRITERS`: at least once, the engine's
        floor): the flights job's rows (``enrich``) as key ``flight_id`` and its JSON value, the
        producer settings of both sides, a ``processingTime`` 0 trigger."""
        from pyspark.sql import functions as F

        from twophase.integration.jobs.flights import KEY_COLUMN, VALUE_COLUMN, FlightsJobSpec, enrich

        assert topic is not None and tuple(sinks) == ("kafka",), sinks
        spec = FlightsJobSpec(job_id=name, work_dir=str(self.scratch / name), bucket=BUCKET, topic=topic)
        enriched = enrich(self.spark, self._stream(), spec)
        writer_stream = (
            enriched.select(F.col(KEY_COLUMN).alias("key"), F.col(VALUE_COLUMN).alias("value"))
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", self.endpoints.kafka_bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", str(self.scratch / name / "spark-checkpoint"))
            .options(**{f"kafka.{k}": v for k, v in SPARK_KAFKA_PRODUCER.items()})
            .queryName(name)
            .trigger(processingTime="0 seconds")
        )
        watcher = self._spark_watcher(name, topic, prefix, transactional=False)
        try:
            since = time.time()
            started = time.perf_counter()
            query = writer_stream.start()
            deploy_s = round(time.perf_counter() - started, 3)
            try:
                watcher.wait_visible(sinks, self.opts.rows, self.opts.timeout_s, lambda: bool(query.isActive))
            finally:
                progress = list(query.recentProgress)
                query.stop()
            samples = watcher.stop()
        finally:
            watcher.stop()
        first = progress[0].durationMs if progress else {}
        engine = {
            "batches_in_recent_progress": len(progress),
            "records_per_checkpoint_median": statistics.median([p.numInputRows for p in progress] or [0]),
            "first_batch_duration_ms": dict(first),
        }
        plan_s = round(first.get("queryPlanning", 0) / 1000, 3) if first else None
        return self._measure(writer, sinks, samples, since + (plan_s or 0.0), plan_s, deploy_s, engine)

    def _twophase(
        self, writer: str, name: str, sinks: Sequence[str], topic: str | None, prefix: str | None
    ) -> Measured:
        from twophase.integration.jobs.flights import FlightsJobSpec, enrich, start_flights

        spec = FlightsJobSpec(
            job_id=name,
            work_dir=str(self.scratch / name),
            bucket=BUCKET,
            kafka_partitions=OUTPUT_PARTITIONS,
            topic=topic or "",
            s3_prefix=prefix or "",
            sinks=tuple(sinks),
            write_path="spark" if writer in STAGED else "python",
        )
        spec.save()
        flights = self._stream()
        watcher = self._spark_watcher(name, topic, prefix)
        try:
            since = time.time()
            started = time.perf_counter()
            handle = start_flights(
                self.spark,
                spec,
                self.endpoints,
                enrich(self.spark, flights, spec),
                {"processingTime": "0 seconds"},
            )
            deploy_s = round(time.perf_counter() - started, 3)

            def alive() -> bool:
                return handle.query is None or bool(handle.query.isActive)

            try:
                watcher.wait_visible(sinks, self.opts.rows, self.opts.timeout_s, alive)
            finally:
                query = handle.query
                progress = list(query.recentProgress) if query is not None else []
                handle.stop(timeout=120)
            samples = watcher.stop()
        finally:
            watcher.stop()
        first = progress[0].durationMs if progress else {}
        engine = {
            "epochs": common.epoch_summary(handle.metrics) if handle.metrics else {},
            # the engine's own count beside the watcher's (the S3 commits of one checkpoint may
            # straddle the watcher's samples)
            "records_per_checkpoint_median": statistics.median(
                [e.records for e in handle.metrics if e.records] or [0]
            ),
            "checkpoints": len(handle.checkpoint_metrics),
            "first_batch_duration_ms": dict(first),
        }
        plan_s = round(first.get("queryPlanning", 0) / 1000, 3) if first else None
        # first visible from the end of planning, as Flink's (its go comes after its EXPLAIN)
        return self._measure(writer, sinks, samples, since + (plan_s or 0.0), plan_s, deploy_s, engine)

    def flink_request(
        self, writer: str, name: str, sinks: Sequence[str], topic: str | None, prefix: str | None
    ) -> dict[str, str]:
        """The Java job's request (see ``FlightsFlink.java``); every Flink setting of the run."""
        airlines, airports = self.dimensions
        interval = self.interval_ms.get(writer) or self.interval_ms.get("default", 1000)
        req = {
            "airlines": str(airlines),
            "airports": str(airports),
            "bootstrap": self.endpoints.kafka_bootstrap,
            "group": f"bench-{name}",
            "input.topic": self.topic,
            "sinks": ",".join(sinks),
            "flink.pipeline.name": name,
            "flink.parallelism.default": str(PARALLELISM),
            "flink.execution.runtime-mode": "STREAMING",
            "flink.execution.checkpointing.interval": f"{interval} ms",
            "flink.execution.checkpointing.mode": "EXACTLY_ONCE",
            "flink.execution.checkpointing.storage": "filesystem",
            "flink.execution.checkpointing.dir": "file://" + str(self.scratch / name / "checkpoints"),
            "flink.state.backend.type": "hashmap",
            "flink.table.local-time-zone": "UTC",
            "flink.restart-strategy.type": "none",
            "flink.web.checkpoints.history": "100000",
        }
        if topic is not None:
            req |= {
                "output.topic": topic,
                "txn.prefix": f"flink-{name}",
                "kafka.sink.parallelism": str(PARALLELISM),
                "kafka.properties.batch.size": FLINK_BATCH_SIZE,
                **{f"kafka.properties.{k}": v for k, v in KAFKA_PRODUCER.items()},
            }
            if writer.endswith("_pooling"):
                req["kafka.sink.transaction-naming-strategy"] = "POOLING"
        if prefix is not None:
            req |= {
                "s3.path": f"s3://{BUCKET}/{prefix}",
                "files.sink.parallelism": str(PARALLELISM),
                "files.parquet.compression": "SNAPPY",
            }
        return req

    def _flink(
        self, writer: str, name: str, sinks: Sequence[str], topic: str | None, prefix: str | None
    ) -> Measured:
        req = self.flink_request(writer, name, sinks, topic, prefix)
        job = FlinkJob(self.flink, req, self.scratch / name, self.env, heap=HEAP)
        job.start()  # a failed start ends the JVM
        try:
            watcher = Watcher(
                self.scratch / f"{name}.jsonl", [job.pid], [], topic, prefix, self.env, self.opts.sample_s
            )
        except BaseException:
            job.cancel()
            raise
        interval_s = int(req["flink.execution.checkpointing.interval"].split()[0]) / 1000
        try:
            running = job.running_at()
            watcher.wait_visible(
                sinks, self.opts.rows, self.opts.timeout_s, job.alive, quiet_s=max(3.0, 2 * interval_s)
            )
            checkpoints = job.checkpoints()
            samples = watcher.stop()
        finally:
            watcher.stop()
            job.cancel()
        deploy_s = round(job.submit_s + (running - job.submitted_at), 3)
        completed_at = checkpoints.pop("completed_at")
        engine = {"checkpoint_interval_ms": req["flink.execution.checkpointing.interval"], **checkpoints}
        measured = self._measure(writer, sinks, samples, job.go_at, job.plan_s, deploy_s, engine)
        # the engine's own count beside the watcher's (S3 commits may straddle samples)
        in_window = sum(1 for t in completed_at if measured.window.holds(t))
        engine["checkpoints_in_window"] = in_window
        engine["records_per_checkpoint_in_window"] = round(measured.window.rows / max(in_window, 1), 1)
        # the next round of this writer commits about --records-per-checkpoint at its own rate
        # (the median of its rounds so far: one round under a passing load moves it less)
        self.rates.setdefault(writer, []).append(measured.window.rows_per_s)
        self.interval_ms[writer] = analysis.matched_interval_ms(
            self.opts.records_per_checkpoint, statistics.median(self.rates[writer])
        )
        return measured

    # -- read-back

    def read_back(self, topic: str | None, prefix: str | None) -> dict[str, Any]:
        """Count and distinct ids of what each sink holds committed; what is left open."""
        out: dict[str, Any] = {}
        if topic is not None:
            table, open_partitions = _read_ids(self.endpoints.kafka_bootstrap, topic)
            out["kafka"] = {
                "records": table[0],
                "distinct_ids": table[1],
                "left_open_partitions": open_partitions,
            }
        if prefix is not None:
            import pyarrow.compute as pc
            import pyarrow.dataset as ds

            from twophase.integration.verify import s3_filesystem

            data = ds.dataset(
                f"{BUCKET}/{prefix}", filesystem=s3_filesystem(self.endpoints), format="parquet"
            )
            ids = data.to_table(columns=["flight_id"])["flight_id"]
            left_open = common.pending_uploads(self.endpoints.s3.boto3_client(), BUCKET, prefix + "/")
            out["s3"] = {
                "records": len(ids),
                "distinct_ids": pc.count_distinct(ids).as_py(),
                "files": len(data.files),
                "left_open_uploads": left_open,
            }
        out["exactly_once"] = all(c["records"] == c["distinct_ids"] == self.opts.rows for c in out.values())
        return out


def _read_ids(bootstrap: str, topic: str, timeout_s: float = 600.0) -> tuple[tuple[int, int], int]:
    """(records, distinct keys) committed in ``topic`` (a ``read_committed`` consumer from the
    beginning to the last stable offsets), and the partitions whose LSO is below the HW.

    Raises:
        TimeoutError: the end is not reached within ``timeout_s``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    spec = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(OUTPUT_PARTITIONS)}
    ends = [
        {tp.partition: f.result().offset for tp, f in admin.list_offsets(spec, isolation_level=level).items()}
        for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED)
    ]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-flink-readback-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(OUTPUT_PARTITIONS)])
    pending = {p for p, end in ends[1].items() if end > 0}
    chunks: list[pa.Array] = []
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: partitions {sorted(pending)} not read to their LSO in {timeout_s} s"
                )
            keys = []
            for m in consumer.consume(10_000, 1.0):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{topic}: {m.error()}")
                    if m.offset() >= ends[1][m.partition()]:
                        pending.discard(m.partition())
                    continue
                keys.append(m.key())
                if m.offset() + 1 >= ends[1][m.partition()]:
                    pending.discard(m.partition())
            chunks.append(pa.array(keys, pa.binary()))
    finally:
        consumer.close()
    ids = pa.chunked_array(chunks, pa.binary())
    return (len(ids), pc.count_distinct(ids).as_py()), sum(1 for p in ends[0] if ends[0][p] != ends[1][p])


def settings(opts: Options) -> dict[str, Any]:
    """Every setting of both sides, for the report."""
    return {
        "input": {
            "rows": opts.rows,
            "topic_partitions": INPUT_PARTITIONS,
            "format": "JSON values of FLIGHT_SCHEMA (Spark's to_json), key flight_id",
            "order": "scheduled departure (month, day, hour, minute) of the copies together",
            "source": "unbounded on both sides, from the earliest offset",
        },
        "steady_window": {"warm_up": opts.warm_up, "end": opts.end, "sample_s": opts.sample_s},
        "parallelism": PARALLELISM,
        "heap": HEAP,
        "records_per_checkpoint": opts.records_per_checkpoint,
        "twophase": {
            "spark_master": f"local[{PARALLELISM},4]",
            "source": f"Spark Kafka source, maxOffsetsPerTrigger {opts.records_per_checkpoint}",
            "trigger": "processingTime 0 s: one checkpoint per micro-batch",
            "lookups": "broadcast left joins (JVM)",
            "sched_dep_at": "make_timestamp(year, month, day, hour, minute, 0, origin_tzone)",
            "kafka": {
                **KAFKA_PRODUCER,
                "client": "librdkafka (confluent-kafka)",
                "batch.size": "1000000 (default)",
            },
            "parquet": "pyarrow, snappy, one file per partition directory per task per checkpoint",
            "staged_writers": {
                "twophase_kafka_staged": (
                    "twophase's JVM writer: Java kafka-clients (Spark's), the producer settings above "
                    "translated (linger.ms 20, batch.size 1000000, lz4, acks all, idempotent), one "
                    "transaction per Spark task per checkpoint, committed by the sink's EndTxn"
                ),
                "twophase_s3_staged": (
                    "Spark's Parquet writer (parquet-mr) through twophase's S3A committer (pending "
                    "multipart uploads, completed by the sink), snappy, one file per partition "
                    "directory per task per checkpoint"
                ),
            },
        },
        "spark_kafka": {
            "what": "Spark's own Kafka sink, at least once (no transactions): the engine's floor, no peer",
            "source_and_job": "as twophase's (the same stream, enrich, processingTime 0 s)",
            "kafka": {**SPARK_KAFKA_PRODUCER, "client": "Java kafka-clients (Spark's)"},
        },
        "flink": {
            "version": FLINK_VERSION,
            "kafka_connector": KAFKA_CONNECTOR_VERSION,
            "runtime": "Java main, local MiniCluster (benchmarks/flink/java), jars from Maven Central",
            "source": "Kafka SQL connector, json format, earliest-offset, unbounded",
            "lookups": "Java scalar functions over the same dimension rows (EXPLAIN: no Python operator)",
            "sched_dep_at": "Java scalar function: LocalDateTime.atZone(origin_tzone).toInstant()",
            "checkpointing": "EXACTLY_ONCE, hashmap state, file:// storage",
            "checkpoint_interval": (
                "per writer: --records-per-checkpoint at the median rate of its rounds so far (round 0: "
                "at the first twophase writer's rate); the one used is in each round's engine figures"
            ),
            "kafka": {
                **KAFKA_PRODUCER,
                "batch.size": FLINK_BATCH_SIZE,
                "client": "Java kafka-clients (shaded)",
            },
            "kafka_pooling": "flink_kafka_pooling: sink.transaction-naming-strategy POOLING",
            "parquet": "flink-parquet, SNAPPY, rolls per checkpoint, S3 plugin (flink-s3-fs-hadoop)",
        },
    }


def run(opts: Options | None = None) -> dict[str, Any]:
    """The whole comparison (the command line's defaults when ``opts`` is None, as
    ``benchmarks.run`` calls it); see the module docstring."""
    if opts is None:
        opts = Options(
            Path("build/bench-flink"),
            10 * YEAR_ROWS,
            5,
            100_000,
            0.2,
            0.95,
            0.1,
            tuple(WRITERS),
            True,
            1800.0,
        )
    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
    from twophase.integration.services import kafka_service, s3_service
    from twophase.integration.spark import build_spark_session

    machine = common.machine()
    flink = build()
    per_round: dict[str, dict[int, Measured]] = {w: {} for w in opts.writers}
    failures: list[dict[str, Any]] = []
    with kafka_service() as bootstrap, s3_service() as s3:
        endpoints = FlightsEndpoints(bootstrap, s3)
        s3.ensure_bucket(BUCKET)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = build_spark_session(
            "twophase-bench-flink",
            extra_conf={
                "spark.master": f"local[{PARALLELISM},4]",
                "spark.sql.session.timeZone": "UTC",
                "spark.speculation": "false",
                "spark.driver.memory": HEAP,
            },
            s3=s3,
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            bench = Bench(opts, spark, endpoints, flink)
            names = list(opts.writers)
            # round 0 warms every writer up (JIT, Spark's Python workers, Flink's classes) and
            # measures each Flink writer's rate, which sets its interval: it is not reported
            for r in range(opts.rounds + 1):
                for w in names[r % len(names) :] + names[: r % len(names)]:
                    try:
                        measured = bench.run(w, r)
                    except Exception as e:  # the run goes on; the round is reported as failed
                        log.exception("round %d %s failed", r, w)
                        failures.append({"writer": w, "round": r, "error": repr(e)[:1000]})
                        continue
                    log.warning("round %d %s: %s", r, w, measured.window.as_dict())
                    if r > 0:
                        per_round[w][r] = measured
                    write_report(opts.out, report(opts, machine, per_round, failures, complete=False))
        finally:
            spark.stop()
        shutil.rmtree(bench.scratch, ignore_errors=True)  # kept when a round failed: Flink's logs
    result = report(opts, machine, per_round, failures, complete=True)
    write_report(opts.out, result)
    return result


def report(
    opts: Options,
    machine: dict[str, Any],
    per_round: dict[str, dict[int, Measured]],
    failures: list[dict[str, Any]],
    *,
    complete: bool,
) -> dict[str, Any]:
    """The report of the rounds measured so far. Ratios and medians take only the rounds every
    writer finished, so that round i of twophase is set against round i of Flink (they ran back to
    back); every finished round is listed, and every failed one under ``failures``."""
    finished = set.intersection(*(set(ms) for ms in per_round.values())) if per_round else set()
    rates = {w: [ms[r].window.rows_per_s for r in sorted(finished)] for w, ms in per_round.items()}
    return {
        "complete": complete,
        "machine": common.load_at_end(machine),
        "settings": settings(opts),
        "rounds_in_ratios": sorted(finished),
        "failures": failures,
        "ratios": analysis.ratios(rates),
        "medians": {
            w: {
                "rows_per_s": round(statistics.median(v), 1),
                "cpu_s_per_million_rows": round(
                    statistics.median(
                        per_round[w][r].window.cpu_s_per_million_rows for r in sorted(finished)
                    ),
                    2,
                ),
            }
            for w, v in rates.items()
            if v
        },
        "per_round": {
            w: [{"round": r, **m.as_dict()} for r, m in sorted(ms.items())] for w, ms in per_round.items()
        },
    }


def write_report(out: Path, result: dict[str, Any]) -> None:
    """``result.json`` and ``result.md`` in ``out`` (rewritten after every round, so that a run
    cut short keeps what it measured; ``complete`` says whether it ran to the end)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "result.md").write_text(analysis.markdown(result) + "\n")


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Options.out, show_default=True)
@click.option("--rounds", type=int, default=Options.rounds, show_default=True)
@click.option(
    "--rows", type=int, default=Options.rows, show_default=True, help="input records (10× the year)"
)
@click.option("--records-per-checkpoint", type=int, default=Options.records_per_checkpoint, show_default=True)
@click.option(
    "--warm-up",
    type=float,
    default=Options.warm_up,
    show_default=True,
    help="share of the input before the window",
)
@click.option(
    "--end", type=float, default=Options.end, show_default=True, help="share of the input at the window's end"
)
@click.option(
    "--sample-s",
    type=float,
    default=Options.sample_s,
    show_default=True,
    help="the watcher's sampling interval",
)
@click.option(
    "--writers", default=",".join(Options.writers), show_default=True, help="comma-separated subset"
)
@click.option(
    "--verify/--no-verify", default=Options.verify, show_default=True, help="read every writer's output back"
)
@click.option(
    "--timeout-s", type=float, default=Options.timeout_s, show_default=True, help="per writer and round"
)
def main(
    out: Path,
    rounds: int,
    rows: int,
    records_per_checkpoint: int,
    warm_up: float,
    end: float,
    sample_s: float,
    writers: str,
    verify: bool,
    timeout_s: float,
) -> None:
    """Run the comparison and write result.json and result.md to OUT."""
    chosen = tuple(w.strip() for w in writers.split(",") if w.strip())
    unknown = [w for w in chosen if w not in WRITERS]
    if unknown:
        raise click.BadParameter(
            f"unknown writers {unknown}; choose among {', '.join(WRITERS)}", param_hint="--writers"
        )
    analysis.markers(rows, warm_up, end)  # a clear error before anything starts
    opts = Options(
        out, rows, rounds, records_per_checkpoint, warm_up, end, sample_s, chosen, verify, timeout_s
    )
    result = run(opts)  # writes result.json and result.md after every round
    click.echo(analysis.markdown(result))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    main()
