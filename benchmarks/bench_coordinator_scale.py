"""Benchmark: the coordinator at scale (issue #29 item 3).

The real driver-side runtime (:class:`~twophase.coordinator.run.runtime.JobRuntime`: trigger,
acknowledgement intake, verify-before-persist, publish, commit dispatch, lingering cleanup,
retention, restore) for a job of 3 sinks with ``n`` = 10², 10³, 10⁴ and 10⁵ subtasks each.
Executors are simulated: each epoch's acknowledgements are built before the clock starts, with the
payloads the real connectors' codecs produce (``KafkaCommittable``, ``S3Committable``,
``DeltaCommittable``, one per subtask). The sinks are the connectors' codecs over no-op services:
commit answers COMMITTED, verification and lingering cleanup find nothing, so what is timed is
coordinator work, not services. The simulated executors run in a child process and hand each
epoch's acknowledgement table over as an Arrow IPC file, read into the driver's memory before the
epoch's clock starts (issue #42): the measured process holds what a real driver holds (the table
Spark's collection hands it, its own state), not the executors' objects.

Steps (wall-clock ms, median of the rounds with min-max; ``cpu_ms`` the driver process's CPU time
over the step, user and system, all threads; memory as the driver's RSS):

- ``trigger``: ``begin_epoch`` (every sink expects ``n`` acknowledgements);
- ``acknowledge``: the ``3n`` acknowledgements, from the Arrow table Spark's collection hands the
  driver (one batch per task up to ``gather_acknowledgements_above`` tasks, 500 by default; above
  it gathered, in batches of 10,000 rows) to the coordinator's record of each: checked in Arrow
  compute (release, every payload's codec header as its executor stamped it); payloads kept as
  bytes, decoded by the committer;
- ``verify``: verify-before-persist (each sink is handed the committables acknowledgement decoded);
- ``build``: the checkpoint metadata from the coordinator's state;
- ``publish``: ``storage.publish`` (encode, write; local: temp file, fsync, link; s3: conditional PUT);
- ``commit``: ``notify_checkpoint_complete`` (commit requests to the committer, synchronous);
- ``lingering``: lingering cleanup after the epoch (what is held, per sink; the sinks here do not
  read ``scope.held``, as the Delta and Iceberg sinks put most routine cleanups off);
- ``retention``: ``apply_retention`` (retention as configured: 1 checkpoint, the default);
- ``input``: reading the epoch's acknowledgement table into memory (what Spark's collection
  allocates for it), before the epoch's clock starts: not in ``epoch``;
- ``epoch``: the whole epoch, trigger to retention, less the meter's own garbage collections
  (the goal: < 1 s at 10⁵ × 3); its ``cpu_ms`` counts every thread (the committer's, when it
  commits meanwhile), ``epoch driver thread`` the driver thread's alone (``time.thread_time``):
  the critical path issue #42 bounds;
- ``restore``: a new runtime's ``restore()`` of the newest checkpoint (list, load, decode,
  re-commit, lingering cleanup); ``load`` is each read and parse of a ``_metadata`` inside it
  (once per retained checkpoint; twice for the newest before issue #29 item 3's "restore once").

A run's first epoch is reported apart (``first <step>``): it meets every subtask for the first
time; the other rows are the ``rounds`` steady epochs after it. Each step's ``peak_mb`` is how far
the RSS rose above its value at the step's start (the kernel's high-water mark, reset before each
step), and ``rss_mb`` the RSS after it; ``driver memory`` is the driver's after the epochs and
their commits (resident, anonymous and file-backed, pyarrow's pool) with ``hwm_mb`` its peak over
them, ``driver memory at start`` the same after the restore that opened the run, and
``driver memory released`` after the epochs once the allocators returned what they keep freed.
Storage: a local directory (``$TWOPHASE_BENCH_DIR`` or the temp dir) and MinIO (``s3_service()``);
``TWOPHASE_BENCH_BACKENDS=local`` (or ``s3``) runs one of them. Also 100 epochs at 10³ × 3 with
the default retention: what is stored at the end, and the metadata bytes of the 1st and the 100th
checkpoint (``TWOPHASE_BENCH_NO_HISTORY=1`` skips it). Each size's rows go to stderr as it ends.

Before the coordinator's steps, Spark's own part of the real path (issue #42,
:func:`bench_collection`): a ``local[2]`` job of ``n`` tasks whose ``mapInArrow`` yields each
task's 3 acknowledgement rows, collected as Arrow ``direct`` (one batch per task) or ``gathered``
into one partition first, then taken in by a real runtime's intake, side by side in one run
(``TWOPHASE_BENCH_NO_COLLECT=1`` skips it; sizes up to 10⁴ unless ``TWOPHASE_BENCH_COLLECT_SIZES``
says otherwise). An epoch's real path is that plus ``epoch`` less
``acknowledge``.

``python -m benchmarks.bench_coordinator_scale`` prints it (``TWOPHASE_BENCH_RUNS`` overrides the
rounds; ``TWOPHASE_BENCH_SIZES=100,1000`` the sizes).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from twophase.connectors.delta.internal.committable import CODEC as DELTA_CODEC
from twophase.connectors.delta.internal.committable import DeltaAddFile, DeltaCommittable
from twophase.connectors.kafka.internal.committable import CODEC as KAFKA_CODEC
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.connectors.s3.internal.committable import COMMITTABLE_CODEC as S3_CODEC
from twophase.connectors.s3.internal.committable import PendingFile, S3Committable, UploadedPart
from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.run.runtime_config import DEFAULT_GATHER_ABOVE, RuntimeConfig
from twophase.coordinator.state import ack_table
from twophase.coordinator.state.acknowledgement import ACK_SCHEMA, RELEASE, Acknowledgement
from twophase.coordinator.state.collector import paused as collector_paused
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome

SIZES = (100, 1_000, 10_000, 100_000)
ROUNDS = {100: 5, 1_000: 5, 10_000: 3, 100_000: 3}
HISTORY_EPOCHS = 100
HISTORY_SIZE = 1_000
JOB_ID = "bench-scale"
T = TypeVar("T")

SCHEMA_JSON = (
    '{"type":"struct","fields":['
    '{"name":"flight_id","type":"string","nullable":false,"metadata":{}},'
    '{"name":"carrier","type":"string","nullable":true,"metadata":{}},'
    '{"name":"dep_delay","type":"double","nullable":true,"metadata":{}},'
    '{"name":"arr_delay","type":"double","nullable":true,"metadata":{}},'
    '{"name":"origin","type":"string","nullable":true,"metadata":{}},'
    '{"name":"dest","type":"string","nullable":true,"metadata":{}},'
    '{"name":"day","type":"date","nullable":true,"metadata":{}}]}'
)


def kafka_committable(p: int, cid: int) -> KafkaCommittable:
    """Subtask ``p``'s pre-committed Kafka transaction of checkpoint ``cid``."""
    return KafkaCommittable(
        transactional_id=f"twophase-{JOB_ID}-kafka-{p}-{cid % 4}",
        producer_id=1_000_000 + p,
        producer_epoch=3 + cid,
        topic_partitions=(("flights.enriched", p % 48),),
        record_count=4_096 + p % 97,
        checkpoint_id=cid,
    )


