"""One driver of the soak (``benchmarks/soak.py``): the flights job's sinks on the endless rate
stream, in a process of its own so that the soak can kill it (SIGKILL to its process group:
Python, its JVM and the Python workers die together) and start another that restores the job
from its ``s3://`` checkpoint and Spark's ``s3a://`` checkpoint.

The run's manifest (``flights-job.json`` in ``--work-dir``) says where everything lives; the
services come from ``TWOPHASE_*`` in the environment (the soak sets them). Every ``--sample-s``
seconds the driver appends one :class:`Sample` to ``<out>/samples.jsonl`` and the epochs completed
since to ``<out>/epochs.jsonl``, each tagged with ``--segment``. It stops with a drain (the final
checkpint, FLIP-147) when ``--until`` (a Unix time) has passed or ``--epochs`` epochs are done,
and writes ``<out>/segment-<n>.json``; a killed driver writes nothing more.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

    from twophase.connectors.kafka.internal.admin import KafkaAdmin
    from twophase.coordinator.spark.handle import JobHandle
    from twophase.integration.jobs.flights_spec import FlightsJobSpec

log = logging.getLogger(__name__)


HEAP = "1g"
RETAINED = 100
DRIVER_CONF = {
    "spark.driver.memory": HEAP,
    "spark.driver.defaultJavaOptions": f"-Xms{HEAP} -XX:+AlwaysPreTouch -XX:NativeMemoryTracking=summary",
    "spark.ui.retainedJobs": str(RETAINED),
    "spark.ui.retainedStages": str(RETAINED),
    "spark.sql.ui.retainedExecutions": str(RETAINED),
}
"""The driver JVM's settings, as a streaming job meant to run for weeks sets them. ``RETAINED`` is
also the runtime's ``metrics_history``: at its default of 1,000 the job's per-epoch metrics filled
for 105 minutes, about 3,000 Python objects an hour (the 2026-12-06 soak), longer than a segment.

The heap is committed and touched at start (``-Xms`` = ``-Xmx``, ``AlwaysPreTouch``): otherwise
the JVM grows its heap towards ``-Xmx`` for the first hours, and its RSS climbs by design (+57 and
+92 MB an hour in the first soak). So the JVM's RSS slope is what lives outside the heap (metaspace,
code cache, threads, direct buffers: Native Memory Tracking's summary says which, at about 5 % of
its cost), and the heap's own growth is the old generation after GC. ``defaultJavaOptions``
because ``extraJavaOptions`` is the session's own (Derby's home).

Spark's status store (the UI's and the REST API's jobs, stages, tasks and SQL executions) keeps
1,000 jobs, stages and executions by default: at a few of each an epoch it fills for hours, and the
live heap grows by design until it is full (+22 MB in 30 minutes in the 2026-12-06 soak, still
filling at its end). A long-running streaming job bounds it (Spark's configuration guide,
``spark.ui.retained*``); at 100 it is full within the soak's warm-up, so the old generation's slope
is what grows past it."""

CLEANER_WAIT_S = 2.0
"""Seconds between the two full collections of :func:`old_generation`: Spark's ``ContextCleaner``
frees a broadcast's blocks only once a collection found the broadcast unreachable (it polls its
reference queue every 100 ms), and the blocks' memory is then free for the next collection."""


CENSUS_TOP = 15
"""Names kept by :func:`census` (the diagnosis of a figure that grows, not a figure itself)."""

POLL_S = 5.0
"""Seconds between two polls of the processes' figures within a sample's interval
(:class:`Floors`)."""


