"""The steps a started run offers its epochs and endings, one object each (issue #42 item 5).

A :class:`~twophase.coordinator.run.run.Run` builds them once its restore has made its checkpoint
coordinator, each with only the collaborators it uses:

- :class:`RunProgress`: the ids the run started above and triggered, and its epochs;
- :class:`RunCommits`: the commits a run waits for and confirms (housekeeping before an action,
  the drain before an ending, the committed marker);
- :class:`LingeringSweep`: lingering cleanup for every live sink of the run;
- :class:`CheckpointCompletion`: verify, persist, notify and sweep one checkpoint, and record its
  metrics in the job's :class:`CheckpointHistory`, which outlives the run; after a large publish
  it returns the Arrow memory the intake and publish freed (:data:`RETURN_FREED_ABOVE`).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import NotifyResult
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.lingering_cleanup import LingeringCleanup
from twophase.coordinator.state.id_floor import IdFloor
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.metrics import CheckpointMetrics
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]

RETURN_FREED_ABOVE = 10_000
"""Committables in a published checkpoint above which the driver then returns the freed memory
pyarrow's pool keeps to the system (issue #42). At 10⁵ subtasks × 3 sinks the pool (mimalloc)
kept ~0.4 GB of pages freed by the epoch's publish and intake, and the committer's decoded
committables, which Python allocates elsewhere, came on top: the driver's high-water mark. It
costs ~3 ms, and the next epoch's collection faults its pages in again (~0.2 GB at that size);
below the threshold there is little to return."""


def return_freed_arrow_memory() -> None:
    """Return the freed memory pyarrow's default pool keeps to the system (``release_unused``)."""
    pa.default_memory_pool().release_unused()


class CheckpointHistory:
    """The metrics of the checkpoints a runtime completed, over all its runs.

    Args:
        history: how many of the newest checkpoints keep their own metrics (totals count all).
    """

    def __init__(self, history: int) -> None:
        self._metrics: deque[CheckpointMetrics] = deque(maxlen=history)
        self._completed: Counter[CheckpointKind] = Counter()

    @property
    def metrics(self) -> list[CheckpointMetrics]:
        """The newest checkpoints' metrics, oldest first."""
        return list(self._metrics)

    @property
    def completed(self) -> dict[CheckpointKind, int]:
        """How many checkpoints completed, by kind (every one)."""
        return dict(self._completed)

    def record(self, metrics: CheckpointMetrics) -> None:
        """A checkpoint completed with ``metrics``."""
        self._metrics.append(metrics)
        self._completed[metrics.kind] += 1


class RunProgress:
    """How far one run got: the id floor its restore started above, the newest id it triggered,
    and the epochs it started.

    Args:
        id_floor: what the restore started checkpoint ids above (a refused id names it).
    """

    def __init__(self, id_floor: IdFloor) -> None:
        self._id_floor = id_floor
        self._max_triggered = 0
        self._epochs = 0

    @property
    def id_floor(self) -> IdFloor:
        """What the restore started checkpoint ids above."""
        return self._id_floor

    @property
    def max_triggered(self) -> int:
        """The newest checkpoint id this run triggered (0: none)."""
        return self._max_triggered

    @property
    def epochs_since_restore(self) -> int:
        """Epochs started since the restore."""
        return self._epochs

    def triggered(self, checkpoint_id: int) -> None:
        """A checkpoint was triggered (the newest id this run used)."""
        self._max_triggered = checkpoint_id

    def epoch_started(self) -> None:
        """An epoch's checkpoint was triggered and its in-progress state handed over."""
        self._epochs += 1


class RunCommits:
    """The commits of one run: surfaced, waited for and confirmed.

    Args:
        coord: the run's checkpoint coordinator.
        committer: the run's committer operator.
        checkpoints: the job's completed checkpoints (their committed marker).
        drain_timeout_s: the default wait of :meth:`drain` (``RuntimeConfig.commit_drain_timeout_s``).
    """

    def __init__(
        self,
        coord: CheckpointCoordinator,
        committer: CommitterOperator,
        checkpoints: CompletedCheckpointStore,
        drain_timeout_s: float | None,
    ) -> None:
        self._coord = coord
        self._committer = committer
        self._checkpoints = checkpoints
        self._drain_timeout_s = drain_timeout_s

    def housekeeping(self) -> None:
        """Before an action: surface an async commit error, forget confirmed commits, time out
        stale checkpoints, warn about transactions near their timeout.

        Raises:
            CommitFailedError, TransactionLostError: an earlier asynchronous commit failed.
        """
        self._committer.raise_if_failed()
        self._coord.confirm_commits()
        self.mark_committed_if_done()
        self._coord.check_timeouts()
        ages = self._committer.ages
        timeouts = [t for t in (ages.timeout_ms, *ages.sink_timeouts.values()) if t is not None]
        if timeouts:  # only what is old enough to warn of (none without a timeout): issue #42
            cutoff = ages.clock() - int(ages.ratio * min(timeouts))
            ages.check(self._coord.uncommitted_before(cutoff))

    def mark_committed_if_done(self) -> None:
        """Write the latest checkpoint's committed marker once the run confirmed every commit it
        holds (:meth:`CompletedCheckpointStore.mark_committed_if_done`; usually the thread that
        landed the commit wrote it already, ``CheckpointCoordinator._marker_for``)."""
        # asked only while the marker is missing, of the ledger's columns (no transaction made)
        self._checkpoints.mark_committed_if_done(self._coord.holds_uncommitted_up_to)

    def drain(self, timeout_s: float | None = None) -> None:
        """Wait for asynchronous commits (at most ``timeout_s``, by default the configured drain
        timeout) and forget confirmed ones.

        Raises:
            CommitWaitTimeoutError: the wait timed out. CommitFailedError: a commit failed.
        """
        self._committer.drain(self._drain_timeout_s if timeout_s is None else timeout_s)
        self._coord.confirm_commits()
        self.mark_committed_if_done()

    def await_all(self, timeout_s: float | None) -> None:
        """Wait until every commit submitted so far has run (``None``: forever), then forget the
        confirmed transactions (``JobRuntime.await_commits``: no committed marker).

        Raises:
            TransactionLostError, CommitFailedError: a commit failed, or the wait timed out.
        """
        self._committer.drain(timeout_s)
        self._coord.confirm_commits()


