"""Attach two-phase-commit sinks to a PySpark pipeline: the ``Job`` API (DESIGN.md §6).

Batch::

    result = Job(spark, "orders", checkpoint_dir="/chk").sink(kafka).sink(delta).write(df)

Streaming (``foreachBatch`` + ``mapInArrow``; data stays in Arrow)::

    handle = (Job(spark, "orders", checkpoint_dir="/chk").sink(kafka).sink(delta)
              .start(stream_df, spark_checkpoint_location="/spark-chk", trigger={"availableNow": True}))
    handle.await_termination()      # bounded input: finishes with ONE final checkpoint (FLIP-147)
    handle.stop(savepoint=True, drain=False)   # or: graceful stop between batches; cancel()

Per micro-batch N the handler runs the replay check, triggers checkpoint c, writes every sink in
one pass over the data in Spark tasks (each task pre-commits and returns its committables as
Arrow rows: the acknowledgements), persists c atomically, commits everything pending ≤ c, aborts
what failed and speculative attempts left, and only then returns, so that Spark writes its commit
log for N after our checkpoint is durable.

A graceful stop never interrupts a running batch: it waits for the batch in flight, then makes any
later batch refuse to start (Spark replays it on resume), then stops the query and takes the
savepoint or the final retained checkpoint. A failed batch fails the query; the restart strategy
restores the runtime and restarts the query from Spark's checkpoint and ours.

Classic PySpark only (``foreachBatch`` runs in this driver process; Spark Connect is not supported).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twophase.coordinator.fanout import Acknowledgement, EpochPlan, sink_names_unique
from twophase.coordinator.job_lifecycle import JobState
from twophase.coordinator.runtime import CheckpointMetrics, JobRuntime, RuntimeConfig
from twophase.coordinator.spark.checks import (
    check_job_id,
    check_query_id,
    check_speculation,
    check_stream_options,
    job_id_from_name,
    read_spark_query_id,
)
from twophase.coordinator.spark.tasks import epoch_task
from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError, JobError, TwoPhaseError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]

ACK_DDL = (
    "sink string, partition int, attempt int, committable string, in_progress string, "
    "records bigint, write_ms double"
)
"""Spark DDL of :data:`twophase.coordinator.fanout.ACK_SCHEMA` (what ``mapInArrow`` returns)."""


@dataclass(frozen=True)
class EpochMetrics:
    """What one epoch (micro-batch or batch write) cost.

    Attributes:
        checkpoint_id: the epoch's checkpoint.
        batch_id: Spark's batch id (streaming), or ``None`` for a batch write.
        partitions: the epoch's parallelism.
        records: records written (each sink receives all of them).
        epoch_ms: wall time of the whole epoch on the driver, ms.
        write_ms: wall time of the Spark job that wrote and pre-committed, ms.
        persist_ms: time to publish the checkpoint, ms.
        commit_ms: time to commit (submission time with async commit), ms.
        transactions_committed: transactions committed by this checkpoint's notification.
        transactions_aborted: transactions aborted (including lingering ones).
    """

    checkpoint_id: int
    batch_id: int | None
    partitions: int
    records: int
    epoch_ms: float
    write_ms: float
    persist_ms: float
    commit_ms: float
    transactions_committed: int
    transactions_aborted: int

    @property
    def coordinator_share(self) -> float:
        """(persist + commit) / epoch time: the coordinator's overhead as a share of the batch."""
        return (self.persist_ms + self.commit_ms) / self.epoch_ms if self.epoch_ms > 0 else 0.0


@dataclass(frozen=True)
class JobResult:
    """The outcome of a finished job.

    Attributes:
        job_id: the job.
        state: the final job state (FINISHED after a batch write or bounded stream).
        epochs: metrics of every epoch this process ran (replayed epochs are skipped).
        final: the final checkpoint's metrics, or ``None`` if nothing was left to finish.
    """

    job_id: str
    state: JobState
    epochs: tuple[EpochMetrics, ...]
    final: CheckpointMetrics | None