@dataclass(frozen=True)
class Process:
    """One process's footprint from ``/proc/<pid>``: resident memory (MB), threads, open fds, and
    of the resident memory the pages of mapped files (``RssFile``, MB: libraries and jars, whose
    pages come in as code paths first run, bounded by the files' size and given back by the kernel
    under pressure; 0 in samples from before it was read)."""

    rss_mb: float
    threads: int
    fds: int
    rss_file_mb: float = 0.0

    @classmethod
    def of(cls, pid: int) -> Process:
        """Read ``/proc/<pid>/status`` and ``/proc/<pid>/fd``.

        Raises:
            OSError: the process is gone.
        """
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        return cls(
            rss_mb=round(int(fields["VmRSS"].split()[0]) / 1024, 1),
            threads=int(fields["Threads"]),
            fds=len(os.listdir(f"/proc/{pid}/fd")),
            rss_file_mb=round(int(fields.get("RssFile", "0 kB").split()[0]) / 1024, 1),
        )


class Floors:
    """The least of every figure of one process over the polls of a sampling interval."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._least: Process | None = None

    def poll(self) -> None:
        """Read the process's figures once and keep each one's least.

        Raises:
            OSError: the process is gone.
        """
        now = Process.of(self._pid)
        least = self._least
        self._least = (
            now
            if least is None
            else Process(
                min(least.rss_mb, now.rss_mb),
                min(least.threads, now.threads),
                min(least.fds, now.fds),
                min(least.rss_file_mb, now.rss_file_mb),
            )
        )

    def take(self) -> Process:
        """The floors since the last call (a poll first), and start a new interval."""
        self.poll()
        assert self._least is not None
        taken, self._least = self._least, None
        return taken


def release_python_memory() -> None:
    """Give back what the Python driver no longer uses before its RSS is read: a full collection
    of Python's objects, pyarrow's pool's unused memory, and glibc's free heap pages
    (``malloc_trim``, where the C library has it), so that the RSS floor is the live memory, not
    the allocators' caches."""
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


def _libc(function: str) -> Any:
    """``function`` of the C library (a ctypes function), or ``None`` where it has none (not glibc,
    or an older one)."""
    import ctypes.util

    libc = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(libc), function, None) if libc else None


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (``malloc.h``, glibc 2.33 and later), sizes in bytes."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def python_heap() -> dict[str, float]:
    """What the Python driver's native heaps hold, MB, read after :func:`release_python_memory`:
    ``arrow``, the bytes pyarrow's default pool has allocated (the columnar committables); ``C heap
    in use`` and ``C heap free``, glibc's allocated and free bytes (``mallinfo2``: delta-rs's Rust
    allocations, CPython's large objects), where glibc has it. A growing RSS whose ``in use`` grows
    is live memory; one whose ``free`` grows is the allocator's fragmentation."""
    import pyarrow as pa

    heap = {"arrow": round(pa.total_allocated_bytes() / 2**20, 1)}
    read = _libc("mallinfo2")
    if read is not None:
        read.restype = _MallInfo2
        info = read()
        heap["C heap in use"] = round((info.uordblks + info.hblkhd) / 2**20, 1)
        heap["C heap free"] = round(info.fordblks / 2**20, 1)
    return heap