class LingeringSweep:
    """Lingering cleanup (:meth:`LingeringCleanup.abort`) for every live sink of one run.

    Args:
        sinks: the job's sinks by name.
        coord: the run's checkpoint coordinator (which sinks are live; what it holds).
        lingering: the run's lingering cleanup.
    """

    def __init__(
        self, sinks: Mapping[str, AnySink], coord: CheckpointCoordinator, lingering: LingeringCleanup
    ) -> None:
        self._sinks = sinks
        self._coord = coord
        self._lingering = lingering

    def abort_live(self, up_to: int, *, routine: bool = False) -> int:
        """Abort what lingers up to checkpoint ``up_to`` for every live sink; returns the total.
        ``routine``: the cleanup after an epoch, which a sink may put off; every end of a run calls
        this without it, so that nothing it put off outlives the run.

        Raises:
            DriverFencedError: a newer driver claimed the job. Whatever a sink raises.
        """
        coord = self._coord
        # one sweep: the fence checked and the retained checkpoints listed once, not per sink (#42)
        sinks = [self._sinks[n] for n in coord.live_sinks()]
        return sum(self._lingering.sweep(sinks, up_to, coord, routine=routine).values())


class CheckpointCompletion:
    """Completes one checkpoint of a run: verify what was acknowledged, persist, notify, sweep
    what lingers, record the metrics.

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        coord: the run's checkpoint coordinator.
        checkpoints: the job's completed checkpoints (told of each one).
        commits: the run's commits (the committed marker after a notification).
        sweep: the run's lingering sweep.
        history: where the checkpoint's metrics go.
        fault: the fault-point hook (``after_commit``).
        abort_lingering_each_epoch: the default of :meth:`complete`'s ``abort_lingering``.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        coord: CheckpointCoordinator,
        checkpoints: CompletedCheckpointStore,
        commits: RunCommits,
        sweep: LingeringSweep,
        history: CheckpointHistory,
        fault: Callable[[str], None],
        abort_lingering_each_epoch: bool,
    ) -> None:
        self._job_id = job_id
        self._sinks = sinks
        self._coord = coord
        self._checkpoints = checkpoints
        self._commits = commits
        self._sweep = sweep
        self._history = history
        self._fault = fault
        self._abort_lingering_each_epoch = abort_lingering_each_epoch

    def complete(
        self, checkpoint_id: int, *, notify: bool, abort_lingering: bool | None
    ) -> CheckpointMetrics:
        """Persist checkpoint ``checkpoint_id``, then (``notify``) commit every pending transaction
        ≤ it, then (unless other checkpoints are pending) abort what failed attempts left.

        Raises:
            ConcurrentAttemptError, ServiceUnavailableError: verification failed (aborted).
            CheckpointStorageError: publishing failed. TransactionLostError, CommitFailedError.
        """
        coord = self._coord
        self.verify_acknowledged(checkpoint_id)
        done = coord.complete(checkpoint_id)
        committables = done.metadata.committable_count()
        if committables > RETURN_FREED_ABOVE:
            return_freed_arrow_memory()  # before the commit decodes: the peak is then lower
        self._checkpoints.completed(done)
        nr = NotifyResult(checkpoint_id, 0, 0, 0, 0.0)
        if notify:
            nr = coord.notify_checkpoint_complete(checkpoint_id)
            self._commits.mark_committed_if_done()
            self._fault("after_commit")
        lingering = 0
        do_lingering = self._abort_lingering_each_epoch if abort_lingering is None else abort_lingering
        if do_lingering and not coord.pending_checkpoints:
            lingering = self._sweep.abort_live(checkpoint_id, routine=True)
        metrics = CheckpointMetrics(
            job_id=self._job_id,
            checkpoint_id=checkpoint_id,
            kind=done.metadata.kind,
            location=done.ref.location,
            records=done.records,
            acknowledgements=done.acknowledgements,
            committables=committables,
            persist_ms=done.persist_ms,
            commit_ms=nr.commit_ms,
            transactions_committed=nr.committed,
            transactions_aborted=nr.aborted + lingering,
            lingering_aborted=lingering,
            transactions_already_committed=nr.already_committed,
        )
        self._history.record(metrics)
        log_event(
            log,
            logging.INFO,
            "checkpoint metrics",
            job=self._job_id,
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
        coord = self._coord
        pc = coord.pending(checkpoint_id)
        for name in coord.live_sinks():
            acknowledged = pc.acknowledged(name)  # decoded at acknowledgement, not again
            if acknowledged is None:
                continue
            committables, states = acknowledged
            try:
                self._sinks[name].verify_pre_committed(committables, states)
            except Exception as e:
                coord.abort_checkpoint(checkpoint_id, f"verification before persist failed: {e!r}")
                raise
