"""The Python Data Source facade (Spark ≥ 4.1): one two-phase-commit sink behind ``writeStream.format``.

Usage (single sink; classic PySpark)::

    class KafkaTwoPhase(TwoPhaseDataSource):
        format_name = "twophase-kafka"
        def build_sink(self, options):
            return KafkaSink(...options...)
    # or: KafkaTwoPhase = TwoPhaseDataSource.for_sink("twophase-kafka", build_kafka_sink)

    spark.dataSource.register(KafkaTwoPhase)
    (df.writeStream.format("twophase-kafka")
       .option("job", "orders")                      # job name (or "jobId": an explicit job id)
       .option("twophaseCheckpointDir", "/chk")      # OUR checkpoints (local path or s3://)
       .option("checkpointLocation", "/spark-chk")   # Spark's own (offsets, commit log)
       .trigger(availableNow=True).start())

How Spark 4.2 runs a Python data source stream writer (verified on pyspark 4.2.0, local[2]):

- per micro-batch, a driver-side Python worker (``pyspark.sql.worker.write_into_data_source``)
  instantiates the data source with the ``writeStream`` options (keys lower-cased, including
  ``checkpointLocation``), calls :meth:`TwoPhaseDataSource.streamWriter` and pickles the writer into
  the tasks' ``mapInArrow``-like function;
- each task calls :meth:`TwoPhaseStreamWriter.write` with its partition's Arrow batches. The task's
  local properties carry ``streaming.sql.batchId`` and ``sql.streaming.queryId`` (set by
  ``MicroBatchExecution``), so the writer context's checkpoint id is derived deterministically:
  ``checkpoint id = batch id + 1`` (:func:`checkpoint_id_for_batch`);
- ``commit(messages, batchId)`` (or ``abort``) runs in ANOTHER driver-side Python worker
  (``pyspark.sql.worker.python_streaming_sink_runner``) that unpickles the data source, calls
  ``streamWriter`` again and then ``commit``. That worker is forked from Spark's daemon and may be
  reused, so no state may be kept in it: every commit rebuilds the job's state from checkpoint
  storage. Spark writes its commit log for the batch only after ``commit`` returned; if ``commit``
  fails Spark calls ``abort`` with the same messages and fails the query.

Per micro-batch N (DESIGN.md §6, in the order the facade can run it):

1. **Write** (tasks): replay check first — if our latest checkpoint already covers N (a crash
   after step 3 and before Spark's commit log), the task writes nothing (re-writing could fence
   the durable but uncommitted transactions, e.g. Kafka's). Otherwise ``begin_transaction`` →
   ``write`` each Arrow batch → ``pre_commit`` (:func:`twophase.coordinator.fanout.write_subtasks`); the
   task returns a :class:`TwoPhaseCommitMessage` with the encoded committable.
2. **Restore** (commit worker): open storage, ``JobRuntime.restore()`` — re-commit the latest
   checkpoint's committables, abort lingering transactions (the messages' committables are held:
   they belong to the epoch being acknowledged).
3. **Replay check**, **trigger** checkpoint N + 1, **acknowledge** every message, **complete**:
   persist atomically, commit, abort lingering (failed/speculative attempts). Then return: Spark
   writes its commit log for N.

=====================================  =========================================================
the driver dies…                       on restart (Spark replays N with the same offsets)
=====================================  =========================================================
before our checkpoint is persisted     tasks rewrite N; restore aborts the old attempt's leftovers
after persist, before Spark's log      tasks skip N; restore re-commits N's committables; the
                                       replay check returns without a new checkpoint
after Spark's commit log               nothing to do
=====================================  =========================================================

Limitations of the facade (use :class:`twophase.coordinator.spark.job.Job` for these):

- single sink per query;
- **no end-of-input hook**: a Python data source writer never learns that a bounded stream
  (``availableNow``) ended, so no final checkpoint (FLIP-147) is taken. Every batch's data is
  committed with that batch's checkpoint instead, so bounded streams lose nothing — but sinks whose
  transactions span epochs (:class:`~twophase.sinks.api.InProgressSink`) would leave their last in-progress
  data uncommitted, so they are refused with :class:`~twophase.sinks.errors.ConfigError`;
- ``WriterContext.num_partitions`` in tasks is a lower bound (``partition + 1``): Spark's Python
  data source API does not tell tasks the write's parallelism. The checkpoint records the true
  parallelism (the number of commit messages);
- tasks read the job's checkpoint storage (replay check), so it must be reachable from executors
  (for S3: ``TWOPHASE_S3_*`` in the executors' environment);
- every commit restores from storage, so the latest checkpoint's committables are re-committed
  once per batch (idempotent; ``ALREADY_COMMITTED``);
- ``asyncProgressTrackingEnabled`` and complete output mode (``overwrite``) are refused; commits
  are synchronous (``CommitPolicy.async_commit`` is refused).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pyarrow as pa

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
except ImportError as e:  # pragma: no cover - depends on the installed pyspark
    raise ImportError("the twophase Python Data Source facade needs pyspark >= 4.1") from e
from pyspark.sql.types import StructType

from twophase.coordinator.fanout import EpochPlan, write_subtasks
from twophase.coordinator.runtime import JobRuntime, RuntimeConfig, position_covers
from twophase.coordinator.spark.checks import check_job_id, job_id_from_name
from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError, JobError

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Spark local property holding the micro-batch id in a streaming write's tasks."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark local property holding the streaming query id (stable across restarts)."""