@dataclass(frozen=True)
class Sample:
    """The figures of one sampling interval.

    Attributes:
        segment: the driver: 0 before the restart, 1 after.
        minute: minutes since the soak started (wall clock, across segments).
        epochs: epochs this driver completed so far; ``epochs_in_window`` of them since the last
            sample. ``records``: records this driver wrote (each sink received all of them).
        write_ms / persist_ms / commit_ms / epoch_ms: medians over the window's epochs, ms.
        python / jvm: the driver's Python process and its JVM, each figure the *floor* of the
            interval: the least of its polls (every :data:`POLL_S` s, and one after the sample's
            collections and the C heaps' trims, :meth:`Sampler.take`). Sockets, threads and
            buffers come and go with every epoch; a leak raises the floor.
        jvm_old_gen_mb: the JVM's live old generation, MB: the old pool's
            ``MemoryPoolMXBean.getCollectionUsage`` right after a full collection the sampler
            asks for (``System.gc()``), so no young-generation timing moves it;
            ``jvm_collections``: collections so far.
        checkpoint_bytes / checkpoint_files: twophase's checkpoint storage (S3).
        spark_checkpoint_bytes: Spark's own checkpoint (offsets and commit logs, S3).
        kafka_ids: transactional ids the brokers know for the job's Kafka sink (any state);
            ``kafka_open``: of them, those with a transaction open.
        delta_log_bytes / delta_log_files: the Delta table's ``_delta_log`` (S3);
            ``delta_log_since_checkpoint``: JSON commits after its newest log checkpoint.
        load_1m: the machine's load (``/proc/loadavg``).
        commit_ms_by_sink: each sink's commit time, ms, median over the window's checkpoints
            (the runtime's per-sink metrics: which sink's commit grows, if ``commit_ms`` does).
        jvm_native_mb: the JVM's committed native memory by Native Memory Tracking category, MB,
            read beside the JVM's last poll (what the JVM's RSS outside the heap is made of).
        python_objects: objects Python's collector tracks; ``python_types``: the most frequent
            types among them; ``jvm_thread_names``: the JVM's threads by name, digits folded
            (:func:`census`): the diagnosis of a growing RSS or thread count, not gated.
        jvm_block_store_mb: of ``jvm_old_gen_mb``, Spark's block store (:class:`Heap`), read with
            it; ``None`` in samples from before it was read.
        python_growth: the Python types whose objects rose most since the segment's first sample
            (:func:`growth`), each with its rise: what grows, when it is none of the most frequent.
        python_heap_mb: what the Python driver's native heaps hold (:func:`python_heap`); empty
            in samples from before it was read.
    """

    segment: int
    minute: float
    epochs: int
    epochs_in_window: int
    records: int
    write_ms: float
    persist_ms: float
    commit_ms: float
    epoch_ms: float
    python: Process
    jvm: Process
    jvm_old_gen_mb: float
    jvm_collections: int
    checkpoint_bytes: int
    checkpoint_files: int
    spark_checkpoint_bytes: int
    kafka_ids: int
    kafka_open: int
    delta_log_bytes: int
    delta_log_files: int
    delta_log_since_checkpoint: int
    load_1m: float
    commit_ms_by_sink: dict[str, float] = dataclasses.field(default_factory=dict)
    jvm_native_mb: dict[str, float] = dataclasses.field(default_factory=dict)
    python_objects: int = 0
    python_types: dict[str, int] = dataclasses.field(default_factory=dict)
    jvm_thread_names: dict[str, int] = dataclasses.field(default_factory=dict)
    jvm_block_store_mb: float | None = None
    python_growth: dict[str, int] = dataclasses.field(default_factory=dict)
    python_heap_mb: dict[str, float] = dataclasses.field(default_factory=dict)


SINKS = ("kafka", "s3", "delta")
"""The flights job's sinks, by name (``flights_base_sinks.SINK_NAMES``)."""


def sink_commit_figure(sink: str) -> str:
    """The name of ``sink``'s own commit time figure."""
    return f"commit ms {sink} (median per epoch)"


def _sink_commit(sink: str) -> Callable[[Sample], float]:
    return lambda s: s.commit_ms_by_sink.get(sink, 0.0)


