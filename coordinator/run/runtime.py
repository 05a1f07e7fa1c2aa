"""The job runtime: what an execution layer (Spark, the test harness) drives, epoch by epoch.

Engine-agnostic (no Spark import). It ties together the job lifecycle
(:mod:`~twophase.coordinator.state.job_lifecycle`), the checkpoint coordinator, the committer operator,
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

The runtime is the job's state machine: each action below names its transitions and checks
them, holds the lock, and fails the job when a step raises. The steps are objects, each built
with only the collaborators it uses (issue #42 item 5): each restore starts a
:class:`~twophase.coordinator.run.run.Run` (its coordinator, committer and lingering cleanup, and
the steps built on them, :mod:`~twophase.coordinator.run.run_steps`) through a
:class:`~twophase.coordinator.run.restore.Restore`; epochs open through an
:class:`~twophase.coordinator.run.epoch.EpochOpener`; the endings are
:mod:`~twophase.coordinator.run.job_endings`' final checkpoint, suspend checkpoint and cancel cleanup.
What outlives a run is the runtime's: the lifecycle, the restarts, the completed checkpoints,
the metrics.

A cancel from another thread while an action hangs (e.g. a commit retrying) takes effect: the
retry stops, the action raises :class:`JobCanceledError`. Checkpoints are always kept on failure.
Errors: an ``IllegalTransitionError`` (a caller's protocol mistake) leaves the job as it was;
  any other error of an action moves the job to FAILING (pending checkpoints aborted, subtasks
  closed). Then :meth:`JobRuntime.failover` or
  :func:`~twophase.coordinator.run.restart_loop.run_with_restarts`
  restarts or gives up (FAILED).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import NotifyResult
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.checkpoint.driver_fence import DriverFence
from twophase.coordinator.commit.commit_policy import CommitterMetrics
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.epoch import Epoch, EpochOpener, PendingCommitLimit, position_covers
from twophase.coordinator.run.fanout import sink_names_unique
from twophase.coordinator.run.job_endings import CancelCleanup, FinalCheckpoint, SuspendCheckpoint
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS
from twophase.coordinator.run.lingering_cleanup import LingeringCleanup
from twophase.coordinator.run.recovery import RestoreResult
from twophase.coordinator.run.restart import RestartTracker
from twophase.coordinator.run.restart_loop import JobCanceledError, run_with_restarts
from twophase.coordinator.run.restore import Restore
from twophase.coordinator.run.run import Run, RunSettings
from twophase.coordinator.run.run_steps import CheckpointHistory
from twophase.coordinator.run.runtime_config import CleanupMode, RuntimeConfig
from twophase.coordinator.state.clock import Clock, system_clock_ms
from twophase.coordinator.state.faults import fault_point
from twophase.coordinator.state.job_lifecycle import JobLifecycle, JobState, JobTransition
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.state.metrics import CheckpointMetrics, SinkMetricsRecorder
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

if TYPE_CHECKING:  # prometheus-client is the metrics extra's: imported only for the port
    from twophase.coordinator.run.prometheus_metrics import MetricsEndpoint

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
        fault: fault-point hook (default :func:`twophase.coordinator.state.faults.fault_point`, driven by
            ``TWOPHASE_FAULT``); the harness injects exceptions through it.
        fence_drivers: claim a driver epoch at the first restore and stop once a newer driver
            claims the job (:mod:`~twophase.coordinator.checkpoint.driver_fence`). Off for a runtime that
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
        self._sinks = {s.name: s for s in sinks}
        self._storage = storage
        self._clock = clock
        self._commit_sleep = commit_sleep
        self._fault = fault
        self._fence = DriverFence(job_id, storage, clock) if fence_drivers else None
        self._lifecycle = JobLifecycle(job_id)
        self._restarts = RestartTracker(self.config.restart, clock)
        self._lock = threading.RLock()  # callers of the run's steps hold it
        self._cancel_requested = threading.Event()  # read and set without the lock
        self._sink_metrics = SinkMetricsRecorder(self.config.metrics_history)
        self._checkpoints = CompletedCheckpointStore(job_id, storage)
        self._history = CheckpointHistory(self.config.metrics_history)
        self._past_committer_metrics: list[CommitterMetrics] = []
        self._run: Run | None = None
        self._abandoned = False
        self.metrics_endpoint: MetricsEndpoint | None = None  # RuntimeConfig.metrics_port
        if self.config.metrics_port is not None:
            # imported here: prometheus-client is the metrics extra's (RuntimeConfig checked it)
            from twophase.coordinator.run.prometheus_metrics import MetricsEndpoint, RuntimeCollector

            collector = RuntimeCollector(
                job_id,
                self._sink_metrics,
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
        return self._sinks

    @property
    def storage(self) -> CheckpointStorage:
        """The job's checkpoint storage."""
        return self._storage

    @property
    def clock(self) -> Clock:
        """The runtime's ms clock."""
        return self._clock

    @property
    def lifecycle(self) -> JobLifecycle:
        """The job's lifecycle state machine."""
        return self._lifecycle

    @property
    def restarts(self) -> RestartTracker:
        """The restart strategy's record of this job's restarts."""
        return self._restarts

    @property
    def state(self) -> JobState:
        """The job's state."""
        return self._lifecycle.state

    @property
    def driver_epoch(self) -> int | None:
        """This driver's epoch of the job (claimed by the first restore; ``None`` before it).
        A newer driver's claim fences this one (:class:`~twophase.sinks.errors.DriverFencedError`)."""
        return None if self._fence is None else self._fence.epoch

    @property
    def coordinator(self) -> CheckpointCoordinator:
        """The current run's checkpoint coordinator (after :meth:`restore`).

        Raises:
            IllegalTransitionError: before :meth:`restore`.
        """
        return self._current().coordinator()

    @property
    def run(self) -> Run | None:
        """The current run (``None`` before the first restore): for tests and tools that look
        inside it (its committer, its steps)."""
        return self._run

    @property
    def latest_checkpoint(self) -> CheckpointMetadata | None:
        """The newest checkpoint completed in this run, or the restored one."""
        return self._checkpoints.last

    @property
    def checkpoint_metrics(self) -> list[CheckpointMetrics]:
        """Metrics of the checkpoints completed by this runtime, oldest first: the newest
        ``RuntimeConfig.metrics_history`` of them."""
        return self._history.metrics

    @property
    def checkpoints_completed(self) -> dict[CheckpointKind, int]:
        """How many checkpoints this runtime completed, by kind (every one)."""
        return self._history.completed

    @property
    def sink_metrics(self) -> SinkMetricsRecorder:
        """Per sink and checkpoint: transactions committed, already committed and aborted,
        lingering aborted, records, bytes, commit ms (``per_checkpoint()``, ``totals()``)."""
        return self._sink_metrics

    @property
    def committer_metrics(self) -> CommitterMetrics:
        """Committer counters summed over every run of this runtime."""
        ms = [*self._past_committer_metrics, *([self._run.committer.metrics] if self._run else [])]
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
        if self._cancel_requested.is_set():
            raise JobCanceledError(f"job {self.job_id} was canceled")

    # -- restore ----------------------------------------------------------------------------------

    def restore(
        self, savepoint_location: str | None = None, *, held: Mapping[str, Sequence[bytes]] | None = None
    ) -> RestoreResult:
        """Start (CREATED) or finish a restart (RESTARTING): restore, recover, clean up, RUNNING.

        Loads ``savepoint_location`` or the latest checkpoint by listing; ``recover_and_commit``
        its committables (fully finished sinks skipped); ``abort_lingering`` per live sink with
        everything a retained checkpoint or savepoint references held
        (:mod:`~twophase.coordinator.run.recovery`).

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
        with self._lock:
            state = self._lifecycle.state
            if state is JobState.CREATED:
                done_transition = JobTransition.START
            elif state is JobState.RESTARTING:
                done_transition = JobTransition.RESTARTED
            else:
                raise IllegalTransitionError(f"job {self.job_id}", state.value, "restore")
            self.check_canceled()
            try:
                # before reading anything: a restore whose listing raced a stale driver's publish is
                # fenced off by it once this claim is visible (issue #43)
                if self._fence is not None:
                    self._fence.claim()
                run = self._start_run()
                restore = Restore(
                    self.job_id,
                    self._sinks,
                    self._storage,
                    self._checkpoints,
                    run.committer,
                    run.lingering,
                    self.config.checkpoint,
                    self._clock,
                    self._fault,
                    self._fence,
                )
                with run.lingering.holding_for_restore(held):
                    recovered = restore.recover(savepoint_location)
                    run.started(recovered.id_floor, recovered.coord)
                    result = restore.clean_up(recovered)
            except Exception as e:
                if self._lifecycle.state is JobState.RESTARTING and not self._cancel_requested.is_set():
                    self._fail(e)
                raise
            self._transition(done_transition)
            return result

    def _start_run(self) -> Run:
        """A restore starts a new run: the previous run's committer is retired (its metrics kept),
        the new run gets its own committer and lingering cleanup."""
        previous = self._run
        if previous is not None:
            self._past_committer_metrics.append(previous.committer.metrics)
            previous.committer.shutdown(wait=False)
        self._run = Run(
            self.job_id,
            self._sinks,
            self._lifecycle,
            self._new_committer(),
            self._checkpoints,
            LingeringCleanup(self.job_id, self._checkpoints, self._sink_metrics, self._fence),
            self._history,
            RunSettings(self.config.commit_drain_timeout_s, self.config.abort_lingering_each_epoch),
            self._fault,
        )
        return self._run

    def _new_committer(self) -> CommitterOperator:
        """A committer operator with the job's commit policy, clock, backoff sleep and faults."""
        return CommitterOperator(
            self.job_id,
            self._sinks,
            self.config.commit,
            clock=self._clock,
            sleep=self._commit_sleep,
            fault=self._fault,
            sink_metrics=self._sink_metrics,
        )

    @contextmanager
    def _spare_committer(self) -> Iterator[CommitterOperator]:
        """A committer beside the run's (a cancel's last commits, after the run's own was shut
        down); its metrics are kept with the retired committers' when the block ends."""
        committer = self._new_committer()
        try:
            yield committer
        finally:
            self._past_committer_metrics.append(committer.metrics)
            committer.shutdown(wait=False)

    def _current(self) -> Run:
        """The current run, started by a restore.

        Raises:
            JobError: the runtime was abandoned (a simulated crash).
            IllegalTransitionError: used before restore().
        """
        if self._abandoned:
            raise JobError(f"job {self.job_id}: this runtime was abandoned (simulated crash)")
        run = self._run
        if run is None:
            raise IllegalTransitionError(
                f"job {self.job_id}", self._lifecycle.state.value, "use before restore()"
            )
        run.coordinator()  # raises until the run's restore made its coordinator
        return run

    # -- the job's transitions and the guard of every action --------------------------------------

    def _transition(self, t: JobTransition) -> None:
        """A job transition, unless a cancel took over."""
        self.check_canceled()
        self._lifecycle.transition(t)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Run an action: a protocol mistake propagates as is; any other error fails the job."""
        try:
            yield
        except (IllegalTransitionError, JobCanceledError):
            raise
        except Exception as e:
            if self._cancel_requested.is_set():
                raise JobCanceledError(f"job {self.job_id} was canceled during the action") from e
            self._fail(e)
            raise

    def _fail(self, error: BaseException) -> None:
        """FAILING: the run aborts pending checkpoints and closes its subtasks (aborting what is
        not durable)."""
        if self._cancel_requested.is_set() or self._abandoned:
            return
        if self._lifecycle.state is JobState.FAILING:
            return  # failed already (the run closed when it entered FAILING): one failure, one line
        if not self._lifecycle.can(JobTransition.FAIL):
            return
        self._lifecycle.transition(JobTransition.FAIL)
        log_event(log, logging.ERROR, "job failing", job=self.job_id, error=repr(error))
        if self._run is not None:
            self._run.fail(error)

    def _require_no_pending(self, coord: CheckpointCoordinator, action: str) -> None:
        """Raise IllegalTransitionError if checkpoints are pending (endings need none)."""
        pending = [p.checkpoint_id for p in coord.pending_checkpoints]
        if pending:
            raise IllegalTransitionError(
                f"job {self.job_id}",
                self._lifecycle.state.value,
                f"{action} with pending checkpoints {pending} (complete or abort them first)",
            )

    # -- epochs -----------------------------------------------------------------------------------

    def replay_check(self, source_position: JsonObject) -> bool:
        """Step 1: if the latest completed checkpoint covers ``source_position`` (the engine replays
        an epoch it had not marked done), make sure its committables are committed and return True:
        the caller must skip writing. Otherwise return False.

        Raises:
            JobError: the position belongs to another engine query (see :func:`position_covers`).
            IllegalTransitionError: not RUNNING.
        """
        with self._lock:
            self._lifecycle.require(JobState.RUNNING, action="replay_check")
            last = self._checkpoints.last
            if last is None or not position_covers(last.source_position, source_position):
                return False
            with self._guard():
                run = self._current()
                run.coordinator().notify_checkpoint_complete(last.checkpoint_id)
                run.commits.drain()
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
        if num_partitions < 1:
            raise ConfigError(f"an epoch needs at least one partition, got {num_partitions}")
        with self._lock:
            self._lifecycle.require(JobState.RUNNING, action="begin_epoch")
            self.check_canceled()
            opener = self._epoch_opener()
            with self._guard():
                return opener.open(num_partitions, source_position, checkpoint_id)

    def _epoch_opener(self) -> EpochOpener:
        """The current run's epoch opener, built with what it uses."""
        run = self._current()
        coord = run.coordinator()
        limit = PendingCommitLimit(
            self.job_id,
            self._sinks,
            coord,
            run.commits,
            self._checkpoints,
            self.config.commit_drain_timeout_s,
            self.config.commit,
        )
        return EpochOpener(
            self.job_id,
            self._sinks,
            run.coordinator,
            run.progress,
            run.commits,
            limit,
            run.committer,
            self._lock,
        )

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
        with self._lock:
            self._lifecycle.require(JobState.RUNNING, action="complete_epoch")
            self.check_canceled()
            with self._guard():
                completion = self._current().completion
                return completion.complete(
                    epoch.checkpoint_id, notify=notify, abort_lingering=abort_lingering
                )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> NotifyResult:
        """Deliver a (late, repeated or out-of-order) notification: commit every pending
        transaction ≤ ``checkpoint_id``. A no-op for what a newer notification committed.

        Raises:
            IllegalTransitionError: the checkpoint never completed.
            TransactionLostError, CommitFailedError: a commit failed (the job fails).
        """
        with self._lock:
            self.check_canceled()
            with self._guard():
                return self._current().coordinator().notify_checkpoint_complete(checkpoint_id)

    def await_commits(self, timeout_s: float | None = None) -> None:
        """Wait until every asynchronous commit submitted so far has run (a no-op with synchronous
        commit), then forget the confirmed transactions.

        Raises:
            TransactionLostError, CommitFailedError: a commit failed, or the wait timed out.
        """
        with self._lock, self._guard():
            self._current().commits.await_all(timeout_s)

    def abort_epoch(self, epoch: Epoch, reason: str) -> list[int]:
        """Abort the epoch's checkpoint (and newer pending ones) and their pre-committed
        transactions; the job keeps its state (call :meth:`failover` to restart). Returns the
        aborted ids.

        Raises:
            IllegalTransitionError: the checkpoint already completed.
        """
        with self._lock:
            return self._current().coordinator().abort_checkpoint(epoch.checkpoint_id, reason)

    def abort_epoch_if_pending(self, epoch: Epoch, reason: str) -> list[int]:
        """:meth:`abort_epoch` when the job is RUNNING and the checkpoint still pending; otherwise
        nothing (a failure already aborted it, or it completed). Never raises."""
        with self._lock:
            coord = None if self._run is None else self._run.coord
            if self.state is not JobState.RUNNING or coord is None or self._abandoned:
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
        with self._lock:
            self._lifecycle.require(JobState.RUNNING, action="finish")
            run = self._current()
            self._require_no_pending(run.coordinator(), "finish")
            self._transition(JobTransition.FINISH)
            with self._guard():
                self._fault("during_finish")
                run.commits.housekeeping()
                restored = self._checkpoints.restored
                metrics = None
                if restored is not None and restored.end_of_input and run.progress.epochs_since_restore == 0:
                    log_event(
                        log,
                        logging.INFO,
                        "job restored from a final checkpoint: nothing to finish",
                        job=self.job_id,
                        checkpoint=restored.checkpoint_id,
                    )
                else:
                    final = self._final_checkpoint()
                    metrics = final.take(CheckpointKind.FINAL, source_position, "during_final_checkpoint")
                self._transition(JobTransition.FINISHED)
                return metrics

    def _final_checkpoint(self) -> FinalCheckpoint:
        """The current run's final checkpoint, built with what it uses."""
        run = self._current()
        return FinalCheckpoint(
            self.job_id,
            self._sinks,
            run.coordinator(),
            self._checkpoints,
            run.progress,
            run.completion,
            run.commits,
            run.sweep,
            self._fault,
        )

    def _suspend_checkpoint(self) -> SuspendCheckpoint:
        """The current run's suspend checkpoint, built with what it uses."""
        run = self._current()
        return SuspendCheckpoint(
            run.coordinator(),
            self._checkpoints,
            run.progress,
            run.completion,
            run.commits,
            run.sweep,
            self._fault,
        )

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
        with self._lock:
            self._lifecycle.require(JobState.RUNNING, action="stop_with_savepoint")
            run = self._current()
            self._require_no_pending(run.coordinator(), "stop_with_savepoint")
            self._transition(JobTransition.STOP)
            with self._guard():
                run.commits.housekeeping()
                if drain:
                    self._final_checkpoint().take(
                        CheckpointKind.SAVEPOINT, None, "during_stop_with_savepoint"
                    )
                    ref = run.coordinator().completed[-1].ref
                    self._transition(JobTransition.STOPPED_DRAINED)
                else:
                    ref = self._suspend_checkpoint().take(
                        CheckpointKind.SAVEPOINT, "during_stop_with_savepoint"
                    )
                    self._transition(JobTransition.SUSPEND)
                return ref

    def stop(self) -> CheckpointRef:
        """Plain stop ("reinforce job stop semantic"): a final *retained checkpoint* (not a
        savepoint) so that a resume replays nothing; no drain; SUSPENDED. A :meth:`cancel` from
        another thread while it hangs takes effect.

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            JobCanceledError: a cancel took over.
        """
        with self._lock:
            self._lifecycle.require(JobState.RUNNING, action="stop")
            run = self._current()
            self._require_no_pending(run.coordinator(), "stop")
            self._transition(JobTransition.STOP)
            with self._guard():
                run.commits.housekeeping()
                ref = self._suspend_checkpoint().take(CheckpointKind.CHECKPOINT, "during_stop_with_savepoint")
                self._transition(JobTransition.SUSPEND)
                return ref

    def cancel(self) -> None:
        """Cancel now: abort pending checkpoints and every open or pre-committed (not durable)
        transaction, keep (RETAIN) or delete (DELETE) completed checkpoints; CANCELED.

        Safe to call from another thread while an action runs or hangs: retries stop at once and
        the action raises :class:`JobCanceledError`; the cleanup runs when it has returned.

        Raises:
            IllegalTransitionError: the job is already FINISHED, SUSPENDED, CANCELED or FAILED.
            JobError: canceled, but a cleanup step failed (logged; the job is CANCELED anyway).
        """
        self._lifecycle.transition(JobTransition.CANCEL)
        self._cancel_requested.set()
        if self._run is not None:
            self._run.committer.cancel()
        with self._lock:
            errors: list[BaseException] = []
            self._fault("during_cancel")
            run = self._run
            coord = None if run is None else run.coord
            if coord is not None:
                try:
                    coord.close_subtasks("canceled")
                except Exception as e:
                    log_event(
                        log, logging.ERROR, "cancel: closing subtasks failed", exc_info=True, job=self.job_id
                    )
                    errors.append(e)
            if run is not None:
                run.committer.shutdown(wait=False)
            cleanup = CancelCleanup(
                self.job_id,
                self._sinks,
                self._storage,
                self._checkpoints,
                coord,
                None if run is None else run.committer,
                None if run is None else run.lingering,
                self._spare_committer,
            )
            try:
                errors.extend(cleanup.run(delete=self.config.cancel_cleanup is CleanupMode.DELETE))
            except Exception as e:
                log_event(log, logging.ERROR, "cancel: cleanup failed", exc_info=True, job=self.job_id)
                errors.append(e)
            self._lifecycle.transition(JobTransition.CANCELED)
            if errors:
                raise JobError(
                    f"job {self.job_id} canceled, but cleanup failed ({len(errors)} failures, every other "
                    f"step done): {'; '.join(repr(e) for e in errors)}"
                ) from errors[0]

    # -- failure / restart ------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Report a failure of the execution (e.g. a failed task or query): the job goes FAILING,
        pending checkpoints are aborted and subtasks closed. Checkpoints are kept."""
        with self._lock:
            self._fail(error)

    def failover(self, error: BaseException) -> RestoreResult:
        """Fail (if not failing yet), then restart per the restart strategy: wait, restore, RUNNING.

        Raises:
            JobError: the restart strategy is exhausted; the job is FAILED.
            DriverFencedError: ``error`` was: a fenced driver is never restarted; the job is FAILED.
            JobCanceledError: the job was canceled.
            plus the errors of :meth:`restore` (the job is FAILING again: call ``failover`` again).
        """
        with self._lock:
            self.check_canceled()
            self._fail(error)
            self._lifecycle.require(JobState.FAILING, action="failover")
            if isinstance(error, DriverFencedError):  # the job belongs to the newer driver now
                self._lifecycle.transition(JobTransition.GIVE_UP)
                raise error
            delay = self._restarts.try_restart()
            if delay is None:
                self._lifecycle.transition(JobTransition.GIVE_UP)
                raise JobError(
                    f"job {self.job_id} failed: restart strategy exhausted after "
                    f"{len(self._restarts.restarts)} restarts; last error: {error_summary(error)}"
                ) from error
            self._lifecycle.transition(JobTransition.RESTART)
            log_event(
                log,
                logging.WARNING,
                "job restarting",
                job=self.job_id,
                delay_s=delay,
                restarts=len(self._restarts.restarts),
            )
            self._sleep(delay)
            return self.restore()

    def run_with_restarts(self, body: Callable[[JobRuntime], R], savepoint_location: str | None = None) -> R:
        """Run ``body(self)`` under the restart strategy (see
        :func:`~twophase.coordinator.run.restart_loop.run_with_restarts`)."""
        return run_with_restarts(self, body, savepoint_location=savepoint_location, sleep=self._sleep)

    def abandon(self) -> None:
        """Test hook: simulate the driver process dying. Nothing is closed, aborted or committed;
        this runtime refuses further use. Restore in a new runtime from the same storage."""
        self._abandoned = True
        if self._run is not None:
            self._run.abandon()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()

    def close(self) -> None:
        """Release driver-side resources: the committer thread, the sinks' clients, the metrics port."""
        if self._run is not None:
            self._run.committer.shutdown(wait=True)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        for sink in self._sinks.values():
            try:
                sink.close()
            except Exception:
                log_event(
                    log, logging.ERROR, "sink close failed", exc_info=True, job=self.job_id, sink=sink.name
                )
