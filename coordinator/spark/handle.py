"""A running streaming job on Spark: ``foreachBatch`` per micro-batch, graceful stop, cancel, failover.

Per micro-batch N the handler runs the replay check, then one epoch
(:func:`~twophase.coordinator.spark.tasks.run_spark_epoch`), and only then returns, so that Spark
writes its commit log for N after our checkpoint is durable. A graceful stop never interrupts a
running batch: it waits for the batch in flight, then makes any later batch refuse to start (Spark
replays it on resume), then stops the query and takes the savepoint or the final retained
checkpoint. A failed batch fails the query; the restart strategy restores the runtime and
restarts the query from Spark's checkpoint and ours.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from twophase.coordinator.run.restart_loop import fail_over, finish_with_restarts
from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.spark.results import EpochMetrics, EpochTotals, JobResult
from twophase.coordinator.spark.tasks import run_spark_epoch
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metrics import CheckpointMetrics
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError, JobError, TwoPhaseError
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


class _StopRequested(TwoPhaseError):
    """Raised by the batch handler once a stop began: Spark replays that batch on resume."""


# Spark decides whether a foreachBatch failure is "interrupted by stop" (and so says nothing) by
# matching this phrase and the exception's name in the Python traceback's text, with a regex that
# recurses once per character: a full Py4JJavaError traceback (~12 kB with its Java stack) overflows
# the stream thread's stack (a StackOverflowError with 1,024 java.util.regex frames).
_SPARK_STOP_PHRASE = "py4j.protocol.Py4JJavaError: An error occurred while calling"


class _BatchInterrupted(_StopRequested):
    """The batch in flight, interrupted by ``stop`` or ``cancel``: a short message Spark reads as a
    stop, raised without its cause (the epoch's runtime already aborted and logged it)."""

    def __init__(self, job_id: str, batch_id: int) -> None:
        super().__init__(
            f"{_SPARK_STOP_PHRASE} the batch's write: java.lang.InterruptedException "
            f"(twophase job {job_id}: batch {batch_id} interrupted by stop or cancel; left to the resume)"
        )


class _QuietStopFilter(logging.Filter):
    """Drops py4j's ERROR record (with a traceback) for a batch that stop or cancel interrupted."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _StopRequested))


_PY4J_LOG_FILTER = _QuietStopFilter()


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
        self._epochs: deque[EpochMetrics] = deque(maxlen=runtime.config.metrics_history)
        self._totals = EpochTotals()
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
        """Metrics of the epochs run so far by this handle, oldest first: the newest
        ``RuntimeConfig.metrics_history`` of them (:attr:`totals` counts every one)."""
        return tuple(self._epochs)

    @property
    def totals(self) -> EpochTotals:
        """Every epoch run so far by this handle, and its records, counted."""
        return self._totals

    @property
    def checkpoint_metrics(self) -> tuple[CheckpointMetrics, ...]:
        """Metrics of the checkpoints completed so far, including the final one: the newest
        ``RuntimeConfig.metrics_history`` of them (``runtime.checkpoints_completed`` counts every one)."""
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
            JobError: the job's failure once the restart strategy is exhausted (a commit error is
                raised as it is).
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
        log_event(
            log, logging.INFO, "job stopped", job=self.job_id, kind=ref.kind.value, location=ref.location
        )
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
        log_event(
            log,
            logging.INFO,
            "job canceled",
            job=self.job_id,
            batch_interrupted=self._batch_error is not None,
            checkpoints=self.runtime.config.cancel_cleanup.value,
        )

    # -- internals --------------------------------------------------------------------------------

    def _launch(self) -> None:
        logger = logging.getLogger("py4j.clientserver")
        if _PY4J_LOG_FILTER not in logger.filters:
            logger.addFilter(_PY4J_LOG_FILTER)
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
                        self._final = finish_with_restarts(self.runtime, self._last_position())
                        self.runtime.close()
                        return
                    raise JobError(f"job {self.job_id}: the Spark query stopped outside twophase")
                cause = self._batch_error or error
                assert cause is not None
                log_event(log, logging.WARNING, "batch failed, failing over", job=self.job_id, error=cause)
                fail_over(self.runtime, cause)
        except BaseException as e:
            self._failure = e
            log_event(log, logging.ERROR, "job failed", job=self.job_id, error=e)
            try:
                self.runtime.close()
            except Exception:
                log_event(log, logging.ERROR, "closing the runtime failed", exc_info=True, job=self.job_id)
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
                epoch = run_spark_epoch(self.runtime, batch_df, position, batch_id)
                self._epochs.append(epoch)
                self._totals = self._totals.add(epoch)
            except BaseException as e:
                self._batch_error = e
                if self._stop_requested.is_set() or self._cancel_requested.is_set():
                    raise _BatchInterrupted(self.job_id, batch_id) from None
                raise