FIGURES: dict[str, Callable[[Sample], float]] = {
    "write ms (median per epoch)": lambda s: s.write_ms,
    "persist ms (median per epoch)": lambda s: s.persist_ms,
    "commit ms (median per epoch)": lambda s: s.commit_ms,
    **{sink_commit_figure(sink): _sink_commit(sink) for sink in SINKS},
    "epoch ms (median per epoch)": lambda s: s.epoch_ms,
    "Python driver RSS MB": lambda s: s.python.rss_mb,
    "Python driver RSS of mapped files MB": lambda s: s.python.rss_file_mb,
    "JVM driver RSS MB": lambda s: s.jvm.rss_mb,
    "JVM driver RSS of mapped files MB": lambda s: s.jvm.rss_file_mb,
    "JVM code cache MB": lambda s: s.jvm_native_mb.get("Code", 0.0),
    "JVM old generation after GC MB": lambda s: s.jvm_old_gen_mb,
    "JVM block store MB": lambda s: s.jvm_block_store_mb or 0.0,
    "JVM old generation after GC, less the block store MB": lambda s: beside_blocks(s),
    "JVM native memory outside the heap MB": lambda s: outside_heap(s.jvm_native_mb),
    "Python driver arrow memory MB": lambda s: s.python_heap_mb.get("arrow", 0.0),
    "Python driver C heap in use MB": lambda s: s.python_heap_mb.get("C heap in use", 0.0),
    "Python objects tracked": lambda s: s.python_objects,
    "Python driver threads": lambda s: s.python.threads,
    "JVM driver threads": lambda s: s.jvm.threads,
    "Python driver open fds": lambda s: s.python.fds,
    "JVM driver open fds": lambda s: s.jvm.fds,
    "checkpoint storage bytes": lambda s: s.checkpoint_bytes,
    "Spark checkpoint bytes": lambda s: s.spark_checkpoint_bytes,
    "Kafka transactional ids": lambda s: s.kafka_ids,
    "Delta log commits since its checkpoint": lambda s: s.delta_log_since_checkpoint,
    "Delta log bytes": lambda s: s.delta_log_bytes,
    "machine load (1 min)": lambda s: s.load_1m,
}
"""Every sampled figure by name: the plot's panels, the table's rows and the fitted slopes
(each has its threshold in ``benchmarks/soak_fit.py``)."""


def beside_blocks(sample: Sample) -> float:
    """The driver's live old generation that is not Spark's block store, MB (the old generation
    itself for samples from before the block store was read)."""
    return sample.jvm_old_gen_mb - (sample.jvm_block_store_mb or 0.0)


def loaded(line: str) -> Sample:
    """A :class:`Sample` from its JSON line in ``samples.jsonl``."""
    raw = json.loads(line)
    return Sample(**{**raw, "python": Process(**raw["python"]), "jvm": Process(**raw["jvm"])})


def s3_path(uri: str) -> str:
    """``s3://bucket/key`` or ``s3a://bucket/key`` as pyarrow's ``bucket/key``."""
    return uri.split("://", 1)[1].rstrip("/")


def tree_size(fs: pafs.FileSystem, path: str) -> tuple[int, int]:
    """Bytes and files under ``path`` of ``fs`` (0, 0 if there is nothing)."""
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    files = [i for i in infos if i.type == pafs.FileType.File]
    return sum(i.size or 0 for i in files), len(files)


def delta_log(fs: pafs.FileSystem, table: str) -> tuple[int, int, int]:
    """The Delta log's bytes, files and JSON commits after its newest log checkpoint (Delta
    PROTOCOL.md: ``_last_checkpoint`` names it); ``table`` is a path of ``fs``."""
    import pyarrow.fs as pafs

    log_dir = f"{table}/_delta_log"
    infos = fs.get_file_info(pafs.FileSelector(log_dir, recursive=False, allow_not_found=True))
    files = [i for i in infos if i.type == pafs.FileType.File]
    names = [i.base_name for i in files]
    commits = [int(n.split(".")[0]) for n in names if n.endswith(".json") and n.split(".")[0].isdigit()]
    checkpoint = -1
    if "_last_checkpoint" in names:
        with fs.open_input_stream(f"{log_dir}/_last_checkpoint") as f:
            checkpoint = json.loads(f.read())["version"]
    return sum(i.size or 0 for i in files), len(files), sum(1 for c in commits if c > checkpoint)