def s3_committable(p: int, cid: int) -> S3Committable:
    """Subtask ``p``'s rolled Parquet file (two parts) of checkpoint ``cid``."""
    parts = (
        UploadedPart(1, f'"{p:016x}{cid:016x}"', 8 * 1024 * 1024),
        UploadedPart(2, f'"{cid:016x}{p:016x}"', 1_234_567),
    )
    return S3Committable(
        (
            PendingFile(
                bucket="lake",
                key=f"flights/day=2013-01-01/part-{p:05d}-{cid}-a1b2c3d4-{p:08x}-0000-4000-8000-{cid:012x}.parquet",
                upload_id=f"{p:08x}-{cid:08x}-" + "9f" * 24,
                parts=parts,
                byte_count=sum(x.size for x in parts),
                record_count=40_960 + p % 97,
            ),
        )
    )


def delta_committable(p: int, cid: int) -> DeltaCommittable:
    """Subtask ``p``'s Add action (one file, with stats) of checkpoint ``cid``."""
    stats = (
        f'{{"numRecords":{40_960 + p % 97},"minValues":{{"flight_id":"{p}-0","dep_delay":-43.0}},'
        f'"maxValues":{{"flight_id":"{p}-9","dep_delay":1301.0}},"nullCount":{{"dep_delay":{p % 13}}}}}'
    )
    add = DeltaAddFile(
        path=f"day=2013-01-01/part-{p:05d}-{cid}-c0ffee00-{p:08x}.snappy.parquet",
        size=3_456_789 + p,
        partition_values=(("day", "2013-01-01"),),
        modification_time=1_700_000_000_000 + cid,
        stats=stats,
        num_records=40_960 + p % 97,
    )
    return DeltaCommittable(
        table_uri="s3://lake/tables/flights",
        app_id=f"{JOB_ID}:delta",
        checkpoint_id=cid,
        partition=p,
        attempt=0,
        num_partitions=0,
        schema_json=SCHEMA_JSON,
        partition_columns=("day",),
        adds=(add,),
    )


class ScaleSink(TwoPhaseCommitSink[None, Any]):
    """A connector's codec over a no-op service: the driver side only (executors are simulated).

    Commit answers COMMITTED, verification passes, lingering cleanup finds nothing.
    """

    def __init__(self, name: str, codec: CommittableCodec[Any], make: Callable[[int, int], Any]) -> None:
        self.name = name
        self.codec = codec
        self.make = make

    def begin_transaction(self, ctx: WriterContext) -> None:
        raise NotImplementedError("executors are simulated")

    def write(self, txn: None, batch: Any) -> None:
        raise NotImplementedError("executors are simulated")

    def pre_commit(self, txn: None) -> Any:
        raise NotImplementedError("executors are simulated")

    def commit(self, committable: Any) -> CommitOutcome:
        return CommitOutcome.COMMITTED

    def abort(self, committable: Any) -> None:
        return None

    def abort_lingering(self, scope: LingeringScope[Any]) -> int:
        return 0


def make_sinks() -> list[ScaleSink]:
    """The job's three sinks: Kafka, S3 (Parquet) and Delta codecs."""
    return [
        ScaleSink("kafka", KAFKA_CODEC, kafka_committable),
        ScaleSink("s3", S3_CODEC, s3_committable),
        ScaleSink("delta", DELTA_CODEC, delta_committable),
    ]


ARROW_BATCH_ROWS = 10_000
"""``spark.sql.execution.arrow.maxRecordsPerBatch`` (Spark's default): rows per Arrow batch of a
gathered collection."""


