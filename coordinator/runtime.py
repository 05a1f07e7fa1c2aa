"""The job runtime: what an execution layer (Spark, the test harness) drives, epoch by epoch.

Engine-agnostic (no Spark import). It ties together the job lifecycle
(:mod:`~twophase.coordinator.job_lifecycle`), the checkpoint coordinator, the committer operator,
checkpoint storage and the restart strategy, and implements the job actions of DESIGN.md §5::

    rt = JobRuntime(job_id, sinks, storage, config)
    rt.restore()                                       # or rt.restore(savepoint_location)
    def on_batch(batch_df, n):                         # foreachBatch, per micro-batch
        position = {"engine": "spark", "query_id": qid, "batch_id": n}
        if not rt.replay_check(position):              # 1. replay: committed already, skip writing
            run_epoch(rt, partitions, write, position)  # 2-7: trigger, write, acknowledge, persist,
                                                       #      commit, abort lingering
    rt.finish()                                        # end of input: ONE final checkpoint
    # or rt.stop_with_savepoint(drain=...), rt.stop(), rt.cancel(); on a failure rt.failover(e)

The parts live in their own modules: restore and "what may be aborted" in
:mod:`~twophase.coordinator.recovery`, epochs in :mod:`~twophase.coordinator.epoch`, the rescale
handover in :mod:`~twophase.coordinator.driver_finish`, finish/stop/cancel in
:mod:`~twophase.coordinator.job_endings`, the state they share in :mod:`~twophase.coordinator.run_state`.

A cancel from another thread while an action hangs (e.g. a commit retrying) takes effect: the
retry stops, the action raises :class:`JobCanceledError`. Checkpoints are always kept on failure.
Errors: an ``IllegalTransitionError`` (a caller's protocol mistake) leaves the job as it was;
  any other error of an action moves the job to FAILING (pending checkpoints aborted, subtasks
  closed). Then :meth:`JobRuntime.failover` or :func:`~twophase.coordinator.restart_loop.run_with_restarts`
  restarts or gives up (FAILED).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint_state import NotifyResult
from twophase.coordinator.clock import Clock, system_clock_ms
from twophase.coordinator.commit_policy import CommitterMetrics
from twophase.coordinator.driver_fence import DriverFence
from twophase.coordinator.epoch import Epoch, open_epoch, position_covers
from twophase.coordinator.fanout import sink_names_unique
from twophase.coordinator.faults import fault_point
from twophase.coordinator.job_endings import cancel_job, finish_job, stop_job, stop_with_savepoint
from twophase.coordinator.job_lifecycle import JobLifecycle, JobState, JobTransition
from twophase.coordinator.lingering import ALL_CHECKPOINTS
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.metrics import CheckpointMetrics, SinkMetricsRecorder
from twophase.coordinator.prometheus_metrics import MetricsEndpoint, RuntimeCollector
from twophase.coordinator.recovery import RestoreResult, restore_run
from twophase.coordinator.restart import RestartTracker
from twophase.coordinator.restart_loop import JobCanceledError, run_with_restarts
from twophase.coordinator.run_state import RunState
from twophase.coordinator.runtime_config import CleanupMode, RuntimeConfig
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import (
    ConfigError,
    DriverFencedError,
    IllegalTransitionError,
    JobError,
    error_summary,
)
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
R = TypeVar("R")

__all__ = [
    "ALL_CHECKPOINTS",
    "CleanupMode",
    "JobCanceledError",
    "JobRuntime",
    "RestoreResult",
    "RuntimeConfig",
]


class JobRuntime:
    """One job's runtime; see the module docstring for the flow and the decisions.

    Args:
        job_id: the job's stable id (survives restarts).
        sinks: the job's sinks; names unique.
        storage: the job's checkpoint storage (``storage.job_id == job_id``).
        config: settings.
        clock: ms clock (checkpoint timestamps, timeouts, age warnings, restart windows).
        sleep: sleep in seconds (restart delays); commit backoff uses the committer's own.
        commit_sleep: backoff sleep of commit retries (default: interruptible by cancel).
        fault: fault-point hook (default :func:`twophase.coordinator.faults.fault_point`, driven by
            ``TWOPHASE_FAULT``); the harness injects exceptions through it.
        fence_drivers: claim a driver epoch at the first restore and stop once a newer driver
            claims the job (:mod:`~twophase.coordinator.driver_fence`). Off for a runtime that
            lives for one micro-batch's commit (the Data Source facade): a new one per batch would
            claim anew each time and fence whichever driver last claimed.

    Raises:
        ConfigError: duplicate sink names, or storage of another job.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Sequence[AnySink],
        storage: CheckpointStorage,
        config: RuntimeConfig | None = None,
        *,
        clock: Clock = system_clock_ms,
        sleep: Callable[[float], None] = time.sleep,
        commit_sleep: Callable[[float], None] | None = None,
        fault: Callable[[str], None] = fault_point,
        fence_drivers: bool = True,
    ) -> None:
        sink_names_unique(sinks)
        if storage.job_id != job_id:
            raise ConfigError(f"checkpoint storage of job {storage.job_id!r} given to job {job_id!r}")
        self.job_id = job_id
        self.config = config or RuntimeConfig()
        self._sleep = sleep
        self._s = RunState(
            job_id,
            {s.name: s for s in sinks},
            storage,
            self.config,
            clock,
            commit_sleep,
            fault,
            DriverFence(job_id, storage, clock) if fence_drivers else None,
        )
        self.metrics_endpoint: MetricsEndpoint | None = None  # RuntimeConfig.metrics_port
        if self.config.metrics_port is not None:
            collector = RuntimeCollector(
                job_id,
                self._s.sink_metrics,
                lambda: self.checkpoints_completed,
                lambda: self.checkpoint_metrics,
            )
            self.metrics_endpoint = MetricsEndpoint(
                collector, self.config.metrics_port, self.config.metrics_address
            )

    # -- state ------------------------------------------------------------------------------------

    @property
    def sinks(self) -> Mapping[str, AnySink]:
        """The job's sinks by name, in job order."""
        return self._s.sinks

    @property
    def storage(self) -> CheckpointStorage:
        """The job's checkpoint storage."""
        return self._s.storage

    @property
    def clock(self) -> Clock:
        """The runtime's ms clock."""
        return self._s.clock

    @property
    def lifecycle(self) -> JobLifecycle:
        """The job's lifecycle state machine."""
        return self._s.lifecycle

    @property
    def restarts(self) -> RestartTracker:
        """The restart strategy's record of this job's restarts."""
        return self._s.restarts

    @property
    def state(self) -> JobState:
        """The job's state."""
        return self._s.lifecycle.state

    @property
    def driver_epoch(self) -> int | None:
        """This driver's epoch of the job (claimed by the first restore; ``None`` before it).
        A newer driver's claim fences this one (:class:`~twophase.sinks.errors.DriverFencedError`)."""
        return None if self._s.fence is None else self._s.fence.epoch

    @property
    def coordinator(self) -> CheckpointCoordinator:
        """The current run's checkpoint coordinator (after :meth:`restore`).

        Raises:
            IllegalTransitionError: before :meth:`restore`.
        """
        return self._s.coordinator()

    @property
    def latest_checkpoint(self) -> CheckpointMetadata | None:
        """The newest checkpoint completed in this run, or the restored one."""
        return self._s.checkpoints.last

    @property
    def checkpoint_metrics(self) -> list[CheckpointMetrics]:
        """Metrics of the checkpoints completed by this runtime, oldest first: the newest
        ``RuntimeConfig.metrics_history`` of them."""
        return list(self._s.checkpoint_metrics)

    @property
    def checkpoints_completed(self) -> dict[CheckpointKind, int]:
        """How many checkpoints this runtime completed, by kind (every one)."""
        return dict(self._s.checkpoints_completed)

    @property
    def sink_metrics(self) -> SinkMetricsRecorder:
        """Per sink and checkpoint: transactions committed, already committed and aborted,
        lingering aborted, records, bytes, commit ms (``per_checkpoint()``, ``totals()``)."""
        return self._s.sink_metrics

    @property
    def committer_metrics(self) -> CommitterMetrics:
        """Committer counters summed over every run of this runtime."""
        ms = [*self._s.past_committer_metrics, self._s.committer.metrics]
        return CommitterMetrics(
            committed=sum(m.committed for m in ms),
            already_committed=sum(m.already_committed for m in ms),
            aborted=sum(m.aborted for m in ms),
            lost_ignored=sum(m.lost_ignored for m in ms),
            retries=sum(m.retries for m in ms),
            commit_time_ms=sum(m.commit_time_ms for m in ms),
        )

    def check_canceled(self) -> None:
        """Raise :class:`JobCanceledError` if a cancel was requested."""
        self._s.check_canceled()

    # -- restore ----------------------------------------------------------------------------------

    def restore(
        self, savepoint_location: str | None = None, *, held: Mapping[str, Sequence[bytes]] | None = None
    ) -> RestoreResult:
        """Start (CREATED) or finish a restart (RESTARTING): restore, recover, clean up, RUNNING.

        Loads ``savepoint_location`` or the latest checkpoint by listing; ``recover_and_commit``
        its committables (fully finished sinks skipped); ``abort_lingering`` per live sink with
        everything a retained checkpoint or savepoint references held (:mod:`~twophase.coordinator.recovery`).

        Args:
            savepoint_location: resume from this savepoint instead of the latest checkpoint.
            held: sink name → encoded committables pre-committed for an epoch that is about to be
                acknowledged but is in no checkpoint yet (the Data Source facade, whose tasks
                write before the driver restores); the lingering cleanup keeps them.

        Raises:
            IllegalTransitionError: not CREATED or RESTARTING.
            CorruptCheckpointError: the checkpoint is unreadable (no silent fallback).
            JobError: the checkpoint holds a sink this job does not have.
            TransactionLostError: a committable is LOST (unless ``ignore_lost_on_recovery``).
            CommitFailedError: a re-commit failed.
        """
        s = self._s
        with s.lock:
            state = s.lifecycle.state
            if state is JobState.CREATED:
                done_transition = JobTransition.START
            elif state is JobState.RESTARTING:
                done_transition = JobTransition.RESTARTED
            else:
                raise IllegalTransitionError(f"job {self.job_id}", state.value, "restore")
            s.check_canceled()
            try:
                with s.lingering.holding_for_restore(held):
                    result = restore_run(s, savepoint_location)
            except Exception as e:
                if s.lifecycle.state is JobState.RESTARTING and not s.cancel_requested.is_set():
                    s.fail(e)
                raise
            s.transition(done_transition)
            return result

    # -- epochs -----------------------------------------------------------------------------------

    def replay_check(self, source_position: JsonObject) -> bool:
        """Step 1: if the latest completed checkpoint covers ``source_position`` (the engine replays
        an epoch it had not marked done), make sure its committables are committed and return True:
        the caller must skip writing. Otherwise return False.

        Raises:
            JobError: the position belongs to another engine query (see :func:`position_covers`).
            IllegalTransitionError: not RUNNING.
        """
        s = self._s
        with s.lock:
            s.lifecycle.require(JobState.RUNNING, action="replay_check")
            last = s.checkpoints.last
            if last is None or not position_covers(last.source_position, source_position):
                return False
            with s.guard():
                s.coordinator().notify_checkpoint_complete(last.checkpoint_id)
                s.drain_commits()
            log_event(
                log,
                logging.INFO,
                "replayed epoch skipped",
                job=self.job_id,
                checkpoint=last.checkpoint_id,
                position=dict(source_position),
            )
            return True

    def begin_epoch(
        self,
        num_partitions: int,
        source_position: JsonObject | None = None,
        *,
        checkpoint_id: int | None = None,
    ) -> Epoch:
        """Step 2: trigger the epoch's checkpoint; every live sink expects one acknowledgement per
        partition ``0 <= p < num_partitions``. In-progress state of partitions beyond
        ``num_partitions`` (rescale) is handed over: finished on the driver into this checkpoint.

        ``checkpoint_id`` forces the id (ids then follow the engine's batch ids, as the Data Source
        facade needs, whose tasks name their transactions before the driver triggers); it must be
        at least the next id.

        Raises:
            JobError: ``checkpoint_id`` is below the next id (storage holds newer checkpoints, a
                sink records a newer one as committed, or this run used it).
            IllegalTransitionError: not RUNNING; CheckpointLimitError: too many pending checkpoints.
            ConfigError: ``num_partitions`` < 1.
            CommitFailedError, TransactionLostError: an earlier asynchronous commit failed.
        """
        return open_epoch(self._s, num_partitions, source_position, checkpoint_id)

    def complete_epoch(
        self, epoch: Epoch, *, notify: bool = True, abort_lingering: bool | None = None
    ) -> CheckpointMetrics:
        """Steps 5–7: persist the epoch's checkpoint atomically, then (``notify``) commit every
        pending transaction ≤ it, then abort what failed and speculative attempts left.

        Args:
            epoch: from :meth:`begin_epoch`, fully acknowledged.
            notify: False leaves the notification to a later :meth:`notify_checkpoint_complete`
                (the harness scripts late, lost and out-of-order notifications this way).
            abort_lingering: override ``RuntimeConfig.abort_lingering_each_epoch``.

        Raises:
            IllegalTransitionError: missing acknowledgements, or an older checkpoint is pending.
            CheckpointStorageError: publishing failed (the checkpoint is aborted; the job fails).
            TransactionLostError, CommitFailedError: a commit failed (the job fails).
        """
        s = self._s
        with s.lock:
            s.lifecycle.require(JobState.RUNNING, action="complete_epoch")
            s.check_canceled()
            with s.guard():
                return s.complete(epoch.checkpoint_id, notify=notify, abort_lingering=abort_lingering)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> NotifyResult:
        """Deliver a (late, repeated or out-of-order) notification: commit every pending
        transaction ≤ ``checkpoint_id``. A no-op for what a newer notification committed.

        Raises:
            IllegalTransitionError: the checkpoint never completed.
            TransactionLostError, CommitFailedError: a commit failed (the job fails).
        """
        s = self._s
        with s.lock:
            s.check_canceled()
            with s.guard():
                return s.coordinator().notify_checkpoint_complete(checkpoint_id)

    def await_commits(self, timeout_s: float | None = None) -> None:
        """Wait until every asynchronous commit submitted so far has run (a no-op with synchronous
        commit), then forget the confirmed transactions.

        Raises:
            TransactionLostError, CommitFailedError: a commit failed, or the wait timed out.
        """
        s = self._s
        with s.lock, s.guard():
            s.committer.drain(timeout_s)
            s.coordinator().confirm_commits()

    def abort_epoch(self, epoch: Epoch, reason: str) -> list[int]:
        """Abort the epoch's checkpoint (and newer pending ones) and their pre-committed
        transactions; the job keeps its state (call :meth:`failover` to restart). Returns the
        aborted ids.

        Raises:
            IllegalTransitionError: the checkpoint already completed.
        """
        with self._s.lock:
            return self._s.coordinator().abort_checkpoint(epoch.checkpoint_id, reason)

    def abort_epoch_if_pending(self, epoch: Epoch, reason: str) -> list[int]:
        """:meth:`abort_epoch` when the job is RUNNING and the checkpoint still pending; otherwise
        nothing (a failure already aborted it, or it completed). Never raises."""
        s = self._s
        with s.lock:
            coord = s.coord
            if self.state is not JobState.RUNNING or coord is None or s.abandoned:
                return []
            if epoch.checkpoint_id not in {p.checkpoint_id for p in coord.pending_checkpoints}:
                return []
            try:
                return coord.abort_checkpoint(epoch.checkpoint_id, reason)
            except Exception:
                log_event(log, logging.ERROR, "aborting the epoch failed", exc_info=True, job=self.job_id)
                return []

    # -- finish / stop / cancel -------------------------------------------------------------------

    def finish(self, source_position: JsonObject | None = None) -> CheckpointMetrics | None:
        """End of input: every live subtask finishes, then ONE final checkpoint for all sinks
        (FLIP-147), commit, close; FINISHED. Returns the final checkpoint's metrics, or ``None``
        when the job was restored from a final checkpoint and nothing ran since (nothing to do).

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            plus the errors of :meth:`complete_epoch` (the job fails).
        """
        return finish_job(self._s, source_position)

    def stop_with_savepoint(self, drain: bool) -> CheckpointRef:
        """Stop with a savepoint (between epochs).

        ``drain=True``: like :meth:`finish`, the final checkpoint kept as a savepoint; FINISHED.
        ``drain=False``: a savepoint holding the in-progress state without finishing it, pending
        commits done, subtasks closed; SUSPENDED. Resume with ``restore(ref.location)`` in a new
        runtime: the same in-progress transactions continue.

        Returns:
            the savepoint's ref (``location`` to resume from).

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            JobCanceledError: a cancel took over.
        """
        return stop_with_savepoint(self._s, drain)

    def stop(self) -> CheckpointRef:
        """Plain stop ("reinforce job stop semantic"): a final *retained checkpoint* (not a
        savepoint) so that a resume replays nothing; no drain; SUSPENDED. A :meth:`cancel` from
        another thread while it hangs takes effect.

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            JobCanceledError: a cancel took over.
        """
        return stop_job(self._s)

    def cancel(self) -> None:
        """Cancel now: abort pending checkpoints and every open or pre-committed (not durable)
        transaction, keep (RETAIN) or delete (DELETE) completed checkpoints; CANCELED.

        Safe to call from another thread while an action runs or hangs: retries stop at once and
        the action raises :class:`JobCanceledError`; the cleanup runs when it has returned.

        Raises:
            IllegalTransitionError: the job is already FINISHED, SUSPENDED, CANCELED or FAILED.
            JobError: canceled, but a cleanup step failed (logged; the job is CANCELED anyway).
        """
        cancel_job(self._s)

    # -- failure / restart ------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Report a failure of the execution (e.g. a failed task or query): the job goes FAILING,
        pending checkpoints are aborted and subtasks closed. Checkpoints are kept."""
        with self._s.lock:
            self._s.fail(error)

    def failover(self, error: BaseException) -> RestoreResult:
        """Fail (if not failing yet), then restart per the restart strategy: wait, restore, RUNNING.

        Raises:
            JobError: the restart strategy is exhausted; the job is FAILED.
            DriverFencedError: ``error`` was: a fenced driver is never restarted; the job is FAILED.
            JobCanceledError: the job was canceled.
            plus the errors of :meth:`restore` (the job is FAILING again: call ``failover`` again).
        """
        s = self._s
        with s.lock:
            s.check_canceled()
            s.fail(error)
            s.lifecycle.require(JobState.FAILING, action="failover")
            if isinstance(error, DriverFencedError):  # the job belongs to the newer driver now
                s.lifecycle.transition(JobTransition.GIVE_UP)
                raise error
            delay = s.restarts.try_restart()
            if delay is None:
                s.lifecycle.transition(JobTransition.GIVE_UP)
                raise JobError(
                    f"job {self.job_id} failed: restart strategy exhausted after "
                    f"{len(s.restarts.restarts)} restarts; last error: {error_summary(error)}"
                ) from error
            s.lifecycle.transition(JobTransition.RESTART)
            log_event(
                log,
                logging.WARNING,
                "job restarting",
                job=self.job_id,
                delay_s=delay,
                restarts=len(s.restarts.restarts),
            )
            self._sleep(delay)
            return self.restore()

    def run_with_restarts(self, body: Callable[[JobRuntime], R], savepoint_location: str | None = None) -> R:
        """Run ``body(self)`` under the restart strategy (see
        :func:`~twophase.coordinator.restart_loop.run_with_restarts`)."""
        return run_with_restarts(self, body, savepoint_location=savepoint_location, sleep=self._sleep)

    def abandon(self) -> None:
        """Test hook: simulate the driver process dying. Nothing is closed, aborted or committed;
        this runtime refuses further use. Restore in a new runtime from the same storage."""
        self._s.abandon()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()

    def close(self) -> None:
        """Release driver-side resources: the committer thread, the sinks' clients, the metrics port."""
        self._s.committer.shutdown(wait=True)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        for sink in self._s.sinks.values():
            try:
                sink.close()
            except Exception:
                log_event(
                    log, logging.ERROR, "sink close failed", exc_info=True, job=self.job_id, sink=sink.name
                )