@dataclass(frozen=True)
class Heap:
    """The driver JVM's heap right after the sampler's full collections (:func:`old_generation`).

    Attributes:
        old_gen_mb: the live old generation, MB (after a full collection it holds every live object).
        block_store_mb: of it, Spark's block store, MB: the storage memory in use on the heap
            (``MemoryManager.onHeapStorageMemoryUsed``, Spark's own size estimate): every
            micro-batch's broadcast relations and their serialized pieces until the
            ``ContextCleaner`` removes them, cached blocks. Bounded by Spark's unified memory
            manager (``spark.memory.fraction``: it spills to disk, it cannot fill the heap).
        collections: the JVM's collections so far.
    """

    old_gen_mb: float
    block_store_mb: float
    collections: int


def old_generation(spark: SparkSession, cleaner_wait_s: float = CLEANER_WAIT_S) -> Heap:
    """The driver JVM's live old generation and block store (:class:`Heap`), from the JVM's own
    management beans (``java.lang.management``) and Spark's memory manager (through py4j), read
    right after two full collections asked for here, ``cleaner_wait_s`` apart so that Spark's
    cleaner frees what the first one found unreachable (:data:`CLEANER_WAIT_S`). ``System.gc()``
    without ``-XX:+ExplicitGCInvokesConcurrent`` is a stop-the-world full GC of the whole heap: two
    short pauses of the driver once a sample."""
    jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
    jvm.java.lang.System.gc()
    time.sleep(cleaner_wait_s)
    jvm.java.lang.System.gc()
    management = jvm.java.lang.management.ManagementFactory
    used = 0.0
    for pool in management.getMemoryPoolMXBeans():
        name = str(pool.getName())
        if "Old Gen" in name or "Tenured" in name:  # G1 Old Gen, PS Old Gen, Tenured Gen
            usage = pool.getCollectionUsage()
            used = usage.getUsed() / 2**20 if usage is not None else 0.0
    stored = jvm.org.apache.spark.SparkEnv.get().memoryManager().onHeapStorageMemoryUsed() / 2**20
    collections = sum(int(gc.getCollectionCount()) for gc in management.getGarbageCollectorMXBeans())
    return Heap(round(used, 1), round(stored, 1), collections)


_NMT_LINE = re.compile(r"^-\s+(?P<name>[^(]+?)\s+\(reserved=\d+KB, committed=(?P<committed>\d+)KB")


def parse_native_memory(summary: str) -> dict[str, float]:
    """Committed MB by Native Memory Tracking category (``Java Heap``, ``Class``, ``Thread``,
    ``Code``, ``GC``, ``Internal``, ``Other``, ``Symbol``, ``Arena Chunk``, ...), from the text of
    ``jcmd <pid> VM.native_memory summary`` (JDK 17's format: one ``-  <category> (reserved=…KB,
    committed=…KB)`` line each); empty when the text has none (tracking off)."""
    out: dict[str, float] = {}
    for line in summary.splitlines():
        m = _NMT_LINE.match(line.strip())
        if m:
            out[m["name"].strip()] = round(int(m["committed"]) / 1024, 1)
    return out