class Executors:
    """Simulated executors: the acknowledgements of every subtask of an epoch, as the executor loop
    makes them (the sink's codec encodes each committable once) and Spark hands them to the driver:
    one Arrow batch per task, in one table (``DataFrame.toArrow``). One template per subtask is
    encoded up front; an epoch's payloads are fresh objects carrying its checkpoint id."""

    def __init__(self, sinks: Sequence[ScaleSink], n: int) -> None:
        self.sinks = sinks
        self.templates = {s.name: [s.encode(s.make(p, 1)) for p in range(n)] for s in sinks}

    def acks(self, cid: int) -> list[Acknowledgement]:
        """Every subtask's acknowledgement of checkpoint ``cid`` (partition-major, as tasks finish)."""
        out: list[Acknowledgement] = []
        n = len(next(iter(self.templates.values())))
        for p in range(n):
            for s in self.sinks:
                t = self.templates[s.name][p]
                body = dict(t["body"])
                if "checkpoint_id" in body:
                    body["checkpoint_id"] = cid
                payload = payload_bytes({"kind": t["kind"], "version": t["version"], "body": body})
                out.append(Acknowledgement(s.name, p, 0, payload, None, 40_960, 1.0, t["kind"], t["version"]))
        return out

    def table(self, cid: int, gather_above: int | None = DEFAULT_GATHER_ABOVE) -> pa.Table:
        """:meth:`acks` as Spark's Arrow collection hands them to the runtime: one batch per task
        (partition) up to ``gather_above`` tasks; above it gathered into one partition first
        (:func:`~twophase.coordinator.spark.tasks.acknowledgements_of`), so in batches of
        :data:`ARROW_BATCH_ROWS` rows, sorted by (sink, partition) as the gather's task sorts them."""
        acks = self.acks(cid)
        gathered = gather_above is not None and len(acks) // len(self.sinks) > gather_above
        if gathered:
            acks = sorted(acks, key=lambda a: (a.sink, a.partition))
        width = ARROW_BATCH_ROWS if gathered else len(self.sinks)
        return pa.Table.from_batches(
            [
                pa.RecordBatch.from_pylist([a.to_row() for a in acks[i : i + width]], schema=ACK_SCHEMA)
                for i in range(0, len(acks), width)
            ],
            schema=ACK_SCHEMA,
        )


def ack_file(directory: Path, cid: int) -> Path:
    """Where :func:`write_ack_files` puts checkpoint ``cid``'s acknowledgement table."""
    return directory / f"acks-{cid}.arrow"


def write_ack_files(n: int, directory: Path, cids: Sequence[int]) -> None:
    """The simulated executors' side of an epoch, run in a child process (``python
    bench_coordinator_scale.py acks <n> <dir> <cid>...``): each checkpoint's acknowledgement table
    (:meth:`Executors.table`, its batches as Spark hands them) written as an Arrow IPC file, so
    that what the executors build (a template per subtask, an acknowledgement object per row) is
    never in the measured driver's memory (issue #42: it was 1.6 GB of a 2.6 GB RSS)."""
    executors = Executors(make_sinks(), n)
    for cid in cids:
        table = executors.table(cid)
        with pa.OSFile(str(ack_file(directory, cid)), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)  # batch by batch, as built: the chunks the runtime receives


def ack_tables_from_child(n: int, directory: Path, cids: Sequence[int]) -> None:
    """:func:`write_ack_files` in a child process (this interpreter, this file, the same
    ``PYTHONPATH``: the side's own ``twophase``)."""
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "acks", str(n), str(directory), *map(str, cids)],
        check=True,
    )


def read_ack_file(path: Path) -> pa.Table:
    """The table of one epoch's acknowledgements, read into the driver's memory (not mapped: as
    Spark's collection hands the driver its table), the file removed."""
    with pa.OSFile(str(path)) as f:
        table = pa.ipc.open_file(f).read_all()
    path.unlink()
    return table


# -- measuring ------------------------------------------------------------------------------------


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def rss_mb() -> float:
    """The process's resident set size now, MB."""
    return _status_kb("VmRSS") / 1024


def memory_row() -> dict[str, Any]:
    """The driver process's memory now, MB: resident (``rss_mb``: anonymous and file-backed),
    its high-water mark since the last reset (``hwm_mb``), and what of it pyarrow's pool holds
    (``arrow_mb``: ``total_allocated_bytes``, the ledger's and tables' columns)."""
    return {
        "rss_mb": round(rss_mb(), 1),
        "hwm_mb": round(_status_kb("VmHWM") / 1024, 1),
        "rss_anon_mb": round(_status_kb("RssAnon") / 1024, 1),
        "rss_file_mb": round(_status_kb("RssFile") / 1024, 1),
        "arrow_mb": round(pa.total_allocated_bytes() / 2**20, 1),
        "arrow_pool": pa.default_memory_pool().backend_name,
    }