class Job:
    """A pipeline's exactly-once sinks and their checkpoints.

    Args:
        spark: the (classic) SparkSession.
        name: the job's name; the job id is derived from it unless ``job_id`` is given. The id is
            stable across restarts: it names the job's checkpoints and transactions.
        checkpoint_dir: where checkpoints live: a local path or ``s3://bucket/prefix``.
        job_id: explicit job id (``[A-Za-z0-9][A-Za-z0-9_.]*``).
        config: checkpointing, commit, restart-strategy and cancel settings.
        from_savepoint: a savepoint's location to resume from instead of the latest checkpoint.
        storage: checkpoint storage to use instead of opening ``checkpoint_dir`` (tests, custom S3
            clients).

    Raises:
        ConfigError: a bad name, job id or checkpoint location.
    """

    def __init__(
        self,
        spark: SparkSession,
        name: str,
        checkpoint_dir: str,
        *,
        job_id: str | None = None,
        config: RuntimeConfig | None = None,
        from_savepoint: str | None = None,
        storage: CheckpointStorage | None = None,
    ) -> None:
        self.spark = spark
        self.name = name
        self.job_id = check_job_id(job_id) if job_id is not None else job_id_from_name(name)
        self.checkpoint_dir = checkpoint_dir
        self.config = config or RuntimeConfig()
        self.from_savepoint = from_savepoint
        self._storage = storage
        self._sinks: list[AnySink] = []

    def sink(self, sink: AnySink) -> Job:
        """Add a sink; every record reaches every sink, in the same checkpoints.

        Raises:
            ConfigError: the sink's name is used already.
        """
        sink_names_unique([*self._sinks, sink])
        self._sinks.append(sink)
        return self

    @property
    def sinks(self) -> tuple[AnySink, ...]:
        """The job's sinks, in the order they were added."""
        return tuple(self._sinks)

    def _runtime(self) -> JobRuntime:
        if not self._sinks:
            raise ConfigError(f"job {self.job_id} has no sinks; add one with .sink(...)")
        storage = self._storage or open_storage(self.checkpoint_dir, self.job_id)
        return JobRuntime(self.job_id, self._sinks, storage, self.config)

    def _validate(self, df: DataFrame) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        check_speculation(self.spark.sparkContext.getConf().get("spark.speculation", "false"), self._sinks)
        # Spark's Arrow batches label timestamps with the session time zone
        schema = to_arrow_schema(df.schema, timezone=self.spark.conf.get("spark.sql.session.timeZone"))
        for s in self._sinks:
            s.validate(schema)

    def write(self, df: DataFrame) -> JobResult:
        """Batch write: one epoch, then the final checkpoint; every record exactly once.

        Re-running the same job after a crash resumes it: a write whose checkpoint completed is
        not written again, only committed and finished. A job id names one write; use a new name
        for a new one.

        Raises:
            SchemaError, ConfigError: a sink cannot take the data (before anything is written).
            JobError: the restart strategy is exhausted (the job FAILED); CommitFailedError,
                TransactionLostError: commits failed.
        """
        self._validate(df)
        runtime = self._runtime()
        position: JsonObject = {"engine": "spark-batch", "job": self.job_id}
        epochs: list[EpochMetrics] = []

        def body(rt: JobRuntime) -> CheckpointMetrics | None:
            if not rt.replay_check(position):
                epochs.append(run_epoch(rt, df, position, batch_id=None))
            return rt.finish(position)

        try:
            final = runtime.run_with_restarts(body, self.from_savepoint)
        finally:
            runtime.close()
        return JobResult(self.job_id, runtime.state, tuple(epochs), final)

    def start(
        self,
        df: DataFrame,
        *,
        spark_checkpoint_location: str,
        trigger: Mapping[str, Any] | None = None,
        output_mode: str = "append",
        query_name: str | None = None,
        options: Mapping[str, str] | None = None,
    ) -> JobHandle:
        """Start a streaming job on ``df`` (a streaming DataFrame).

        Args:
            df: the streaming DataFrame; every sink receives every row.
            spark_checkpoint_location: Spark's own checkpoint (offsets, commit log). Must stay
                paired with this job's checkpoints: resuming against another one is refused.
            trigger: ``DataStreamWriter.trigger`` keywords, e.g. ``{"availableNow": True}`` (a
                bounded stream: the job finishes with the final checkpoint when input ends) or
                ``{"processingTime": "10 seconds"}``.
            output_mode: ``append`` or ``update``.
            query_name: Spark query name.
            options: further ``writeStream`` options.

        Returns:
            A handle to await, stop or cancel the job.

        Raises:
            ConfigError: asyncProgressTrackingEnabled on, an unsupported output mode, no sinks.
            SchemaError: a sink cannot take the stream's schema.
            JobError: the job's checkpoint belongs to another Spark checkpoint location.
            plus the errors of restoring (``CorruptCheckpointError``, commit errors).
        """
        if not df.isStreaming:
            raise ConfigError("start() needs a streaming DataFrame; use write() for batch data")
        check_stream_options(output_mode, options or {})
        self._validate(df)
        runtime = self._runtime()
        restored = runtime.restore(self.from_savepoint)
        check_query_id(
            restored.source_position,
            read_spark_query_id(self.spark, spark_checkpoint_location),
            spark_checkpoint_location,
        )
        handle = JobHandle(
            runtime,
            df,
            spark_checkpoint_location=spark_checkpoint_location,
            trigger=dict(trigger or {"processingTime": "0 seconds"}),
            output_mode=output_mode,
            query_name=query_name,
            options=dict(options or {}),
        )
        handle._launch()
        return handle