def _jcmd(pid: int, *command: str) -> str:
    """What the JDK's ``jcmd`` prints for ``command`` sent to the JVM ``pid``; empty if ``jcmd`` is
    missing or the JVM does not answer within 30 s."""
    java_home = os.environ.get("JAVA_HOME")
    jcmd = str(Path(java_home) / "bin" / "jcmd") if java_home else shutil.which("jcmd")
    if not jcmd or not Path(jcmd).exists():
        return ""
    try:
        done = subprocess.run([jcmd, str(pid), *command], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


def native_memory(pid: int) -> dict[str, float]:
    """The JVM ``pid``'s committed native memory by category, MB (:func:`parse_native_memory`),
    read with the JDK's ``jcmd``; empty if ``jcmd`` is missing or the JVM does not answer."""
    return parse_native_memory(_jcmd(pid, "VM.native_memory", "summary"))


def trim_native_heap(pid: int) -> None:
    """Have the JVM ``pid`` give back the C heap's free pages (``jcmd System.trim_native_heap``,
    glibc's ``malloc_trim``; JDK 17.0.9 and later), so that its RSS floor is the live memory, not
    the allocator's caches: the JVM's side of :func:`release_python_memory`. The JVM's RSS grew
    83 MB an hour in the 2026-12-06 soak while Native Memory Tracking's committed memory outside
    the heap grew 20. A JDK without the command ignores it."""
    _jcmd(pid, "System.trim_native_heap")


def outside_heap(categories: dict[str, float]) -> float:
    """Committed native memory outside the Java heap, MB: every category but ``Java Heap``."""
    return round(sum(mb for name, mb in categories.items() if name != "Java Heap"), 1)


def census(names: Iterable[str], top: int = CENSUS_TOP) -> dict[str, int]:
    """The ``top`` most frequent names, each with its count, digits folded (``Executor task launch
    worker for task 12.0`` and ``… 13.0`` count as one ``#``), most frequent first."""
    counts = Counter(re.sub(r"\d+", "#", name) for name in names)
    return dict(counts.most_common(top))


def python_objects() -> Counter[str]:
    """Objects Python's collector tracks in this process, counted by type (a growth of RSS that is
    Python's own shows here, by type)."""
    import gc

    return Counter(type(o).__qualname__ for o in gc.get_objects())


def growth(first: Counter[str], now: Counter[str], top: int = CENSUS_TOP) -> dict[str, int]:
    """The ``top`` names whose count rose most from ``first`` to ``now``, each with its rise, the
    largest first; names that did not rise are left out."""
    risen = Counter({name: n - first[name] for name, n in now.items() if n > first[name]})
    return dict(risen.most_common(top))


def jvm_threads(spark: SparkSession) -> dict[str, int]:
    """The driver JVM's live threads by name (:func:`census`), from its thread MXBean."""
    jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
    infos = jvm.java.lang.management.ManagementFactory.getThreadMXBean().dumpAllThreads(False, False)
    return census(str(info.getThreadName()) for info in infos if info is not None)


def soak_stream(
    spark: SparkSession, spec: FlightsJobSpec, month: str, n: int, rows_per_second: int, partitions: int
) -> DataFrame:
    """The endless flights stream: ``rate`` rows (``partitions`` of them per micro-batch) joined
    to the month's flight ``value mod n``, renamed ``soak-<value>``, then the flights job's
    enrichment. The rate source's values are its offsets (seconds since the query was created,
    kept in Spark's checkpoint, times ``rows_per_second``), so a restored query continues the
    sequence and a replayed batch has the same rows."""
    from pyspark.sql import functions as F

    from twophase.integration.jobs.flights import enrich
    from twophase.integration.jobs.flights_data import FLIGHT_SCHEMA

    flights = spark.read.parquet(month)
    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .option("numPartitions", partitions)
        .load()
        .select(F.col("value"), (F.col("value") % n).alias("slot"))
        .join(F.broadcast(flights), "slot")
        .withColumn("flight_id", F.concat(F.lit("soak-"), F.col("value").cast("string")))
        .select(*FLIGHT_SCHEMA.names)
    )
    return enrich(spark, stream, spec)