def tracemalloc_top(limit: int) -> list[str]:
    """The ``limit`` source lines holding the most Python memory now (tracemalloc running),
    with their MB and block counts: where the interpreter's part of the RSS is."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    total = sum(st.size for st in stats)
    out = [f"python total {total / 2**20:.1f} MB in {sum(st.count for st in stats):,} blocks"]
    for st in stats[:limit]:
        frame = st.traceback[0]
        where = f"{Path(frame.filename).parent.name}/{Path(frame.filename).name}:{frame.lineno}"
        out.append(f"{st.size / 2**20:8.1f} MB {st.count:>9,} blocks  {where}")
    return out


@dataclass
class Samples:
    """Per step: times (ms), CPU time of the process (ms), RSS rises (MB), RSS after (MB)."""

    ms: dict[str, list[float]] = field(default_factory=dict)
    cpu_ms: dict[str, list[float]] = field(default_factory=dict)
    peak: dict[str, list[float]] = field(default_factory=dict)
    rss: dict[str, list[float]] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)

    def add(self, step: str, ms: float, peak_mb: float, rss: float, cpu_ms: float = float("nan")) -> None:
        """Record one sample of ``step``."""
        self.ms.setdefault(step, []).append(ms)
        self.cpu_ms.setdefault(step, []).append(cpu_ms)
        self.peak.setdefault(step, []).append(peak_mb)
        self.rss.setdefault(step, []).append(rss)

    def set_aside(self, prefix: str) -> None:
        """Every step sampled so far becomes ``prefix + step`` (the first epoch, apart from the
        steady ones that follow)."""
        for kind in (self.ms, self.cpu_ms, self.peak, self.rss):
            for step in [k for k in kind if not k.startswith(prefix)]:
                kind.setdefault(prefix + step, []).extend(kind.pop(step))


class Meter:
    """Times steps (ms) and the RSS rise during each (MB) into :class:`Samples`; nested steps
    (inside an outer measured call) are timed but their memory is the outer step's."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples
        self.depth = 0
        self.overhead_s = 0.0
        """Time spent by the meter itself (collecting garbage before each step), s."""
        self.overhead_cpu_s = 0.0
        """CPU time spent by the meter itself, s (under load it is far below the wall time)."""
        self.hwm_mb = 0.0
        """The highest resident set size seen at the end of any step, MB (the kernel's high-water
        mark, reset before each step: the run's peak over its measured steps)."""

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Measure the block as ``name``."""
        outer = self.depth == 0
        if outer:
            # the meter's own CPU is its thread's: the committer thread may run meanwhile
            own, own_cpu = time.perf_counter(), time.thread_time()
            gc.collect()
            _reset_peak()
            self.overhead_s += time.perf_counter() - own
            self.overhead_cpu_s += time.thread_time() - own_cpu
        before = rss_mb()
        self.depth += 1
        start, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            ms = (time.perf_counter() - start) * 1000.0
            cpu_ms = (time.process_time() - cpu) * 1000.0
            self.depth -= 1
            hwm = _status_kb("VmHWM") / 1024
            self.hwm_mb = max(self.hwm_mb, hwm)
            peak = hwm - before if outer else float("nan")
            self.samples.add(name, ms, peak, rss_mb(), cpu_ms)

    def wrap(self, name: str, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` measured as ``name`` at every call."""

        def measured(*args: Any, **kwargs: Any) -> T:
            with self.step(name):
                return fn(*args, **kwargs)

        return measured


class MeteredStorage:
    """A checkpoint storage whose publish, load and retention are measured; the bytes of each
    published ``_metadata`` are taken from the storage afterwards (no second encoding)."""

    def __init__(self, inner: CheckpointStorage, meter: Meter, size_of: Callable[[str], int]) -> None:
        self.inner = inner
        self.job_id = inner.job_id
        self.meter = meter
        self.size_of = size_of
        self.published_bytes: list[int] = []

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """Measured ``publish``."""
        with self.meter.step("publish"):
            ref = self.inner.publish(metadata)
        self.published_bytes.append(self.size_of(ref.location))
        return ref

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """Measured ``load``."""
        with self.meter.step("load"):
            return self.inner.load(ref)

    def latest(self) -> CheckpointMetadata | None:
        """``latest`` by listing, through the measured ``load``."""
        refs = self.inner.list_checkpoints()
        return self.load(refs[-1]) if refs else None

    def apply_retention(self, keep: int) -> list[CheckpointRef]:
        """Measured ``apply_retention``."""
        with self.meter.step("retention"):
            return self.inner.apply_retention(keep)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- one size on one storage ----------------------------------------------------------------------

STEPS = ("trigger", "acknowledge", "verify", "build", "publish", "commit", "lingering", "retention")


def instrument(rt: JobRuntime, meter: Meter) -> None:
    """Measure the runtime's steps (instance attributes over the bound methods)."""
    run = rt.run
    assert run is not None, "instrument after restore()"
    completion, sweep = run.completion, run.sweep
    completion.verify_acknowledged = meter.wrap(  # type: ignore[method-assign]
        "verify", completion.verify_acknowledged
    )
    sweep.abort_live = meter.wrap("lingering", sweep.abort_live)  # type: ignore[method-assign]
    coord = rt.coordinator
    coord.build_metadata = meter.wrap("build", coord.build_metadata)  # type: ignore[method-assign]
    coord.notify_checkpoint_complete = meter.wrap(  # type: ignore[method-assign]
        "commit", coord.notify_checkpoint_complete
    )


FIRST = "first "
"""The prefix of the first epoch's steps: a run's first epoch is reported apart from the steady
epochs after it (it meets every subtask for the first time; issue #42)."""