OPTION_JOB = "job"
OPTION_JOB_ID = "jobid"
OPTION_CHECKPOINT_DIR = "twophasecheckpointdir"
OPTION_ASYNC_PROGRESS = "asyncprogresstrackingenabled"


def checkpoint_id_for_batch(batch_id: int) -> int:
    """The checkpoint id of micro-batch ``batch_id`` (``batch_id + 1``: ids start at 1).

    Deterministic, so that tasks (which write before any checkpoint is triggered) and the commit
    worker agree, and monotonic, so that Delta's ``txn`` versions and lingering scopes keep working.

    Raises:
        ConfigError: a negative batch id.
    """
    if batch_id < 0:
        raise ConfigError(f"Spark batch id must be >= 0, got {batch_id}")
    return batch_id + 1


def spark_position(query_id: str, batch_id: int) -> JsonObject:
    """The source position of micro-batch ``batch_id`` of query ``query_id`` (as the Job API writes it)."""
    return {"engine": "spark", "query_id": query_id, "batch_id": batch_id}


@dataclass(frozen=True)
class FacadeSettings:
    """The facade's own options, parsed from the ``writeStream`` options.

    Attributes:
        job_id: the job's stable id (``jobId``, or derived from ``job``).
        checkpoint_dir: where the job's checkpoints live (``twophaseCheckpointDir``).
    """

    job_id: str
    checkpoint_dir: str

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FacadeSettings:
        """Parse and check the options (keys in any case).

        Raises:
            ConfigError: ``twophaseCheckpointDir`` or the job is missing, a bad job id, or
                ``asyncProgressTrackingEnabled`` is on (Spark would mark batches done before their
                checkpoint is durable).
        """
        opts = lower_keys(options)
        if opts.get(OPTION_ASYNC_PROGRESS, "").strip().lower() == "true":
            raise ConfigError(
                "asyncProgressTrackingEnabled must be off: Spark would mark batches done before "
                "their checkpoint is durable, breaking exactly-once"
            )
        checkpoint_dir = opts.get(OPTION_CHECKPOINT_DIR, "").strip()
        if not checkpoint_dir:
            raise ConfigError('option "twophaseCheckpointDir" (the job\'s checkpoint directory) is required')
        if opts.get(OPTION_JOB_ID):
            job_id = check_job_id(opts[OPTION_JOB_ID])
        elif opts.get(OPTION_JOB):
            job_id = job_id_from_name(opts[OPTION_JOB])
        else:
            raise ConfigError('option "job" (the job name) or "jobId" is required')
        return cls(job_id=job_id, checkpoint_dir=checkpoint_dir)

    def open_storage(self) -> CheckpointStorage:
        """The job's checkpoint storage (writes nothing)."""
        return open_storage(self.checkpoint_dir, self.job_id)


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """A plain dict of ``options`` with lower-cased keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


@dataclass(frozen=True)
class TwoPhaseCommitMessage(WriterCommitMessage):
    """What one task returns to the commit worker: its acknowledgement of the batch's checkpoint.

    Attributes:
        job_id: the job.
        sink: the sink's name.
        query_id: Spark's query id (task local property).
        batch_id: Spark's micro-batch id.
        checkpoint_id: the checkpoint the transaction belongs to (``batch_id + 1``).
        partition: the task's partition index.
        attempt: the task's attempt number.
        committable: the encoded committable (the codec's versioned JSON, as text), or ``None``.
        records: records written.
        write_ms: time spent in begin/write/pre-commit, ms.
        skipped: the batch was already covered by a checkpoint (a replay): nothing was written.
    """

    job_id: str
    sink: str
    query_id: str
    batch_id: int
    checkpoint_id: int
    partition: int
    attempt: int
    committable: str | None
    records: int
    write_ms: float
    skipped: bool = False

    def payload(self) -> JsonObject | None:
        """The committable as a JSON object, or ``None``."""
        return None if self.committable is None else dict(json.loads(self.committable))


class TwoPhaseStreamWriter(DataSourceStreamArrowWriter):
    """The stream writer of :class:`TwoPhaseDataSource`; built by ``streamWriter`` in every process.

    Holds configuration only (the sink, the settings, the runtime config); every piece of
    coordinator state comes from checkpoint storage.

    Args:
        sink: the job's one sink (not an :class:`~twophase.sinks.api.InProgressSink`).
        settings: the facade's options.
        config: runtime settings (synchronous commit).
    """

    def __init__(self, sink: AnySink, settings: FacadeSettings, config: RuntimeConfig) -> None:
        self.sink = sink
        self.settings = settings
        self.config = config

    # -- executor side ----------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """In a task: skip a replayed batch, else begin → write each batch → pre-commit.

        Returns:
            A :class:`TwoPhaseCommitMessage`.

        Raises:
            JobError: not in a streaming write's task (no batch id), or our checkpoint belongs to
                another Spark query (see :func:`twophase.coordinator.runtime.position_covers`).
            Whatever the sink raises, after aborting its open transaction.
        """
        from pyspark import TaskContext  # executor side: the worker has pyspark

        tc = TaskContext.get()
        if tc is None:
            raise JobError("TwoPhaseStreamWriter.write must run inside a Spark task")
        batch_id = _int_property(tc.getLocalProperty(BATCH_ID_PROPERTY), BATCH_ID_PROPERTY)
        query_id = tc.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise JobError(f"the task has no {QUERY_ID_PROPERTY!r} local property: not a streaming write")
        partition, attempt = tc.partitionId(), tc.attemptNumber()
        checkpoint_id = checkpoint_id_for_batch(batch_id)
        fields = {
            "job": self.settings.job_id,
            "sink": self.sink.name,
            "checkpoint": checkpoint_id,
            "partition": partition,
            "attempt": attempt,
        }
        message = TwoPhaseCommitMessage(
            job_id=self.settings.job_id,
            sink=self.sink.name,
            query_id=query_id,
            batch_id=batch_id,
            checkpoint_id=checkpoint_id,
            partition=partition,
            attempt=attempt,
            committable=None,
            records=0,
            write_ms=0.0,
        )
        latest = self.settings.open_storage().latest()
        if latest is not None and position_covers(latest.source_position, spark_position(query_id, batch_id)):
            # a replay of a batch whose checkpoint is durable: its commits are the commit worker's job
            log.info(
                "replayed batch: nothing written job=%s batch=%d checkpoint=%d partition=%d",
                self.settings.job_id, batch_id, latest.checkpoint_id, partition, extra=fields,
            )  # fmt: skip
            return replace(message, skipped=True)
        plan = EpochPlan(
            job_id=self.settings.job_id,
            checkpoint_id=checkpoint_id,
            num_partitions=partition + 1,  # a lower bound: tasks are not told the write's parallelism
            sinks=(self.sink,),
            restored={},
        )
        [ack] = write_subtasks(plan, partition, attempt, iterator)
        return replace(
            message,
            committable=None if ack.committable is None else json.dumps(ack.committable, sort_keys=True),
            records=ack.records,
            write_ms=ack.write_ms,
        )

    # -- driver side (a fresh commit worker) -------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Complete batch ``batchId``'s checkpoint from storage and the tasks' messages.

        Restore (re-commit the latest checkpoint, abort lingering), replay check, trigger
        checkpoint ``batchId + 1``, acknowledge every message, persist atomically, commit, abort
        lingering. Returns only when everything is committed; then Spark writes its commit log.

        Raises:
            JobError: a message is missing or of another job/sink/batch, the checkpoint ids of the
                job's storage do not follow the batch ids, or the batch was skipped by tasks but is
                not covered by a checkpoint.
            plus the errors of restoring and completing (``CorruptCheckpointError``,
            ``CheckpointStorageError``, ``TransactionLostError``, ``CommitFailedError``).
        """
        started = time.perf_counter()
        msgs = self._check_messages(messages, batchId, allow_missing=False)
        job_id = self.settings.job_id
        if not msgs:  # a batch without partitions wrote nothing: no checkpoint needed
            log.info("empty batch: nothing to commit job=%s batch=%d", job_id, batchId, extra={"job": job_id})
            return
        query_ids = {m.query_id for m in msgs}
        if len(query_ids) != 1:
            raise JobError(f"batch {batchId}: tasks report several query ids {sorted(query_ids)}")
        position = spark_position(query_ids.pop(), batchId)
        written = [m for m in msgs if not m.skipped]
        fresh = [self.sink.decode(p) for m in written if (p := m.payload()) is not None]
        runtime = JobRuntime(job_id, [self.sink], self.settings.open_storage(), self.config)
        try:
            restored = runtime.restore(held={self.sink.name: fresh})
            if runtime.replay_check(position):
                aborted = self._abort_unheld(runtime.storage, fresh)
                log.info(
                    "replayed batch committed from checkpoint job=%s batch=%d checkpoint=%s aborted=%d",
                    job_id, batchId, restored.checkpoint_id, aborted, extra={"job": job_id},
                )  # fmt: skip
                return
            if len(written) != len(msgs):
                raise JobError(
                    f"batch {batchId}: tasks skipped it as already checkpointed, but the latest checkpoint "
                    f"({restored.checkpoint_id}) does not cover it; checkpoint storage changed meanwhile"
                )
            # ids follow batch ids (the gaps are empty batches); a lower next id means another
            # writer used this checkpoint directory
            epoch = runtime.begin_epoch(len(msgs), position, checkpoint_id=checkpoint_id_for_batch(batchId))
            for m in msgs:
                epoch.acknowledge_encoded(m.sink, m.partition, m.attempt, m.payload(), None, m.records)
            metrics = runtime.complete_epoch(epoch)
        finally:
            runtime.close()
        log.info(
            "batch committed job=%s batch=%d checkpoint=%d partitions=%d records=%s committed=%d "
            "aborted=%d persist_ms=%.1f commit_ms=%.1f total_ms=%.1f",
            job_id, batchId, metrics.checkpoint_id, len(msgs), metrics.records,
            metrics.transactions_committed, metrics.transactions_aborted, metrics.persist_ms,
            metrics.commit_ms, (time.perf_counter() - started) * 1000.0,
            extra={"job": job_id, "checkpoint": metrics.checkpoint_id},
        )  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort the batch's pre-committed transactions that no checkpoint holds.

        Spark calls this after a failed task *or a failed commit*: a commit that persisted the
        checkpoint and then crashed promised those transactions, so the ones a retained checkpoint
        holds are left for the next restore to commit. Failed tasks' leftovers (``None`` messages)
        are lingering and cleaned by the next restore.

        Raises:
            JobError: a message of another job, sink or batch.
            CorruptCheckpointError, CheckpointStorageError: storage cannot be read (nothing aborted).
        """
        msgs = self._check_messages(messages, batchId, allow_missing=True)
        comms = [self.sink.decode(p) for m in msgs if not m.skipped and (p := m.payload()) is not None]
        aborted = self._abort_unheld(self.settings.open_storage(), comms) if comms else 0
        log.warning(
            "batch aborted job=%s batch=%d tasks=%d failed_tasks=%d aborted=%d",
            self.settings.job_id, batchId, len(msgs), sum(m is None for m in messages), aborted,
            extra={"job": self.settings.job_id},
        )  # fmt: skip

    # -- helpers ------------------------------------------------------------------------------------

    def _check_messages(
        self, messages: Sequence[WriterCommitMessage | None], batch_id: int, *, allow_missing: bool
    ) -> list[TwoPhaseCommitMessage]:
        out: list[TwoPhaseCommitMessage] = []
        for i, m in enumerate(messages):
            if m is None:
                if allow_missing:
                    continue
                raise JobError(f"batch {batch_id}: task {i} returned no commit message")
            if not isinstance(m, TwoPhaseCommitMessage):
                raise JobError(f"batch {batch_id}: unexpected commit message {type(m).__name__}")
            if (m.job_id, m.sink, m.batch_id) != (self.settings.job_id, self.sink.name, batch_id):
                raise JobError(
                    f"batch {batch_id}: message of job {m.job_id!r} sink {m.sink!r} batch {m.batch_id} "
                    f"given to job {self.settings.job_id!r} sink {self.sink.name!r}"
                )
            out.append(m)
        if not allow_missing and sorted(m.partition for m in out) != list(range(len(out))):
            raise JobError(f"batch {batch_id}: partitions {sorted(m.partition for m in out)} are not 0..n-1")
        return out

    def _abort_unheld(self, storage: CheckpointStorage, committables: Sequence[Any]) -> int:
        """Abort ``committables`` unless a retained checkpoint holds them; return how many."""
        if not committables:
            return 0
        held: set[str] = set()
        for ref in storage.list_checkpoints():
            snap = storage.load(ref).sinks.get(self.sink.name)
            if snap is not None:
                held.update(self._canonical(rec.payload) for rec in snap.committables)
        aborted = 0
        for c in committables:
            if self._canonical(self.sink.encode(c)) in held:
                continue
            try:
                self.sink.abort(c)
                aborted += 1
            except Exception:  # best effort: what is left is lingering, aborted by the next restore
                log.exception("abort failed job=%s sink=%s", self.settings.job_id, self.sink.name)
        return aborted

    def _canonical(self, payload: JsonObject) -> str:
        # re-encode, so that equal committables compare equal whatever their JSON's key order
        encoded = self.sink.encode(self.sink.decode(payload))
        return json.dumps(encoded, sort_keys=True, separators=(",", ":"), default=str)


def _int_property(value: str | None, name: str) -> int:
    if value is None or not value.strip().lstrip("-").isdigit():
        raise JobError(f"the task's {name!r} local property is {value!r}: not a streaming micro-batch write")
    return int(value)


class TwoPhaseDataSource(DataSource):
    """Base of ``twophase-<connector>`` formats: subclass it (``format_name`` + :meth:`build_sink`)
    or use :meth:`for_sink`. Register the class with ``spark.dataSource.register``.

    Options (case-insensitive): ``job`` (job name; the id is derived as in the Job API) or
    ``jobId``; ``twophaseCheckpointDir`` (required); ``checkpointLocation`` (Spark's, required by
    Spark); anything the sink needs. ``asyncProgressTrackingEnabled=true`` is refused.

    Attributes:
        format_name: the name given to ``writeStream.format``, e.g. ``"twophase-kafka"``.
    """

    format_name: ClassVar[str] = ""

    @classmethod
    def name(cls) -> str:
        """The format name (:attr:`format_name`).

        Raises:
            ConfigError: the subclass did not set ``format_name``.
        """
        if not cls.format_name:
            raise ConfigError(f"{cls.__name__} must set format_name (e.g. 'twophase-kafka')")
        return cls.format_name

    def build_sink(self, options: Mapping[str, str]) -> AnySink:
        """Build the job's sink from the options (lower-cased keys, string values).

        Called on the driver for every batch's write plan and in every commit worker, so it must
        be cheap and deterministic: the same options must give a sink of the same name.

        Raises:
            ConfigError: a bad or missing option.
        """
        raise ConfigError(f"{type(self).__name__} must implement build_sink(options)")

    def runtime_config(self, options: Mapping[str, str]) -> RuntimeConfig:
        """Runtime settings (retention, commit retries); override to read them from options.

        Restart strategies do not apply: Spark restarts the query. Commits must be synchronous.
        """
        return RuntimeConfig()

    def streamWriter(self, schema: StructType, overwrite: bool) -> TwoPhaseStreamWriter:
        """The stream writer (runs on the driver, before anything is written).

        Raises:
            ConfigError: bad options (see :class:`FacadeSettings`), complete output mode
                (``overwrite``), an :class:`~twophase.sinks.api.InProgressSink` (no end-of-input hook),
                asynchronous commit.
            SchemaError: the sink cannot take ``schema``.
        """
        from pyspark.sql.pandas.types import to_arrow_schema

        options = lower_keys(self.options)
        settings = FacadeSettings.from_options(options)
        if overwrite:
            raise ConfigError("complete output mode is not supported by two-phase-commit sinks; use append")
        sink = self.build_sink(options)
        if isinstance(sink, InProgressSink):
            raise ConfigError(
                f"sink {sink.name!r} keeps transactions open across batches (InProgressSink); the Python "
                "Data Source facade has no end-of-input hook to finish them (FLIP-147 final checkpoint): "
                "use coordinator.spark.job.Job"
            )
        config = self.runtime_config(options)
        if config.commit.async_commit:
            raise ConfigError("the Python Data Source facade commits synchronously; async_commit must be off")
        sink.validate(to_arrow_schema(schema))
        return TwoPhaseStreamWriter(sink, settings, config)

    @classmethod
    def for_sink(
        cls, format_name: str, build_sink: Callable[[Mapping[str, str]], AnySink]
    ) -> type[TwoPhaseDataSource]:
        """A data source class named ``format_name`` whose sink comes from ``build_sink(options)``.

        ``build_sink`` is pickled with the class (cloudpickle), so it must be a module-level
        function or a picklable closure.

        Raises:
            ConfigError: ``format_name`` is empty.
        """
        if not format_name:
            raise ConfigError("format_name must not be empty")

        def _build(self: TwoPhaseDataSource, options: Mapping[str, str]) -> AnySink:
            return build_sink(options)

        class_name = "".join(p.capitalize() for p in format_name.replace("_", "-").split("-")) or "Sink"
        return type(class_name, (cls,), {"format_name": format_name, "build_sink": _build})