class Sampler:
    """Takes one :class:`Sample` of the running driver; owns the window's start (the epochs seen)."""

    def __init__(
        self,
        spark: SparkSession,
        handle: JobHandle,
        spec: FlightsJobSpec,
        fs: pafs.FileSystem,
        admin: KafkaAdmin,
        pattern: str,
        segment: int,
        started: float,
    ) -> None:
        self._spark = spark
        self._handle = handle
        self._spec = spec
        self._fs = fs
        self._admin = admin
        self._pattern = pattern
        self._segment = segment
        self._started = started
        self._jvm_pid: int = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        self._python = Floors(os.getpid())
        self._jvm = Floors(self._jvm_pid)
        self._seen = 0
        self._first_objects: Counter[str] | None = None  # the census of the segment's first sample

    def poll(self) -> None:
        """Read both processes' figures once (:class:`Floors`)."""
        self._python.poll()
        self._jvm.poll()

    def take(self) -> tuple[Sample, list[dict[str, Any]]]:
        """The figures now, and the epochs completed since the previous call (as JSON objects);
        the latency medians are over those epochs, the processes' figures their floors since the
        previous call (the last poll after both drivers' collections)."""
        from twophase.connectors.kafka.internal.lingering import OPEN_STATES

        epochs = self._handle.metrics  # the newest RuntimeConfig.metrics_history epochs
        totals = self._handle.totals
        fresh = min(totals.epochs - self._seen, len(epochs))
        new = list(epochs[len(epochs) - fresh :]) if fresh else []
        window = new or list(epochs[-1:])  # no epoch ended meanwhile: the latest one's figures
        self._seen = totals.epochs
        ids = self._admin.list_transactions([], self._pattern)
        checkpoint_bytes, checkpoint_files = tree_size(self._fs, s3_path(self._spec.checkpoint_dir))
        delta_bytes, delta_files, since = delta_log(self._fs, s3_path(self._spec.delta_uri))
        heap = old_generation(self._spark)  # after a full GC, so is the JVM's last poll
        trim_native_heap(self._jvm_pid)
        native = native_memory(self._jvm_pid)
        threads = jvm_threads(self._spark)
        release_python_memory()
        native_heaps = python_heap()
        objects = python_objects()
        if self._first_objects is None:
            self._first_objects = objects
        by_sink = {
            (m.sink, m.checkpoint_id): m.commit_ms for m in self._handle.runtime.sink_metrics.per_checkpoint()
        }
        checkpoints = {m.checkpoint_id for m in window}
        minute = round((time.time() - self._started) / 60, 2)

        def median(field: str) -> float:
            return round(statistics.median(getattr(m, field) for m in window), 1) if window else 0.0

        sample = Sample(
            segment=self._segment,
            minute=minute,
            epochs=totals.epochs,
            epochs_in_window=len(new),
            records=totals.records,
            write_ms=median("write_ms"),
            persist_ms=median("persist_ms"),
            commit_ms=median("commit_ms"),
            epoch_ms=median("epoch_ms"),
            python=self._python.take(),
            jvm=self._jvm.take(),
            jvm_old_gen_mb=heap.old_gen_mb,
            jvm_block_store_mb=heap.block_store_mb,
            jvm_collections=heap.collections,
            checkpoint_bytes=checkpoint_bytes,
            checkpoint_files=checkpoint_files,
            spark_checkpoint_bytes=tree_size(self._fs, s3_path(self._spec.spark_checkpoint))[0],
            kafka_ids=len({txn_id for txn_id, _, _ in ids}),
            kafka_open=len({txn_id for txn_id, _, state in ids if state in OPEN_STATES}),
            delta_log_bytes=delta_bytes,
            delta_log_files=delta_files,
            delta_log_since_checkpoint=since,
            load_1m=round(os.getloadavg()[0], 2),
            commit_ms_by_sink={
                sink: round(statistics.median(times), 1)
                for sink in SINKS
                if (times := [ms for (name, cp), ms in by_sink.items() if name == sink and cp in checkpoints])
            },
            jvm_native_mb=native,
            python_objects=objects.total(),
            python_types=dict(objects.most_common(CENSUS_TOP)),
            python_growth=growth(self._first_objects, objects),
            python_heap_mb=native_heaps,
            jvm_thread_names=threads,
        )
        rows = [
            {
                "segment": self._segment,
                "minute": minute,
                **dataclasses.asdict(m),
                **{
                    f"commit_ms_{sink}": by_sink[(sink, m.checkpoint_id)]
                    for sink in SINKS
                    if (sink, m.checkpoint_id) in by_sink
                },
            }
            for m in new
        ]
        return sample, rows