def bench_size(
    n: int, rounds: int, make_storage: Callable[[], CheckpointStorage], size_of: Callable[[str], int]
) -> dict[str, dict[str, Any]]:
    """A run's first epoch, then ``rounds`` steady epochs, then ``rounds`` restores at ``n``
    subtasks × 3 sinks on fresh storage. Each epoch's acknowledgement table is built by the
    simulated executors in a child process (:func:`write_ack_files`) and read from its Arrow IPC
    file before the epoch's clock starts, so the driver's memory holds what a real driver's
    does: the table Spark's collection hands it, and its own state.

    ``TWOPHASE_BENCH_TRACEMALLOC=<k>`` traces Python's allocations over the epochs and prints the
    ``k`` source lines holding the most after them (to stderr; its times are not the run's).

    Returns:
        step → ``{"median_ms", "min_ms", "max_ms", "n", "cpu_ms", "peak_mb", "rss_mb", "bytes"}`` (bytes: the
        published checkpoint's ``_metadata`` for ``publish`` and ``load``); the first epoch's
        steps as ``"first <step>"``; ``"driver memory"``: :func:`memory_row` after the epochs
        and their commits (``hwm_mb`` the peak over them), ``"driver memory at start"`` after the
        restore that opened the run; ``"driver memory pool released"``: the same once pyarrow's
        pool returned the freed memory it keeps (``release_unused``), and ``"driver memory
        released"`` once the C allocator did too (``malloc_trim``): what the driver's state holds.
    """
    sinks = make_sinks()
    samples = Samples()
    meter = Meter(samples)
    storage = MeteredStorage(make_storage(), meter, size_of)
    config = RuntimeConfig(abort_lingering_each_epoch=True)
    trace = int(os.environ.get("TWOPHASE_BENCH_TRACEMALLOC", "0"))
    rt = JobRuntime(JOB_ID, sinks, storage, config)
    rt.restore()
    instrument(rt, meter)
    out: dict[str, dict[str, Any]] = {}
    first_cid = rt.coordinator.next_checkpoint_id
    with tempfile.TemporaryDirectory(
        prefix="twophase-acks-", dir=os.environ.get("TWOPHASE_BENCH_DIR")
    ) as tmp:
        ack_tables_from_child(n, Path(tmp), range(first_cid, first_cid + rounds + 1))
        gc.collect()
        _reset_peak()
        out["driver memory at start"] = memory_row()
        if trace:
            tracemalloc.start()
        for r in range(rounds + 1):
            # what Spark's collection allocates for the table, timed apart (not in the epoch): the
            # pages the driver returned after the last publish fault in again here
            with meter.step("input"):
                acks = read_ack_file(ack_file(Path(tmp), rt.coordinator.next_checkpoint_id))
            position = {"engine": "spark", "query_id": "6a1f0c9e-5d2b-4f7a-9e61-0b3c2d1e4f50", "batch_id": r}
            started, cpu_started, thread_started = (
                time.perf_counter(),
                time.process_time(),
                time.thread_time(),
            )
            overhead, overhead_cpu = meter.overhead_s, meter.overhead_cpu_s
            with meter.step("trigger"):
                epoch = rt.begin_epoch(n, position)
            with meter.step("acknowledge"):
                epoch.acknowledge_table(acks)
            rt.complete_epoch(epoch)  # verify, build, publish, commit, lingering, retention: measured inside
            # the meter's own gc left out: its wall time from the wall, its CPU time from the CPU
            wall_s = time.perf_counter() - started - (meter.overhead_s - overhead)
            cpu_s = time.process_time() - cpu_started - (meter.overhead_cpu_s - overhead_cpu)
            driver_s = time.thread_time() - thread_started - (meter.overhead_cpu_s - overhead_cpu)
            with meter.step("drain"):  # what the committer thread still had to do (asynchronous commit)
                rt.await_commits()
            all_cpu_s = time.process_time() - cpu_started - (meter.overhead_cpu_s - overhead_cpu)
            samples.add("epoch+drain", float("nan"), float("nan"), rss_mb(), all_cpu_s * 1000.0)
            samples.add("epoch", wall_s * 1000.0, float("nan"), rss_mb(), cpu_s * 1000.0)
            samples.add("epoch driver thread", float("nan"), float("nan"), rss_mb(), driver_s * 1000.0)
            del acks, epoch
            if r == 0:
                samples.set_aside(FIRST)
        gc.collect()
        # what the driver keeps after the epochs; its peak over them (the meter resets the
        # high-water mark before each step and reads it after)
        memory = memory_row()
        memory["hwm_mb"] = round(max(meter.hwm_mb, memory["hwm_mb"]), 1)
        out["driver memory"] = memory
        # what of it is live: the freed memory pyarrow's pool and the C allocator keep, returned
        # (after the measurements above: the next epoch would fault it in again)
        pa.default_memory_pool().release_unused()
        out["driver memory pool released"] = memory_row()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        out["driver memory released"] = memory_row()
        if trace:
            for line in tracemalloc_top(trace):
                print(f"tracemalloc {n:,}: {line}", file=sys.stderr, flush=True)
            tracemalloc.stop()
    rt.close()
    del rt
    for _ in range(rounds):
        restored = JobRuntime(JOB_ID, sinks, storage, config)
        with meter.step("restore"):
            result = restored.restore()
        if result.recommitted != 0 and result.recommitted != 3 * n:
            raise AssertionError(f"restore re-committed {result.recommitted}, not 0 or {3 * n}")
        restored.close()
        del restored
    steady = (*STEPS, "epoch", "epoch driver thread", "drain", "epoch+drain", "input", "load", "restore")
    for step in (*steady, *(FIRST + s for s in (*STEPS, "epoch", "epoch driver thread", "drain"))):
        ms = samples.ms.get(step)
        if not ms:
            continue
        peaks = [p for p in samples.peak[step] if p == p]  # NaN for nested steps
        cpus = [c for c in samples.cpu_ms[step] if c == c]
        walls = [m for m in ms if m == m] or [0.0]
        row: dict[str, Any] = {
            "median_ms": round(statistics.median(walls), 2),
            "min_ms": round(min(walls), 2),
            "max_ms": round(max(walls), 2),
            "n": len(ms),
            "cpu_ms": round(statistics.median(cpus), 2) if cpus else "",
            "peak_mb": round(statistics.median(peaks), 1) if peaks else "",
            "rss_mb": round(max(samples.rss[step]), 1),
        }
        if step in ("publish", "load"):
            row["bytes"] = storage.published_bytes[-1]
        out[step] = row
    return out


