"""One job runtime's run: what its restore, epochs and endings share.

:class:`RunState` holds the job's lifecycle and lock, the current run's checkpoint coordinator
and committer operator, and the concepts it is made of: the completed checkpoints
(:class:`~twophase.coordinator.completed_checkpoints.CompletedCheckpointStore`) and the lingering
cleanup (:class:`~twophase.coordinator.lingering_cleanup.LingeringCleanup`). It takes the steps
every part needs: guard an action (a protocol mistake propagates, any other error fails the job)
and complete a checkpoint (verify, persist, notify, abort lingering, metrics). ``JobRuntime`` is
its public face.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint_state import NotifyResult
from twophase.coordinator.clock import Clock
from twophase.coordinator.commit_policy import CommitterMetrics
from twophase.coordinator.committer_operator import CommitterOperator
from twophase.coordinator.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.driver_fence import DriverFence
from twophase.coordinator.id_floor import IdFloor
from twophase.coordinator.job_lifecycle import JobLifecycle, JobState, JobTransition
from twophase.coordinator.lingering_cleanup import LingeringCleanup
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.metrics import CheckpointMetrics, SinkMetricsRecorder
from twophase.coordinator.restart import RestartTracker
from twophase.coordinator.restart_loop import JobCanceledError
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import IllegalTransitionError, JobError
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from twophase.coordinator.runtime_config import RuntimeConfig

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


class RunState:
    """One job runtime's shared state (see the module docstring). Not thread-safe by itself:
    callers hold :attr:`lock`, except :meth:`check_canceled` and the cancel flag.

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        storage: the job's checkpoint storage.
        config: the runtime settings.
        clock: ms clock.
        commit_sleep: the committer's backoff sleep (``None``: interruptible by cancel).
        fault: the fault-point hook.
        fence: this driver's epoch of the job, or ``None`` when the runtime fences no driver.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        storage: CheckpointStorage,
        config: RuntimeConfig,
        clock: Clock,
        commit_sleep: Callable[[float], None] | None,
        fault: Callable[[str], None],
        fence: DriverFence | None = None,
    ) -> None:
        self.job_id = job_id
        self.sinks = dict(sinks)
        self.storage = storage
        self.config = config
        self.clock = clock
        self.commit_sleep = commit_sleep
        self.fault = fault
        self.lifecycle = JobLifecycle(job_id)
        self.restarts = RestartTracker(config.restart, clock)
        self.lock = threading.RLock()
        self.sink_metrics = SinkMetricsRecorder(config.metrics_history)
        self.cancel_requested = threading.Event()
        self._committer = self.new_committer()
        self.past_committer_metrics: list[CommitterMetrics] = []
        self._coord: CheckpointCoordinator | None = None
        self.checkpoints = CompletedCheckpointStore(job_id, storage)
        self.fence = fence
        self.lingering = LingeringCleanup(job_id, self.checkpoints, self.sink_metrics, self.fence)
        self._epochs_since_restore = 0
        self._max_triggered = 0
        self._id_floor = IdFloor()
        self._abandoned = False
        self.checkpoint_metrics: deque[CheckpointMetrics] = deque(maxlen=config.metrics_history)
        self.checkpoints_completed: Counter[CheckpointKind] = Counter()

    # -- what the run's transitions change (read-only to the other parts) ---------------------------

    @property
    def coord(self) -> CheckpointCoordinator | None:
        """The current run's checkpoint coordinator (``None`` before the first restore)."""
        return self._coord

    @property
    def committer(self) -> CommitterOperator:
        """The current run's committer operator."""
        return self._committer

    @property
    def id_floor(self) -> IdFloor:
        """What the last restore started checkpoint ids above (a refused id names it)."""
        return self._id_floor

    @property
    def max_triggered(self) -> int:
        """The newest checkpoint id this run triggered (0: none)."""
        return self._max_triggered

    @property
    def epochs_since_restore(self) -> int:
        """Epochs started since the last restore."""
        return self._epochs_since_restore

    @property
    def abandoned(self) -> bool:
        """True once the driver died (a simulated crash): this state refuses further use."""
        return self._abandoned

    # -- named transitions of the run --------------------------------------------------------------

    def begin_run(self, id_floor: IdFloor, coord: CheckpointCoordinator) -> None:
        """A restore starts a run: checkpoint ids start above ``id_floor``, ``coord`` handles them."""
        self._id_floor = id_floor
        self._coord = coord

    def restored_from(self, meta: CheckpointMetadata | None, location: str | None) -> None:
        """The run's restore finished from ``meta`` at ``location`` (``None``: a fresh start): it
        is the last completed checkpoint, and no epoch ran since."""
        self.checkpoints.restored_from(meta, location)
        self._epochs_since_restore = 0

    def triggered(self, checkpoint_id: int) -> None:
        """A checkpoint was triggered (the newest id this run used)."""
        self._max_triggered = checkpoint_id

    def epoch_started(self) -> None:
        """An epoch's checkpoint was triggered and its in-progress state handed over."""
        self._epochs_since_restore += 1

    def abandon(self) -> None:
        """The driver dies (a simulated crash): nothing is closed, aborted or committed, this
        state refuses further use, the committer thread stops."""
        self._abandoned = True
        self._committer.shutdown(wait=False)

    def new_committer(self) -> CommitterOperator:
        """A committer operator with the job's commit policy, clock, backoff sleep and faults."""
        return CommitterOperator(
            self.job_id,
            self.sinks,
            self.config.commit,
            clock=self.clock,
            sleep=self.commit_sleep,
            fault=self.fault,
            sink_metrics=self.sink_metrics,
        )

    @contextmanager
    def spare_committer(self) -> Iterator[CommitterOperator]:
        """A committer beside the run's (a cancel's last commits, after the run's own was shut
        down); its metrics are kept with the retired committers' when the block ends."""
        committer = self.new_committer()
        try:
            yield committer
        finally:
            self.past_committer_metrics.append(committer.metrics)
            committer.shutdown(wait=False)

    def replace_committer(self) -> None:
        """Retire the committer of an earlier run (its metrics kept) and start a fresh one."""
        self.past_committer_metrics.append(self._committer.metrics)
        self._committer.shutdown(wait=False)
        self._committer = self.new_committer()

    def coordinator(self) -> CheckpointCoordinator:
        """The current run's coordinator.

        Raises:
            JobError: the runtime was abandoned (a simulated crash).
            IllegalTransitionError: used before restore().
        """
        if self._abandoned:
            raise JobError(f"job {self.job_id}: this runtime was abandoned (simulated crash)")
        if self._coord is None:
            raise IllegalTransitionError(
                f"job {self.job_id}", self.lifecycle.state.value, "use before restore()"
            )
        return self._coord

    def check_canceled(self) -> None:
        """Raise :class:`JobCanceledError` if a cancel was requested."""
        if self.cancel_requested.is_set():
            raise JobCanceledError(f"job {self.job_id} was canceled")

    def transition(self, t: JobTransition) -> None:
        """A job transition, unless a cancel took over."""
        self.check_canceled()
        self.lifecycle.transition(t)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Run an action: a protocol mistake propagates as is; any other error fails the job."""
        try:
            yield
        except (IllegalTransitionError, JobCanceledError):
            raise
        except Exception as e:
            if self.cancel_requested.is_set():
                raise JobCanceledError(f"job {self.job_id} was canceled during the action") from e
            self.fail(e)
            raise

    def fail(self, error: BaseException) -> None:
        """FAILING: abort pending checkpoints, close subtasks (aborting what is not durable)."""
        if self.cancel_requested.is_set() or self._abandoned:
            return
        if self.lifecycle.state is not JobState.FAILING:
            if not self.lifecycle.can(JobTransition.FAIL):
                return
            self.lifecycle.transition(JobTransition.FAIL)
        log_event(log, logging.ERROR, "job failing", job=self.job_id, error=repr(error))
        if self._coord is not None:
            try:
                self._coord.close_subtasks(f"failure: {error!r}")
            except Exception:  # cleanup is best effort; lingering cleanup on restore finishes it
                log_event(log, logging.ERROR, "closing subtasks after a failure failed", exc_info=True)
        self._committer.shutdown(wait=False)

    def housekeeping(self) -> None:
        """Before an action: surface an async commit error, forget confirmed commits, time out
        stale checkpoints, warn about transactions near their timeout."""
        coord = self.coordinator()
        self._committer.raise_if_failed()
        coord.confirm_commits()
        self.mark_committed_if_done()
        coord.check_timeouts()
        self._committer.ages.check(coord.uncommitted_transactions())

    def mark_committed_if_done(self) -> None:
        """Write the latest checkpoint's committed marker once the run confirmed every commit it
        holds (:meth:`CompletedCheckpointStore.mark_committed_if_done`; usually the thread that
        landed the commit wrote it already, ``CheckpointCoordinator._marker_for``)."""
        if self._coord is not None:
            self.checkpoints.mark_committed_if_done(self._coord.uncommitted_transactions())

    # -- lingering --------------------------------------------------------------------------------

    def abort_lingering_live(self, up_to: int, *, routine: bool = False) -> int:
        """Lingering cleanup (:meth:`LingeringCleanup.abort`) for every live sink; returns the total.
        ``routine``: the cleanup after an epoch, which a sink may put off; every end of a run calls
        this without it, so that nothing it put off outlives the run."""
        coord = self.coordinator()
        return sum(
            self.lingering.abort(self.sinks[n], up_to, coord, routine=routine) for n in coord.live_sinks()
        )

    # -- completing a checkpoint ------------------------------------------------------------------

    def complete(
        self, checkpoint_id: int, *, notify: bool, abort_lingering: bool | None
    ) -> CheckpointMetrics:
        """Persist checkpoint ``checkpoint_id``, then (``notify``) commit every pending transaction
        ≤ it, then (unless other checkpoints are pending) abort what failed attempts left."""
        coord = self.coordinator()
        self.verify_acknowledged(checkpoint_id)
        done = coord.complete(checkpoint_id)
        self.checkpoints.completed(done)
        nr = NotifyResult(checkpoint_id, 0, 0, 0, 0.0)
        if notify:
            nr = coord.notify_checkpoint_complete(checkpoint_id)
            self.mark_committed_if_done()
            self.fault("after_commit")
        lingering = 0
        do_lingering = self.config.abort_lingering_each_epoch if abort_lingering is None else abort_lingering
        if do_lingering and not coord.pending_checkpoints:
            lingering = self.abort_lingering_live(checkpoint_id, routine=True)
        metrics = CheckpointMetrics(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            kind=done.metadata.kind,
            location=done.ref.location,
            records=done.records,
            acknowledgements=done.acknowledgements,
            committables=sum(len(s.committables) for s in done.metadata.sinks.values()),
            persist_ms=done.persist_ms,
            commit_ms=nr.commit_ms,
            transactions_committed=nr.committed,
            transactions_aborted=nr.aborted + lingering,
            lingering_aborted=lingering,
            transactions_already_committed=nr.already_committed,
        )
        self.checkpoint_metrics.append(metrics)
        self.checkpoints_completed[metrics.kind] += 1
        log_event(
            log,
            logging.INFO,
            "checkpoint metrics",
            job=self.job_id,
            checkpoint=checkpoint_id,
            kind=metrics.kind.value,
            records=metrics.records,
            persist_ms=metrics.persist_ms,
            commit_ms=metrics.commit_ms,
            committed=metrics.transactions_committed,
            aborted=metrics.transactions_aborted,
        )
        return metrics

    def verify_acknowledged(self, checkpoint_id: int) -> None:
        """Before persisting: every sink verifies what the acknowledged attempts pre-committed
        (``verify_pre_committed``); a failure aborts the checkpoint, so nothing fenced is persisted.

        Raises:
            ConcurrentAttemptError, ServiceUnavailableError: from a sink (the checkpoint is aborted).
        """
        coord = self.coordinator()
        pc = coord.pending(checkpoint_id)
        for name in coord.live_sinks():
            acknowledged = pc.acknowledged(name)  # decoded at acknowledgement, not again
            if acknowledged is None:
                continue
            committables, states = acknowledged
            try:
                self.sinks[name].verify_pre_committed(committables, states)
            except Exception as e:
                coord.abort_checkpoint(checkpoint_id, f"verification before persist failed: {e!r}")
                raise

    def drain_commits(self, timeout_s: float | None = None) -> None:
        """Wait for asynchronous commits (at most ``timeout_s``, by default
        ``commit_drain_timeout_s``) and forget confirmed ones.

        Raises:
            CommitWaitTimeoutError: the wait timed out. CommitFailedError: a commit failed.
        """
        self._committer.drain(self.config.commit_drain_timeout_s if timeout_s is None else timeout_s)
        self.coordinator().confirm_commits()
        self.mark_committed_if_done()

    def require_no_pending(self, action: str) -> None:
        """Raise IllegalTransitionError if checkpoints are pending (endings need none)."""
        pending = [p.checkpoint_id for p in self.coordinator().pending_checkpoints]
        if pending:
            raise IllegalTransitionError(
                f"job {self.job_id}",
                self.lifecycle.state.value,
                f"{action} with pending checkpoints {pending} (complete or abort them first)",
            )

    def live_sinks(self, names: Sequence[str]) -> list[AnySink]:
        """The sinks called ``names``, in job order."""
        return [s for n, s in self.sinks.items() if n in names]