@click.command()
@click.option("--work-dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--segment", type=int, required=True, help="0 before the restart, 1 after")
@click.option("--started", type=float, required=True, help="the soak's start, Unix seconds")
@click.option("--until", type=float, required=True, help="stop with a drain after this Unix time …")
@click.option("--epochs", type=int, required=True, help="… or after this many epochs of this driver")
@click.option("--month", required=True, help="the month's flights with their slot (soak.month_table)")
@click.option("--flights", type=int, required=True, help="rows of --month")
@click.option("--rows-per-second", type=int, required=True)
@click.option("--partitions", type=int, required=True, help="the rate source's partitions per batch")
@click.option("--trigger-ms", type=int, required=True)
@click.option("--sample-s", type=float, required=True)
def main(
    work_dir: Path,
    out: Path,
    segment: int,
    started: float,
    until: float,
    epochs: int,
    month: str,
    flights: int,
    rows_per_second: int,
    partitions: int,
    trigger_ms: int,
    sample_s: float,
) -> None:
    """Run (or restore) the soak's job in WORK_DIR; see the module docstring."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from twophase.connectors.kafka.internal import naming
    from twophase.connectors.kafka.internal.admin import KafkaAdmin
    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.jobs.flights import (
        build_sinks,
        endpoints_from_environment,
        flights_spark_session,
        runtime_config,
        start_flights,
    )
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.verify import s3_filesystem

    spec = FlightsJobSpec.load(work_dir)
    endpoints = endpoints_from_environment()
    fs = s3_filesystem(endpoints)
    spark = flights_spark_session(endpoints, extra_conf=DRIVER_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    kafka = build_sinks(spec, endpoints)[0]
    admin = KafkaAdmin.connect(kafka.config, kafka.clients, kafka.name)
    pattern = naming.id_pattern(kafka.config.prefix(spec.job_id), kafka.name)
    restored = time.monotonic()
    handle = start_flights(
        spark,
        spec,
        endpoints,
        soak_stream(spark, spec, month, flights, rows_per_second, partitions),
        {"processingTime": f"{trigger_ms} milliseconds"},
        dataclasses.replace(runtime_config(spec), metrics_history=RETAINED),
    )
    log.info("soak segment %d: started in %.1f s", segment, time.monotonic() - restored)
    sampler = Sampler(spark, handle, spec, fs, admin, pattern, segment, started)
    with (out / "samples.jsonl").open("a") as samples, (out / "epochs.jsonl").open("a") as epoch_log:
        while time.time() < until and handle.totals.epochs < epochs:
            due = time.monotonic() + sample_s
            while (left := due - time.monotonic()) > 0:
                if handle.await_termination(min(POLL_S, left)):
                    raise click.ClickException(f"the soak's job ended early: {handle.status.value}")
                sampler.poll()
            sample, rows = sampler.take()
            samples.write(json.dumps(dataclasses.asdict(sample)) + "\n")
            samples.flush()
            epoch_log.writelines(json.dumps(r) + "\n" for r in rows)
            epoch_log.flush()
            log.info(
                "soak segment %d minute %.1f: %d epochs, %d records, old gen %.1f MB",
                segment,
                sample.minute,
                sample.epochs,
                sample.records,
                sample.jvm_old_gen_mb,
            )
    stopped = time.monotonic()
    handle.stop(savepoint=True, drain=True, timeout=600)
    drain_s = time.monotonic() - stopped
    outcome = {
        "segment": segment,
        "status": handle.status.value,
        "epochs": handle.totals.epochs,
        "records": handle.totals.records,
        "drain_s": round(drain_s, 1),
    }
    (out / f"segment-{segment}.json").write_text(json.dumps(outcome, indent=2))
    spark.stop()
    if handle.status is not JobState.FINISHED:
        raise click.ClickException(f"the soak's job did not finish: {handle.status.value}")


if __name__ == "__main__":
    main()