def history(
    make_storage: Callable[[], CheckpointStorage], stored_bytes: Callable[[], tuple[int, int]], n: int
) -> dict[str, Any]:
    """``HISTORY_EPOCHS`` epochs at ``n`` × 3 with the default retention: the metadata bytes of
    the first and last checkpoint, and (objects, bytes) stored at the end."""
    sinks = make_sinks()
    executors = Executors(sinks, n)
    meter = Meter(Samples())
    storage = MeteredStorage(make_storage(), meter, lambda loc: 0)
    sizes: list[int] = []
    rt = JobRuntime(JOB_ID, sinks, storage, RuntimeConfig())
    rt.restore()
    for _ in range(HISTORY_EPOCHS):
        epoch = rt.begin_epoch(n)
        epoch.acknowledge_table(executors.table(epoch.checkpoint_id))
        rt.complete_epoch(epoch)
        latest = rt.latest_checkpoint
        sizes.append(len(latest.dumps()) if latest is not None else 0)  # untimed
    rt.close()
    objects, total = stored_bytes()
    return {
        "epochs": HISTORY_EPOCHS,
        "subtasks": f"{n:,} x 3",
        "retained_checkpoints": CheckpointConfig().retained_checkpoints,
        "first_checkpoint_bytes": sizes[0],
        "last_checkpoint_bytes": sizes[-1],
        "stored_objects": objects,
        "stored_bytes": total,
    }


# -- Spark's collection ---------------------------------------------------------------------------

COLLECT_ROUNDS = {100: 5, 1_000: 3, 10_000: 1}
"""Rounds of :func:`bench_collection` per size (each round runs the size's tasks once per plan)."""

COLLECT_PLANS = ("direct", "gathered", "gathered unsorted")
"""The collected plans of :func:`bench_collection`: the write's tasks' rows collected as they
are (one Arrow batch per task); gathered into one partition by a shuffle first and sorted there
by (sink, partition) (:func:`~twophase.coordinator.spark.tasks.acknowledgements_of`, issue #42);
and gathered without the sort (the previous release's gather: the driver sorts and copies the
payloads), which prices the gather task's sort against the driver's saving."""


def _in_key_order(table: pa.Table) -> bool:
    return ack_table.in_key_order(table.select(ack_table.KEY))


def _first_rows(table: pa.Table) -> object:
    return ack_table.first_rows(table.select(ack_table.KEY))


def _check_release(table: pa.Table) -> None:
    ack_table.check_release(table["release"])


TABLE_STEPS: tuple[tuple[str, Callable[[pa.Table], object]], ...] = (
    ("check_release", _check_release),
    ("first_rows", _first_rows),
    ("in_key_order", _in_key_order),
)
"""The intake's checks :func:`bench_collection` times alone on each collected (normalized) table,
each handed the columns the intake hands it."""


def ack_rows_task(payloads: dict[str, bytes], schema: pa.Schema) -> Callable[..., Any]:
    """``mapInArrow`` function: the task of partition ``p`` reads its input and yields one batch of
    ``schema`` with ``p``'s acknowledgement row for every sink (each sink's payload of the size its
    codec encodes): what an epoch's task hands Spark
    (:func:`~twophase.coordinator.spark.tasks.epoch_task`)."""

    headers = {sink: json.loads(payload) for sink, payload in payloads.items()}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        for _ in batches:
            pass
        tc = TaskContext.get()
        p = tc.partitionId() if tc is not None else 0
        rows = [
            {
                "sink": sink,
                "partition": p,
                "attempt": 0,
                "committable": payload,
                "in_progress": None,
                "records": 40_960,
                "write_ms": 1.0,
                "release": RELEASE,
                "kind": headers[sink]["kind"],  # the codec header beside the payload (issue #42)
                "version": headers[sink]["version"],
            }
            for sink, payload in payloads.items()
        ]
        yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return run