def run_epoch(runtime: JobRuntime, df: DataFrame, position: JsonObject, batch_id: int | None) -> EpochMetrics:
    """Run one epoch of ``df`` through every sink: trigger, write in tasks, acknowledge, complete.

    Raises:
        Whatever the Spark job or the runtime raise; the epoch's checkpoint is aborted first.
    """
    started = time.perf_counter()
    partitions = df.rdd.getNumPartitions()
    if partitions == 0:
        df, partitions = df.repartition(1), 1  # an empty input still acknowledges its checkpoint
    epoch = runtime.begin_epoch(partitions, position)
    plan = EpochPlan(
        job_id=runtime.job_id,
        checkpoint_id=epoch.checkpoint_id,
        num_partitions=partitions,
        sinks=tuple(runtime.sinks[name] for name in epoch.sinks),
        restored=epoch.restored_in_progress(),
    )
    try:
        write_started = time.perf_counter()
        rows = df.mapInArrow(epoch_task(plan), ACK_DDL).collect()
        write_ms = (time.perf_counter() - write_started) * 1000.0
        records: dict[int, int] = {}
        for row in rows:
            ack = Acknowledgement.from_row(row.asDict())
            epoch.acknowledge_encoded(
                ack.sink, ack.partition, ack.attempt, ack.committable, ack.in_progress, ack.records
            )
            records[ack.partition] = ack.records
    except BaseException as e:
        if runtime.state is JobState.RUNNING and epoch.checkpoint_id in {
            p.checkpoint_id for p in runtime.coordinator.pending_checkpoints
        }:
            runtime.abort_epoch(epoch, f"epoch failed: {e!r}")
        raise
    cm = runtime.complete_epoch(epoch)
    metrics = EpochMetrics(
        checkpoint_id=epoch.checkpoint_id,
        batch_id=batch_id,
        partitions=partitions,
        records=sum(records.values()),
        epoch_ms=(time.perf_counter() - started) * 1000.0,
        write_ms=write_ms,
        persist_ms=cm.persist_ms,
        commit_ms=cm.commit_ms,
        transactions_committed=cm.transactions_committed,
        transactions_aborted=cm.transactions_aborted,
    )
    log.info(
        "epoch done job=%s checkpoint=%d batch=%s partitions=%d records=%d epoch_ms=%.1f write_ms=%.1f "
        "persist_ms=%.1f commit_ms=%.1f",
        runtime.job_id, metrics.checkpoint_id, batch_id, partitions, metrics.records, metrics.epoch_ms,
        write_ms, metrics.persist_ms, metrics.commit_ms,
        extra={"job": runtime.job_id, "checkpoint": metrics.checkpoint_id},
    )  # fmt: skip
    return metrics


