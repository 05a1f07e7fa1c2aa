"""Benchmark: the flights job on Flink with its own exactly-once sinks against twophase on Spark
(issue #29 item 1).

Same machine, same services (the Kafka and MinIO of ``twophase services up`` or
``TWOPHASE_KAFKA_BOOTSTRAP`` / ``TWOPHASE_S3_*``), same landed input (``flights_data.land``),
side by side in one run, rounds rotating which writer goes first
(:func:`benchmarks.common.side_by_side`). For each sink set — Kafka alone, S3 Parquet alone, both —
two writers:

- ``twophase_<sinks>``: the flights job (:func:`twophase.integration.jobs.flights.run_flights`) on
  ``local[2,4]``, ``availableNow``, ``files_per_trigger`` days per micro-batch (one checkpoint
  each), the final checkpoint at end of input;
- ``flink_<sinks>``: the same work on PyFlink (``benchmarks/flink/flights_flink.py``, run by one
  PyFlink process in its own venv for the whole benchmark): Flink SQL in streaming mode,
  parallelism 2, checkpointing every ``checkpoint_interval_ms`` (matched: the twophase warm-up
  run's median micro-batch time), ``KafkaSink`` exactly-once and the filesystem sink's Parquet bulk
  format on MinIO through the S3 plugin, bounded: the job ends with FLIP-147's final checkpoint.

Both sides get a 2 GiB JVM heap and 2 Python workers; every setting is in the output's
``settings`` (and in BENCHMARKS.md's "Against Flink").

There is no Delta sink for Flink 2.x (``io.delta:delta-flink`` targets Flink 1.x and is not even
served here): Delta is left out of both sides.

Every round's output is read back by one reader for both systems: a ``read_committed`` consumer
(:func:`twophase.integration.verify.read_kafka`) and pyarrow over the Parquet files
(:func:`twophase.integration.verify.s3_filesystem`), each compared exactly with the input
(:func:`twophase.integration.verify.compare`: count, duplicates, missing, id and content
fingerprints); nothing may be left open (the topic's last stable offsets equal its high
watermarks; no multipart upload pending under the prefix).

Latency from end of input to visible: a watcher thread counts the topic's records with two
consumers, ``read_uncommitted`` and ``read_committed``; the time from the moment the last record
is in the log (all ``rows`` seen uncommitted) to the moment it is visible to ``read_committed``
(all ``rows`` seen committed) is the final commit (FLIP-147's final checkpoint and commit), the
same measure for both systems.

Environment: ``TWOPHASE_BENCH_RUNS`` (rounds, default 3), ``TWOPHASE_BENCH_SCALE`` (share of the
year's 365 days, default 1), ``TWOPHASE_BENCH_FLINK_CHECKPOINT_MS`` (Flink's checkpoint interval
instead of the matched one), ``TWOPHASE_BENCH_FLINK_LOG_DIR`` (keep Flink's logs there).
``python -m benchmarks.bench_flink`` prints one JSON document; ``python -m benchmarks.bench_flink
--markdown run.json`` renders a saved one as the per-round table of BENCHMARKS.md.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    from twophase.integration.jobs.flights import FlightsEndpoints

log = logging.getLogger(__name__)

FLINK_VERSION = "2.2.1"
"""PyFlink from PyPI (``apache-flink``), in its own venv (it pins its own pyarrow and pandas)."""
FLINK_FORMAT_VERSION = "2.2.0"
"""``flink-parquet`` and ``flink-s3-fs-hadoop``: Maven Central serves no 2.2.1 of either; 2.2.0 is
the same minor release (format and plugin interfaces are stable within it)."""
POMS = {
    "lib": Path(__file__).resolve().parent / "flink" / "pom-lib.xml",
    "plugin": Path(__file__).resolve().parent / "flink" / "pom-s3-plugin.xml",
}
"""What Flink gets from Maven Central: ``lib``, the Kafka SQL connector 5.0.0-2.2, ``flink-parquet``
and ``hadoop-client-api``/``-runtime`` 3.4.1 (parquet-hadoop needs Hadoop's ``Configuration``);
``plugin``, ``flink-s3-fs-hadoop`` (its own shaded Hadoop)."""
DUPLICATE_JARS = ("slf4j-api-",)
"""Jars the resolved set brings that ``flink-dist`` already holds (one copy on the classpath)."""

PARALLELISM = 2
HEAP = "2g"
"""JVM heap of both sides: Spark's driver (``local[2]``: executors run in it) and the PyFlink
gateway JVM (``JVM_ARGS=-Xmx2g``: the job's MiniCluster runs in it)."""
BATCHES = 12
"""Micro-batches of the twophase side, whatever the input's size (the year in 12, as the demo)."""
TOPIC_PARTITIONS = 3
ROUNDS = 3
BUCKET = "twophase-bench-flink"
KAFKA_PRODUCER = {"linger.ms": 20, "compression.type": "lz4", "transaction.timeout.ms": 600_000}
"""Producer settings both sides set (the flights job's Kafka sink: ``linger.ms`` 20, lz4; the
twophase sink's transaction timeout). Both producers are idempotent with ``acks=all``."""
FLINK_KAFKA_PRODUCER = {**KAFKA_PRODUCER, "batch.size": 1_000_000}
"""The Java producer's ``batch.size`` raised to librdkafka's default (1,000,000 bytes per
partition batch) from its own 16 KiB, so that both batch alike."""
PARQUET = {"compression": "SNAPPY"}
"""Flink's Parquet options (the twophase S3 sink's defaults: snappy; both roll on every checkpoint)."""
FLINK_PYTHON = {"fn-execution.arrow.batch.size": 10_000, "fn-execution.bundle.size": 100_000}
"""PyFlink's Python workers (one per slot: 2, as Spark's ``local[2]`` has 2): Arrow batches of up
to 10,000 rows (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch`` default)."""
SINK_SETS: dict[str, tuple[str, ...]] = {"kafka": ("kafka",), "s3": ("s3",), "all": ("kafka", "s3")}
REPLY_PREFIX = "FLINKBENCH "
FLINK_SCRIPT = Path(__file__).resolve().parent / "flink" / "flights_flink.py"
_COMPLETED = re.compile(r"Completed checkpoint (\d+) for job ([0-9a-f]{32})")


def input_days(scale: float) -> int:
    """Days of 2013 the run reads: ``365 × scale``, within 1..365."""
    return max(1, min(365, round(365 * scale)))


def files_per_trigger(days: int, batches: int = BATCHES) -> int:
    """Days per micro-batch so that ``days`` make ``batches`` micro-batches (fewer when short)."""
    return max(1, math.ceil(days / batches))


def matched_interval_ms(epoch_ms: float, floor_ms: int = 200) -> int:
    """Flink's checkpoint interval matched to twophase's cadence (one checkpoint per micro-batch):
    the twophase run's median micro-batch (epoch) time, in ms, at least ``floor_ms``.

    Raises:
        ValueError: ``epoch_ms`` is not positive.
    """
    if epoch_ms <= 0:
        raise ValueError(f"epoch_ms must be > 0, got {epoch_ms}")
    return max(floor_ms, round(epoch_ms))


def completed_checkpoints(log_text: str, job_id: str) -> int:
    """Checkpoints Flink's ``CheckpointCoordinator`` logged as completed for ``job_id``."""
    return sum(1 for m in _COMPLETED.finditer(log_text) if m.group(2) == job_id)


def sink_ratios(times: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """twophase ÷ Flink throughput per sink set (> 1: twophase is faster), from median times."""
    return {
        s: common.ratio(times, f"twophase_{s}", f"flink_{s}")
        for s in SINK_SETS
        if f"twophase_{s}" in times and f"flink_{s}" in times
    }


# ------------------------------------------------------------------------------------ Flink set-up


def flink_venv() -> Path:
    """The PyFlink venv (``<cache>/bench-envs/flink-<version>``), made once with pip.

    Raises:
        subprocess.CalledProcessError: venv or pip failed.
    """
    from twophase.integration.services.cache import cache_dir

    venv = cache_dir() / "bench-envs" / f"flink-{FLINK_VERSION}"
    python = venv / "bin" / "python"
    marker = venv / ".twophase-installed"
    if not marker.is_file():
        log.warning("installing apache-flink==%s into %s", FLINK_VERSION, venv)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"apache-flink=={FLINK_VERSION}"], check=True
        )
        marker.write_text(FLINK_VERSION + "\n")
    return python


def flink_home(python: Path) -> Path:
    """A ``FLINK_HOME`` in the cache: PyFlink's own lib, opt, bin and conf, plus the resolved
    connector, format and Hadoop jars in ``lib/`` and the S3 plugin in ``plugins/s3-fs-hadoop``
    (all links; the jars come from Maven into ``~/.m2`` and the cache, as Spark's do).

    Raises:
        ServiceUnavailableError: Maven cannot resolve a jar.
    """
    from twophase.integration.services.cache import cache_dir

    pyflink = Path(
        subprocess.run(
            [str(python), "-c", "import os, pyflink; print(os.path.dirname(pyflink.__file__))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    lib_jars, plugin_jars = (maven_jars(POMS[k]) for k in ("lib", "plugin"))
    home = cache_dir() / f"flink-{FLINK_VERSION}"
    for sub in ("lib", "plugins/s3-fs-hadoop"):
        shutil.rmtree(home / sub, ignore_errors=True)
        (home / sub).mkdir(parents=True)
    for name in ("opt", "bin", "conf"):
        link = home / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(pyflink / name)
    for jar in [*sorted((pyflink / "lib").glob("*.jar")), *lib_jars]:
        if not jar.name.startswith(DUPLICATE_JARS):
            (home / "lib" / jar.name).symlink_to(jar)
    for jar in plugin_jars:
        (home / "plugins" / "s3-fs-hadoop" / jar.name).symlink_to(jar)
    return home


def maven_jars(pom: Path) -> list[Path]:
    """``pom``'s runtime classpath, resolved once into ``<cache>/flink-jars-<name>-<digest>``
    (:func:`twophase.integration.services.maven.resolve_jars`, ``~/.m2`` as Maven's cache).

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve an artifact.
    """
    from twophase.integration.services.cache import cache_dir
    from twophase.integration.services.maven import pom_digest, resolve_jars

    return resolve_jars(
        pom, cache_dir() / f"flink-jars-{pom.stem.removeprefix('pom-')}-{pom_digest(pom)[:12]}"
    )


def load_average() -> dict[str, float]:
    """The 1- and 5-minute load averages now (the machine is shared)."""
    load1, load5, _ = os.getloadavg()
    return {"load_1m": round(load1, 2), "load_5m": round(load5, 2)}


class FlinkServer:
    """The PyFlink process that runs the Flink jobs, one per request, in one warm gateway JVM."""

    def __init__(self, python: Path, home: Path, env: Mapping[str, str], log_dir: Path) -> None:
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self._stderr = (log_dir / "server.stderr").open("w")
        self._proc = subprocess.Popen(
            [str(python), str(FLINK_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={
                **os.environ,
                **env,
                "FLINK_HOME": str(home),
                "FLINK_LOG_DIR": str(log_dir),
                "JVM_ARGS": f"-Xmx{HEAP}",
            },
        )

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run one job; its reply (``wall_s``, ``job_id``, ...).

        Raises:
            RuntimeError: the job failed or the server died.
        """
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith(REPLY_PREFIX):
                reply: dict[str, Any] = json.loads(line[len(REPLY_PREFIX) :])
                if "error" in reply:
                    raise RuntimeError(f"Flink job {request['job']} failed: {reply['error'][:2000]}")
                return reply
        raise RuntimeError(f"the PyFlink server ended (exit {self._proc.wait()}); see {self.log_dir}")

    def checkpoints(self, job_id: str) -> int:
        """Completed checkpoints of ``job_id`` in the server's Flink log."""
        return sum(
            completed_checkpoints(p.read_text(errors="replace"), job_id) for p in self.log_dir.glob("*.log")
        )

    def close(self) -> None:
        """Close its stdin (it ends after the current job) and wait."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()


# ------------------------------------------------------------------------------------ visibility


@dataclass
class Visibility:
    """When the topic's ``rows`` records were all in the log, and all visible ``read_committed``.

    Attributes:
        in_log_at / visible_at: ``time.monotonic()``, or None if not reached.
    """

    in_log_at: float | None = None
    visible_at: float | None = None

    @property
    def final_commit_ms(self) -> float | None:
        """End of input (last record in the log) to visible, ms."""
        if self.in_log_at is None or self.visible_at is None:
            return None
        return round((self.visible_at - self.in_log_at) * 1000, 1)


class VisibilityWatcher:
    """Counts a topic's records with a ``read_uncommitted`` and a ``read_committed`` consumer in a
    thread, noting when each reaches ``rows`` (:class:`Visibility`)."""

    def __init__(self, bootstrap: str, topic: str, rows: int, timeout_s: float = 1800.0) -> None:
        self.result = Visibility()
        self._stop = threading.Event()
        self._args = (bootstrap, topic, rows, timeout_s)
        self._thread = threading.Thread(target=self._watch, name=f"visibility-{topic}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        bootstrap, topic, rows, timeout_s = self._args
        consumers = {}
        for isolation in ("read_uncommitted", "read_committed"):
            c = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"bench-flink-visibility-{uuid.uuid4().hex[:8]}",
                    "isolation.level": isolation,
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 20,
                }
            )
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(TOPIC_PARTITIONS)])
            consumers[isolation] = c
        counts = dict.fromkeys(consumers, 0)
        deadline = time.monotonic() + timeout_s
        try:
            while not self._stop.is_set() and time.monotonic() < deadline and self.result.visible_at is None:
                for isolation, c in consumers.items():
                    if counts[isolation] >= rows:
                        continue
                    counts[isolation] += sum(1 for m in c.consume(10_000, 0.02) if m.error() is None)
                    if counts[isolation] >= rows:
                        now = time.monotonic()
                        if isolation == "read_uncommitted":
                            self.result.in_log_at = now
                        else:
                            self.result.visible_at = now
        finally:
            for c in consumers.values():
                c.close()

    def stop(self) -> Visibility:
        """Stop (after the end is seen, or now) and return what was seen."""
        self._stop.set()
        self._thread.join(30)
        return self.result


# ------------------------------------------------------------------------------------ the reader


@dataclass(frozen=True)
class Check:
    """One sink of one round read back (the same reader for both systems)."""

    sink: str
    records: int
    exactly_once: bool
    duplicates: int
    missing: int
    left_open: int
    detail: str = ""


def check_kafka(endpoints: FlightsEndpoints, topic: str, expected: Any) -> Check:
    """Read ``topic`` ``read_committed`` and compare; open transactions = LSO below HW."""
    from twophase.integration.readback import end_offsets
    from twophase.integration.verify import compare, read_kafka

    table, _ = read_kafka(endpoints.kafka_bootstrap, topic)
    report = compare("kafka", topic, table, expected)
    stable = end_offsets(endpoints.kafka_bootstrap, topic, "read_committed", 60.0)
    high = end_offsets(endpoints.kafka_bootstrap, topic, "read_uncommitted", 60.0)
    open_partitions = sum(1 for p in high if stable.get(p) != high[p])
    return Check(
        "kafka", report.records, report.exactly_once, report.duplicates, report.missing, open_partitions
    )


def check_s3(endpoints: FlightsEndpoints, bucket: str, prefix: str, expected: Any) -> Check:
    """Read the Parquet files under ``prefix`` (Hive partitions) with pyarrow and compare; left
    open = multipart uploads pending under the prefix."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from twophase.integration.verify import CONTENT_COLUMNS, compare, s3_filesystem

    dataset = ds.dataset(
        f"{bucket}/{prefix}", filesystem=s3_filesystem(endpoints), format="parquet", partitioning="hive"
    )
    table = dataset.to_table(columns=list(CONTENT_COLUMNS))
    types = {"month": pa.int32(), "distance": pa.int32(), "dep_delay": pa.float64()}
    table = table.cast(pa.schema([pa.field(f.name, types.get(f.name, pa.string())) for f in table.schema]))
    report = compare("s3", prefix, table, expected)
    uploads = endpoints.s3.boto3_client().list_multipart_uploads(Bucket=bucket, Prefix=prefix + "/")
    pending = len(uploads.get("Uploads", []))
    return Check(
        "s3",
        report.records,
        report.exactly_once,
        report.duplicates,
        report.missing,
        pending,
        f"{len(dataset.files)} files",
    )


def clean_up(endpoints: FlightsEndpoints, topic: str, bucket: str, prefix: str) -> None:
    """Delete a checked round's topic and objects (a full run would otherwise keep gigabytes)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})  # kept: its futures need it
    for future in admin.delete_topics([topic]).values():
        future.result(60)
    client = endpoints.s3.boto3_client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        keys = [o["Key"] for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})


# ------------------------------------------------------------------------------------ the run


@dataclass
class RoundResult:
    """What one writer's run produced, beside its wall time.

    Attributes:
        cadence_ms: twophase: the median micro-batch (epoch) time; Flink: the run's wall time per
            completed checkpoint (the interval achieved).
    """

    writer: str
    checkpoints: int
    visibility_ms: float | None
    inner_wall_s: float
    cadence_ms: float
    extra: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    output: tuple[tuple[str, ...], str, str] = ((), "", "")


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    from support.kafka.support import create_topic

    from twophase.coordinator.job_lifecycle import JobState
    from twophase.integration.jobs import flights_data
    from twophase.integration.jobs.flights import FlightsEndpoints, run_flights
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.services import kafka_service, s3_service
    from twophase.integration.services.launcher import given_env
    from twophase.integration.spark import build_spark_session
    from twophase.integration.verify import expected_input

    scale = float(os.environ.get("TWOPHASE_BENCH_SCALE", "1"))
    days = input_days(scale)
    per_trigger = files_per_trigger(days)
    rounds = common.runs(ROUNDS)
    env = common.machine()
    run_id = uuid.uuid4().hex[:8]
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-flink-"))
    data = flights_data.land(days)
    rows = data.rows
    python = flink_venv()
    home = flink_home(python)
    results: list[RoundResult] = []
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
        flink_logs = Path(os.environ.get("TWOPHASE_BENCH_FLINK_LOG_DIR") or scratch / "flink-log")
        server = FlinkServer(python, home, given_env(bootstrap, s3), flink_logs)
        expected = expected_input(
            FlightsJobSpec(job_id="expected", work_dir=str(scratch / "expected"), days=days)
        )
        interval: dict[str, int] = {}

        def job_name(system: str, sinks: str, r: int) -> str:
            return f"{system}_{sinks}_{run_id}_{r}"  # the warm-up is round 0

        def checked(result: RoundResult) -> RoundResult:
            """Read the round's output back (untimed: called after the writer's clock stops)."""
            sinks, topic, prefix = result.output
            if "kafka" in sinks:
                result.checks.append(check_kafka(endpoints, topic, expected))
            if "s3" in sinks:
                result.checks.append(check_s3(endpoints, BUCKET, prefix, expected))
            if all(c.exactly_once and not c.left_open for c in result.checks):
                clean_up(endpoints, topic, BUCKET, prefix)  # a failed round's output stays to look at
            return result

        def watched(topic: str, sinks: tuple[str, ...]) -> VisibilityWatcher | None:
            create_topic(bootstrap, topic, TOPIC_PARTITIONS)
            return VisibilityWatcher(bootstrap, topic, rows) if "kafka" in sinks else None

        def twophase(tag: str, r: int) -> RoundResult:
            sinks = SINK_SETS[tag]
            job = job_name("twophase", tag, r)
            spec = FlightsJobSpec(
                job_id=job,
                work_dir=str(scratch / job),
                days=days,
                files_per_trigger=per_trigger,
                bucket=BUCKET,
                kafka_partitions=TOPIC_PARTITIONS,
                sinks=sinks,
            )
            watcher = watched(spec.topic, sinks)
            outcome = run_flights(spark, spec, endpoints)
            seen = watcher.stop() if watcher is not None else Visibility()
            assert outcome.state is JobState.FINISHED, outcome.state
            result = RoundResult(
                f"twophase_{tag}",
                len(outcome.checkpoints),
                seen.final_commit_ms,
                round(outcome.wall_s, 3),
                round(statistics.median(e.epoch_ms for e in outcome.epochs), 1),
                {
                    "epochs": common.epoch_summary(outcome.epochs),
                    "final_checkpoint_persist_ms": round(outcome.checkpoints[-1].persist_ms, 1),
                    "final_checkpoint_commit_ms": round(outcome.checkpoints[-1].commit_ms, 1),
                },
            )
            result.output = (sinks, spec.topic, spec.s3_prefix)
            return result

        def flink(tag: str, r: int) -> RoundResult:
            sinks = SINK_SETS[tag]
            job = job_name("flink", tag, r)
            topic, prefix = f"flights.{job}", f"flights/{job}"
            watcher = watched(topic, sinks)
            reply = server.run(
                {
                    "job": job,
                    "sinks": list(sinks),
                    "flights_dir": str(data.flights_dir),
                    "airlines": str(data.airlines_path),
                    "airports": str(data.airports_path),
                    "topic": topic,
                    "bootstrap": bootstrap,
                    "txn_prefix": f"flink-{job}",
                    "s3_path": f"s3://{BUCKET}/{prefix}",
                    "checkpoint_interval_ms": interval["ms"],
                    "checkpoint_dir": str(scratch / job / "checkpoints"),
                    "parallelism": PARALLELISM,
                    "kafka": FLINK_KAFKA_PRODUCER,
                    "parquet": PARQUET,
                    "python": FLINK_PYTHON,
                }
            )
            seen = watcher.stop() if watcher is not None else Visibility()
            done = server.checkpoints(reply["job_id"])
            achieved = round(reply["wall_s"] * 1000 / max(done, 1), 1)
            result = RoundResult(
                f"flink_{tag}",
                done,
                seen.final_commit_ms,
                reply["wall_s"],
                achieved,
                {"plan_s": reply["plan_s"]},
            )
            result.output = (sinks, topic, prefix)
            return result

        def writer(system: Callable[[str, int], RoundResult], tag: str) -> Callable[[int], object]:
            return lambda r: system(tag, r + 1)

        def verified(result: RoundResult) -> RoundResult:
            bad = [c for c in checked(result).checks if not c.exactly_once or c.left_open]
            if bad:
                raise AssertionError(f"{result.writer}: output not exactly once or left open: {bad}")
            return result

        def record(name: str, r: int, result: object) -> None:
            assert isinstance(result, RoundResult)
            results.append(verified(result))

        try:
            # warm-up (round 0): Spark's JVM and Python workers, Flink's gateway JVM, Python
            # workers and planner; the twophase run's cadence sets Flink's checkpoint interval
            warm = verified(twophase("all", 0))
            interval["ms"] = int(
                os.environ.get("TWOPHASE_BENCH_FLINK_CHECKPOINT_MS") or matched_interval_ms(warm.cadence_ms)
            )
            log.warning("Flink checkpoint interval %d ms (twophase warm-up: %s)", interval["ms"], warm)
            verified(flink("all", 0))
            writers = {
                f"{system}_{tag}": writer(fn, tag)
                for tag in SINK_SETS
                for system, fn in (("twophase", twophase), ("flink", flink))
            }
            times = common.side_by_side(writers, rounds, record)
        finally:
            server.close()
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    by_writer: dict[str, list[RoundResult]] = {}
    for res in results:
        by_writer.setdefault(res.writer, []).append(res)
    return {
        "rows": rows,
        "days": days,
        "rounds": rounds,
        **env,
        "at_end": load_average(),
        "settings": settings(per_trigger, interval["ms"]),
        "writers": {w: common.summary(t, rows) for w, t in times.items()},
        "ratio_twophase_over_flink": sink_ratios(times),
        "per_round": {
            w: [
                {
                    "wall_s": round(t, 3),
                    "inner_wall_s": res.inner_wall_s,
                    "checkpoints": res.checkpoints,
                    "cadence_ms": res.cadence_ms,
                    **res.extra,
                    "end_of_input_to_visible_ms": res.visibility_ms,
                    "checks": [asdict(c) for c in res.checks],
                }
                for t, res in zip(times[w], by_writer[w], strict=True)
            ]
            for w in times
        },
        "end_of_input_to_visible_ms_median": {
            w: statistics.median(v)
            if (v := [r.visibility_ms for r in by_writer[w] if r.visibility_ms is not None])
            else None
            for w in times
        },
    }


def settings(per_trigger: int, checkpoint_ms: int) -> dict[str, Any]:
    """Every setting of both sides, for the report."""
    return {
        "parallelism": PARALLELISM,
        "heap": HEAP,
        "twophase": {
            "spark_master": f"local[{PARALLELISM},4]",
            "trigger": "availableNow",
            "files_per_trigger": per_trigger,
            "checkpoint": "one per micro-batch, then the final one",
            "kafka": {
                **KAFKA_PRODUCER,
                "client": "librdkafka (confluent-kafka)",
                "batch.size": "1000000 (default)",
            },
            "parquet": "pyarrow, snappy, row groups of 32 MiB Arrow bytes, rolls per checkpoint, 8 MiB parts",
            "python_workers": f"{PARALLELISM} (Spark local[{PARALLELISM}], reused)",
        },
        "flink": {
            "version": FLINK_VERSION,
            "jars": "benchmarks/flink/pom-lib.xml and pom-s3-plugin.xml (Maven Central)",
            "mode": "Table API/SQL, STREAMING, bounded file source",
            "checkpoint_interval_ms": checkpoint_ms,
            "checkpointing": "EXACTLY_ONCE, hashmap state, file:// storage, checkpoints after tasks finish",
            "kafka": {
                **FLINK_KAFKA_PRODUCER,
                "client": "Java kafka-clients (shaded)",
                "delivery": "exactly-once",
            },
            "parquet": {**PARQUET, "writer": "flink-parquet bulk format, rolls per checkpoint"},
            "python_workers": f"{PARALLELISM} (one per slot, process mode) running the lookups",
            "python": FLINK_PYTHON,
        },
        "delta": "no Delta sink for Flink 2.x: left out of both sides",
    }


def markdown(result: Mapping[str, Any]) -> str:
    """The per-round table of a run's JSON (:func:`run`), for BENCHMARKS.md: per sink set the two
    systems' wall time, rows/s, checkpoints, end of input to visible and the read-back, then the
    ratio twophase ÷ Flink."""
    rows = result["rows"]
    lines = [
        "| sinks | round | twophase s (rows/s) | Flink s (rows/s) | twophase ÷ Flink "
        "| checkpoints 2PC / Flink | end of input → visible ms 2PC / Flink | read back |",
        "|---|---|---|---|---|---|---|---|",
    ]
    per_round = result["per_round"]
    for tag in SINK_SETS:
        ours, theirs = per_round.get(f"twophase_{tag}", []), per_round.get(f"flink_{tag}", [])
        for r, (a, b) in enumerate(zip(ours, theirs, strict=False), start=1):
            checks = [c for run_ in (a, b) for c in run_["checks"]]
            ok = all(c["exactly_once"] and not c["left_open"] for c in checks)
            verdict = "exactly once, nothing open" if ok else "FAILED"
            lines.append(
                f"| {tag} | {r} | {a['wall_s']:.1f} ({rows / a['wall_s']:,.0f}) | {b['wall_s']:.1f} "
                f"({rows / b['wall_s']:,.0f}) | {b['wall_s'] / a['wall_s']:.2f} | {a['checkpoints']} / "
                f"{b['checkpoints']} | {a['end_of_input_to_visible_ms'] or '–'} / "
                f"{b['end_of_input_to_visible_ms'] or '–'} | {verdict} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--markdown"]:  # render a saved run: --markdown run.json
        print(markdown(json.loads(Path(sys.argv[2]).read_text())))
        sys.exit(0)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    print(json.dumps(run(), indent=2))