def _jvm_cpu_s(spark: Any) -> float:
    """CPU seconds (user and system) of the Spark driver's JVM so far (``local[2]``: the executors
    run in it too); NaN when its process id is not known (a cluster, Spark Connect)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (AttributeError, OSError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_collection(n: int, rounds: int) -> dict[str, dict[str, Any]]:
    """An epoch's write and its acknowledgements' way into the coordinator with Spark at ``n``
    tasks: a ``local[2]`` job of ``n`` partitions whose ``mapInArrow`` yields each partition's
    acknowledgement for the 3 sinks, collected as Arrow either ``direct`` (one batch per task) or
    ``gathered`` into one partition first (:func:`~twophase.coordinator.spark.tasks.acknowledgements_of`),
    then handed to the real intake (``Epoch.acknowledge_table`` of a :class:`JobRuntime`: normalize,
    every Arrow check, the ledger). Side by side in one session, alternating which goes first. The
    job is not cached: its tasks, the gather's shuffle and the collection are all in it.

    Returns:
        ``"<plan> job"`` (wall ms of the Spark job and the intake; ``cpu_ms`` the Python driver
        process's), ``"<plan> jvm"`` (the driver JVM's CPU over it, executors included in
        ``local[2]``), ``"<plan> driver thread"`` (the Python driver thread's CPU over collection
        and intake, ``time.thread_time``), ``"<plan> collect thread"`` / ``"<plan> intake thread"``
        (its two parts), ``"<plan> epoch driver thread"`` (the same over the whole epoch, trigger
        to retention: the critical path issue #42 bounds, Spark's collection in it),
        ``"<plan> normalized"``, ``"<plan> check_release"``, ``"<plan> first_rows"``,
        ``"<plan> in_key_order"`` (thread CPU of each on the collected
        table, called again after the intake: :data:`TABLE_STEPS`), ``"<plan> chunks"`` (the
        collected table's chunks per column, in ``median_ms``'s place) → the same row shape as
        :func:`bench_size`.
    """
    from benchmarks.common import side_by_side, spark_session
    from twophase.coordinator.spark.compat import collect_arrow
    from twophase.coordinator.spark.tasks import ack_struct_type, acknowledgements_of
    from twophase.coordinator.storage.local import LocalCheckpointStorage

    spark = spark_session("bench-coordinator-collect")
    sinks = make_sinks()
    payloads = {s.name: payload_bytes(s.encode(s.make(n - 1, 1))) for s in sinks}

    def written(tasks: int) -> Any:
        # a new DataFrame each time: collecting one gathered DataFrame again would reuse its
        # shuffle's map outputs and skip the write
        return spark.range(0, tasks, 1, tasks).mapInArrow(
            ack_rows_task(payloads, ACK_SCHEMA), ack_struct_type()
        )

    for gather in (None, 0):  # warm-up (the JVM's first jobs of each plan), not counted
        collect_arrow(acknowledgements_of(written(min(n, 100)), min(n, 100), gather))
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    with tempfile.TemporaryDirectory(
        prefix="twophase-collect-", dir=os.environ.get("TWOPHASE_BENCH_DIR")
    ) as tmp:
        config = RuntimeConfig(abort_lingering_each_epoch=True)  # as bench_size's epochs
        rt = JobRuntime(JOB_ID, sinks, LocalCheckpointStorage(Path(tmp), JOB_ID), config)
        rt.restore()
        # one epoch from an in-process table first, untimed: the timed epochs are steady ones,
        # whose subtasks the runtime has met (a run's first epoch is bench_size's "first" rows)
        warm = rt.begin_epoch(n, {"engine": "spark", "query_id": "bench", "batch_id": -1})
        warm.acknowledge_table(Executors(sinks, n).table(rt.coordinator.next_checkpoint_id))
        rt.complete_epoch(warm)
        rt.await_commits()
        del warm
        gc.collect()

        def plan(name: str) -> Callable[[int], int]:
            # the gather at threshold 0 (always) against never: only the plan differs
            def one(r: int) -> int:
                if name == "gathered unsorted":
                    df = written(n).repartition(1)
                else:
                    df = acknowledgements_of(written(n), n, 0 if name == "gathered" else None)
                position = {"engine": "spark", "query_id": "bench", "batch_id": r}
                triggered = time.thread_time()
                epoch = rt.begin_epoch(n, position)
                jvm, proc, thread = _jvm_cpu_s(spark), time.process_time(), time.thread_time()
                trigger_s = thread - triggered
                started = time.perf_counter()
                table = collect_arrow(df)
                collected = time.thread_time()
                epoch.acknowledge_table(table)
                wall, done = time.perf_counter() - started, time.thread_time()
                add(f"{name} job", wall * 1000.0)
                add(f"{name} job cpu", (time.process_time() - proc) * 1000.0)
                add(f"{name} jvm", (_jvm_cpu_s(spark) - jvm) * 1000.0)
                add(f"{name} driver thread", (done - thread) * 1000.0)
                add(f"{name} collect thread", (collected - thread) * 1000.0)
                add(f"{name} intake thread", (done - collected) * 1000.0)
                add(f"{name} chunks", float(max(c.num_chunks for c in table.columns)))
                rt.complete_epoch(epoch)
                # the epoch's whole critical path on the driver thread: trigger, collection,
                # intake, and verify to retention (bench_size's "epoch driver thread" with
                # Spark's collection in place of reading a prepared table)
                add(f"{name} epoch driver thread", (time.thread_time() - thread + trigger_s) * 1000.0)
                rt.await_commits()
                before = time.thread_time()
                rest = [c for c in table.column_names if c != ack_table.PAYLOAD]  # as the intake
                joined = ack_table.normalized(table.select(rest), table.schema)
                add(f"{name} normalized", (time.thread_time() - before) * 1000.0)
                for step, fn in TABLE_STEPS:
                    before = time.thread_time()
                    fn(joined)
                    add(f"{name} {step}", (time.thread_time() - before) * 1000.0)
                return table.num_rows

            return one

        def check(name: str, _: int, rows: object) -> None:
            if rows != 3 * n:
                raise AssertionError(f"{name} collected {rows} rows, not {3 * n}")

        with collector_paused():
            times = side_by_side({name: plan(name) for name in _collect_plans()}, rounds, check)
        rt.close()
    out: dict[str, dict[str, Any]] = {}
    for key, values in samples.items():
        if key.endswith(" job cpu"):
            continue
        row: dict[str, Any] = {
            "median_ms": round(statistics.median(values), 2),
            "min_ms": round(min(values), 2),
            "max_ms": round(max(values), 2),
            "n": len(values),
            "cpu_ms": round(statistics.median(samples[key + " cpu"]), 2) if key.endswith(" job") else "",
            "peak_mb": "",
            "rss_mb": round(rss_mb(), 1),
        }
        out[key] = row
    if not times:  # pragma: no cover - side_by_side times every plan
        raise AssertionError("nothing timed")
    return out


# -- backends -------------------------------------------------------------------------------------


def _dir_usage(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


@contextlib.contextmanager
def backends() -> Iterator[dict[str, tuple[Callable[[], CheckpointStorage], Callable[[str], int], Any]]]:
    """name → (fresh storage factory, size of a published location, (objects, bytes) stored)."""
    from twophase.coordinator.storage.local import LocalCheckpointStorage

    counter = iter(range(1_000_000))
    with tempfile.TemporaryDirectory(
        prefix="twophase-scale-", dir=os.environ.get("TWOPHASE_BENCH_DIR")
    ) as tmp:
        current: dict[str, Any] = {}

        def local_storage() -> CheckpointStorage:
            current["local"] = Path(tmp) / f"run-{next(counter)}"
            return LocalCheckpointStorage(current["local"], JOB_ID)

        out: dict[str, tuple[Callable[[], CheckpointStorage], Callable[[str], int], Any]] = {
            "local": (local_storage, lambda loc: os.path.getsize(loc), lambda: _dir_usage(current["local"]))
        }
        wanted = os.environ.get("TWOPHASE_BENCH_BACKENDS", "local,s3").split(",")
        if "local" not in wanted:
            del out["local"]
        if "s3" not in wanted:
            yield out
            return
        from twophase.coordinator.storage.s3 import S3CheckpointStorage
        from twophase.integration.services import s3_service

        with s3_service() as endpoint:
            client = endpoint.boto3_client()
            bucket = f"bench-scale-{os.getpid()}"
            client.create_bucket(Bucket=bucket)

            def s3_storage() -> CheckpointStorage:
                current["s3"] = f"run-{next(counter)}"
                return S3CheckpointStorage(bucket, current["s3"], JOB_ID, client)

            def s3_size(location: str) -> int:
                key = location.removeprefix(f"s3://{bucket}/")
                return int(client.head_object(Bucket=bucket, Key=key)["ContentLength"])

            def s3_usage() -> tuple[int, int]:
                objs = [
                    o
                    for page in client.get_paginator("list_objects_v2").paginate(
                        Bucket=bucket, Prefix=current["s3"] + "/"
                    )
                    for o in page.get("Contents", ())
                ]
                return len(objs), sum(int(o.get("Size", 0)) for o in objs)

            out["s3"] = (s3_storage, s3_size, s3_usage)
            yield out


def _sizes() -> tuple[int, ...]:
    text = os.environ.get("TWOPHASE_BENCH_SIZES")
    return tuple(int(x) for x in text.split(",")) if text else SIZES


def _collect_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """The sizes of :func:`bench_collection`: ``TWOPHASE_BENCH_COLLECT_SIZES``, else ``sizes`` up to
    10⁴ (one round of 10⁴ real tasks per plan took ~22 min on 2 loaded cores; 10⁵ would take hours)."""
    text = os.environ.get("TWOPHASE_BENCH_COLLECT_SIZES")
    return tuple(int(x) for x in text.split(",")) if text else tuple(n for n in sizes if n <= 10_000)


def _collect_plans() -> tuple[str, ...]:
    """The plans of :func:`bench_collection`: ``TWOPHASE_BENCH_COLLECT_PLANS`` (comma-separated,
    from :data:`COLLECT_PLANS`), else all of them (one plan of 10⁵ real tasks takes ~45 min on this
    machine's 2 quiet cores)."""
    text = os.environ.get("TWOPHASE_BENCH_COLLECT_PLANS")
    plans = tuple(text.split(",")) if text else COLLECT_PLANS
    unknown = [p for p in plans if p not in COLLECT_PLANS]
    if unknown:
        raise ValueError(f"TWOPHASE_BENCH_COLLECT_PLANS names {unknown}; choose from {list(COLLECT_PLANS)}")
    return plans


def _collect_rounds(n: int) -> int:
    forced = os.environ.get("TWOPHASE_BENCH_RUNS")
    return int(forced) if forced else COLLECT_ROUNDS.get(n, 1)


def _rounds(n: int) -> int:
    forced = os.environ.get("TWOPHASE_BENCH_RUNS")
    return int(forced) if forced else ROUNDS.get(n, 3)


def growth(rows: dict[str, dict[str, Any]], backend: str, sizes: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per step, the factor by which the median time grows per 10× subtasks (1 size to the next)."""
    out: dict[str, dict[str, Any]] = {}
    for step in (*STEPS, "epoch", "load", "restore"):
        factors: dict[str, Any] = {}
        for a, b in itertools.pairwise(sizes):
            ra, rb = rows.get(f"{backend} {a:,}: {step}"), rows.get(f"{backend} {b:,}: {step}")
            if ra and rb and ra["median_ms"] > 0:
                factors[f"{a:,}→{b:,}"] = round(rb["median_ms"] / ra["median_ms"], 1)
        if factors:
            out[f"{backend}: {step}"] = factors
    return out


def run() -> dict[str, object]:
    """Run every size on every backend, then the 100-epoch history.

    Returns:
        ``{"load_at_start", "load_at_end", "steps": {"<backend> <n>: <step>": row},
        "growth per 10x": {...}, "history <backend>": {...}}``; times in ms, sizes in bytes,
        memory in MB.
    """
    start_load = Path("/proc/loadavg").read_text().split()[:3]
    rows: dict[str, dict[str, Any]] = {}
    hist: dict[str, dict[str, Any]] = {}
    sizes = _sizes()
    if os.environ.get("TWOPHASE_BENCH_NO_COLLECT") != "1":
        for n in _collect_sizes(sizes):
            for step, row in bench_collection(n, _collect_rounds(n)).items():
                rows[f"spark {n:,}: {step}"] = row
                print(f"spark {n:,}: {step} {json.dumps(row)}", file=sys.stderr, flush=True)
    with backends() as stores:
        for backend, (factory, size_of, usage) in stores.items():
            for n in sizes:
                for step, row in bench_size(n, _rounds(n), factory, size_of).items():
                    rows[f"{backend} {n:,}: {step}"] = row
                    print(f"{backend} {n:,}: {step} {json.dumps(row)}", file=sys.stderr, flush=True)
                gc.collect()
            if os.environ.get("TWOPHASE_BENCH_NO_HISTORY") != "1":
                hist[backend] = history(factory, usage, HISTORY_SIZE)
    result: dict[str, object] = {
        "cores": os.cpu_count(),
        "load_at_start": " ".join(start_load),
        "load_at_end": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "steps": rows,
    }
    grow: dict[str, dict[str, Any]] = {}
    for backend in ("local", "s3"):
        grow.update(growth(rows, backend, sizes))
    result["growth per 10x"] = grow
    for backend, h in hist.items():
        result[f"100 epochs, {backend}"] = h
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["acks"]:  # the simulated executors' child process (ack_tables_from_child)
        write_ack_files(int(sys.argv[2]), Path(sys.argv[3]), [int(c) for c in sys.argv[4:]])
        sys.exit(0)
    from benchmarks.run import print_result

    print_result("coordinator_scale", run())