class _StopRequested(TwoPhaseError):
    """Raised by the batch handler once a stop began: Spark replays that batch on resume."""


class JobHandle:
    """A running streaming job (from :meth:`Job.start`).

    Thread-safe: ``stop`` and ``cancel`` may be called from any thread.
    """

    def __init__(
        self,
        runtime: JobRuntime,
        df: DataFrame,
        *,
        spark_checkpoint_location: str,
        trigger: dict[str, Any],
        output_mode: str,
        query_name: str | None,
        options: dict[str, str],
    ) -> None:
        self.runtime = runtime
        self._df = df
        self._location = spark_checkpoint_location
        self._trigger = trigger
        self._output_mode = output_mode
        self._query_name = query_name
        self._options = options
        self._bounded = bool(trigger.get("availableNow") or trigger.get("once"))
        self._batch_lock = threading.Lock()
        self._stop_requested = threading.Event()
        self._cancel_requested = threading.Event()
        self._query_started = threading.Event()
        self._done = threading.Event()
        self._query: StreamingQuery | None = None
        self._query_id: str | None = None
        self._batch_error: BaseException | None = None
        self._failure: BaseException | None = None
        self._epochs: list[EpochMetrics] = []
        self._final: CheckpointMetrics | None = None
        self._stop_ref: CheckpointRef | None = None
        self._thread = threading.Thread(
            target=self._supervise, name=f"twophase-{runtime.job_id}", daemon=True
        )

    # -- public -----------------------------------------------------------------------------------

    @property
    def job_id(self) -> str:
        """The job's id."""
        return self.runtime.job_id

    @property
    def status(self) -> JobState:
        """The job's lifecycle state (RUNNING, FINISHED, SUSPENDED, CANCELED, FAILED, ...)."""
        return self.runtime.state

    @property
    def metrics(self) -> tuple[EpochMetrics, ...]:
        """Metrics of every epoch run so far by this handle."""
        return tuple(self._epochs)

    @property
    def checkpoint_metrics(self) -> tuple[CheckpointMetrics, ...]:
        """Metrics of every checkpoint completed so far, including the final one."""
        return tuple(self.runtime.checkpoint_metrics)

    @property
    def query(self) -> StreamingQuery | None:
        """The Spark query currently running, if any."""
        return self._query

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the job has finished, stopped, been canceled or failed.

        Returns:
            True if it terminated within ``timeout`` seconds.

        Raises:
            The job's failure (``JobError`` once the restart strategy is exhausted, commit errors).
        """
        if not self._done.wait(timeout):
            return False
        if self._failure is not None:
            raise self._failure
        return True

    def result(self) -> JobResult:
        """The job's outcome after termination.

        Raises:
            JobError: the job has not terminated yet.
        """
        if not self._done.is_set():
            raise JobError(f"job {self.job_id} is still {self.status.value}")
        return JobResult(self.job_id, self.status, tuple(self._epochs), self._final)

    def stop(
        self, *, savepoint: bool = False, drain: bool = False, timeout: float | None = None
    ) -> CheckpointRef:
        """Stop gracefully between batches (a running batch completes first).

        Args:
            savepoint: keep the last checkpoint as a savepoint (resume with ``from_savepoint``).
            drain: finish the sinks first (FLIP-147: in-progress data committed by the final
                checkpoint; the job is FINISHED). Without drain, in-progress state stays in the
                savepoint and the job is SUSPENDED; a resume continues it.
            timeout: seconds to wait for the batch in flight and the query to stop.

        Returns:
            The savepoint, or (``savepoint=False``) the final retained checkpoint: a resume from
            it replays nothing.

        Raises:
            ConfigError: ``drain`` without ``savepoint``.
            JobError: the job is not running, or it failed meanwhile.
        """
        if drain and not savepoint:
            raise ConfigError("drain=True needs savepoint=True (stop with savepoint and drain)")
        self._stop_requested.set()
        self._halt_query(timeout)
        if self._failure is not None:
            raise JobError(f"job {self.job_id} failed before it could stop") from self._failure
        if self.runtime.state is not JobState.RUNNING:
            raise JobError(f"job {self.job_id} is {self.runtime.state.value}, not running: nothing to stop")
        try:
            ref = self.runtime.stop_with_savepoint(drain) if savepoint else self.runtime.stop()
        finally:
            self.runtime.close()
            self._done.set()
        self._stop_ref = ref
        log.info("job stopped job=%s kind=%s location=%s", self.job_id, ref.kind.value, ref.location)
        return ref

    def cancel(self, timeout: float | None = None) -> None:
        """Cancel now: the running batch is interrupted, open transactions aborted, completed
        checkpoints kept (or deleted, per ``RuntimeConfig.cancel_cleanup``).

        Raises:
            JobError: canceled, but a cleanup step failed.
        """
        self._cancel_requested.set()
        query = self._query
        if query is not None:
            query.stop()
        self._thread.join(timeout)
        try:
            if not self.runtime.state.is_terminal:
                self.runtime.cancel()
        finally:
            self.runtime.close()
            self._done.set()

    # -- internals --------------------------------------------------------------------------------

    def _launch(self) -> None:
        self._thread.start()

    def _halt_query(self, timeout: float | None) -> None:
        # waiting for the lock lets the batch in flight complete; every later batch sees the flag
        if not self._batch_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise JobError(f"job {self.job_id}: the running batch did not complete within {timeout}s")
        self._batch_lock.release()
        query = self._query
        if query is not None:
            query.stop()
        self._thread.join(timeout)

    def _start_query(self) -> StreamingQuery:
        writer = (
            self._df.writeStream.foreachBatch(self._on_batch)
            .outputMode(self._output_mode)
            .option("checkpointLocation", self._location)
            .trigger(**self._trigger)
        )
        for key, value in self._options.items():
            writer = writer.option(key, value)
        if self._query_name:
            writer = writer.queryName(self._query_name)
        self._query_started.clear()
        query = writer.start()
        self._query = query
        self._query_id = str(query.id)
        self._query_started.set()
        return query

    def _supervise(self) -> None:
        from pyspark.errors import StreamingQueryException

        try:
            while not (self._cancel_requested.is_set() or self._stop_requested.is_set()):
                self._batch_error = None
                query = self._start_query()
                error: BaseException | None = None
                try:
                    query.awaitTermination()
                except StreamingQueryException as e:
                    error = e
                if self._cancel_requested.is_set() or self._stop_requested.is_set():
                    return  # cancel() / stop() take it from here
                if error is None and self._batch_error is None:
                    if self._bounded:
                        self._final = self.runtime.finish(self._last_position())
                        self.runtime.close()
                        return
                    raise JobError(f"job {self.job_id}: the Spark query stopped outside twophase")
                cause = self._batch_error or error
                assert cause is not None
                log.warning("batch failed, failing over job=%s error=%r", self.job_id, cause)
                self.runtime.failover(cause)
        except BaseException as e:
            self._failure = e
            log.error("job failed job=%s error=%r", self.job_id, e)
            try:
                self.runtime.close()
            except Exception:
                log.exception("closing the runtime failed job=%s", self.job_id)
        finally:
            if not (self._stop_requested.is_set() or self._cancel_requested.is_set()) or self._failure:
                self._done.set()

    def _last_position(self) -> JsonObject | None:
        last = self.runtime.latest_checkpoint
        return last.source_position if last is not None else None

    def _on_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        with self._batch_lock:
            if self._stop_requested.is_set() or self._cancel_requested.is_set():
                raise _StopRequested(f"job {self.job_id}: stopping; batch {batch_id} is left to the resume")
            self._query_started.wait()
            position: JsonObject = {"engine": "spark", "query_id": self._query_id, "batch_id": batch_id}
            try:
                if self.runtime.replay_check(position):
                    return
                self._epochs.append(run_epoch(self.runtime, batch_df, position, batch_id))
            except BaseException as e:
                self._batch_error = e
                raise
