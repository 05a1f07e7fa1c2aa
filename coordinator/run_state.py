"""The state one job runtime shares between its parts: restore, epochs, endings.

:class:`RunState` holds what those parts read and change — the job's lifecycle and lock, the
current run's checkpoint coordinator and committer operator, the checkpoint metadata cache —
and the few steps they all take: guard an action (a protocol mistake propagates, any other error
fails the job), complete a checkpoint (persist, notify, abort lingering, metrics), abort lingering
transactions with everything held that may still be needed. ``JobRuntime`` is its public face.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint_state import CompletedCheckpoint, NotifyResult
from twophase.coordinator.clock import Clock
from twophase.coordinator.commit_policy import CommitterMetrics
from twophase.coordinator.committed_marker import CommittedMarker
from twophase.coordinator.committer_operator import CommitterOperator
from twophase.coordinator.id_floor import IdFloor
from twophase.coordinator.job_lifecycle import JobLifecycle, JobState, JobTransition
from twophase.coordinator.lingering import HeldCommittables, held_decoded
from twophase.coordinator.metadata import CheckpointMetadata
from twophase.coordinator.metadata_cache import MetadataCache
from twophase.coordinator.metrics import CheckpointMetrics, SinkMetricsRecorder
from twophase.coordinator.restart import RestartTracker
from twophase.coordinator.restart_loop import JobCanceledError
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import IllegalTransitionError, JobError
from twophase.sinks.structured_log import log_event

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
        self.sink_metrics = SinkMetricsRecorder()
        self.cancel_requested = threading.Event()
        self.committer = self.new_committer()
        self.past_committer_metrics: list[CommitterMetrics] = []
        self.coord: CheckpointCoordinator | None = None
        self.cache = MetadataCache(storage)
        self.restored: CheckpointMetadata | None = None
        self.restore_held: dict[str, tuple[JsonObject, ...]] = {}
        self.last_completed: CheckpointMetadata | None = None
        self.marker = CommittedMarker(job_id, storage)
        """The latest checkpoint's committed marker (written by whichever thread lands its commit)."""
        self.epochs_since_restore = 0
        self.max_triggered = 0
        self.id_floor = IdFloor()
        """What the last restore started checkpoint ids above (a refused id names it)."""
        self.abandoned = False
        self.checkpoint_metrics: list[CheckpointMetrics] = []

    # -- named transitions of the run (nobody else writes these attributes) --------------------------

    def begin_run(self, id_floor: IdFloor, coord: CheckpointCoordinator) -> None:
        """A restore starts a run: checkpoint ids start above ``id_floor``, ``coord`` handles them."""
        self.id_floor = id_floor
        self.coord = coord

    def restored_from(self, meta: CheckpointMetadata | None) -> None:
        """The run's restore finished from ``meta`` (``None``: a fresh start): it is the last
        completed checkpoint, and no epoch ran since."""
        self.restored = meta
        self.last_completed = meta
        self.epochs_since_restore = 0

    @contextmanager
    def holding_for_restore(self, held: Mapping[str, Sequence[JsonObject]] | None) -> Iterator[None]:
        """While the block runs, the restore's lingering cleanup keeps ``held`` (sink → encoded
        committables a caller still needs); nothing is held afterwards, whatever the block raised."""
        self.restore_held = {k: tuple(v) for k, v in (held or {}).items()}
        try:
            yield
        finally:
            self.restore_held = {}

    def triggered(self, checkpoint_id: int) -> None:
        """A checkpoint was triggered (the newest id this run used)."""
        self.max_triggered = checkpoint_id

    def epoch_started(self) -> None:
        """An epoch's checkpoint was triggered and its in-progress state handed over."""
        self.epochs_since_restore += 1

    def abandon(self) -> None:
        """The driver dies (a simulated crash): nothing is closed, aborted or committed, this
        state refuses further use, the committer thread stops."""
        self.abandoned = True
        self.committer.shutdown(wait=False)

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

    def replace_committer(self) -> None:
        """Retire the committer of an earlier run (its metrics kept) and start a fresh one."""
        self.past_committer_metrics.append(self.committer.metrics)
        self.committer.shutdown(wait=False)
        self.committer = self.new_committer()

    def coordinator(self) -> CheckpointCoordinator:
        """The current run's coordinator.

        Raises:
            JobError: the runtime was abandoned (a simulated crash).
            IllegalTransitionError: used before restore().
        """
        if self.abandoned:
            raise JobError(f"job {self.job_id}: this runtime was abandoned (simulated crash)")
        if self.coord is None:
            raise IllegalTransitionError(
                f"job {self.job_id}", self.lifecycle.state.value, "use before restore()"
            )
        return self.coord

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
        if self.cancel_requested.is_set() or self.abandoned:
            return
        if self.lifecycle.state is not JobState.FAILING:
            if not self.lifecycle.can(JobTransition.FAIL):
                return
            self.lifecycle.transition(JobTransition.FAIL)
        log_event(log, logging.ERROR, "job failing", job=self.job_id, error=repr(error))
        if self.coord is not None:
            try:
                self.coord.close_subtasks(f"failure: {error!r}")
            except Exception:  # cleanup is best effort; lingering cleanup on restore finishes it
                log_event(log, logging.ERROR, "closing subtasks after a failure failed", exc_info=True)
        self.committer.shutdown(wait=False)

    def housekeeping(self) -> None:
        """Before an action: surface an async commit error, forget confirmed commits, time out
        stale checkpoints, warn about transactions near their timeout."""
        coord = self.coordinator()
        self.committer.raise_if_failed()
        coord.confirm_commits()
        self.mark_committed_if_done()
        coord.check_timeouts()
        self.committer.ages.check(coord.uncommitted_transactions())

    def remember(self, done: CompletedCheckpoint) -> None:
        """Keep a completed checkpoint's metadata (the latest, and in the cache with its
        committables as the coordinator decoded them); forget those retention deleted."""
        self.cache.remember(done.ref.location, done.metadata, done.committables)
        for ref in done.retired:
            self.cache.forget(ref.location)
        self.last_completed = done.metadata

    def mark_committed_if_done(self) -> None:
        """Once every transaction the latest completed checkpoint holds is confirmed committed,
        write its committed marker (best effort): a restore from it then re-commits nothing. Kafka
        cannot tell a long-committed transaction from an aborted one once its transactional id was
        reused or expired, so re-committing would report LOST for visible data. Usually the
        thread that landed the commit wrote it already (``CheckpointCoordinator._marker_for``);
        this catches the rest (commits confirmed after a subtask finished, a late notification)."""
        last, coord = self.last_completed, self.coord
        if last is None or coord is None or self.marker.is_marked(last.checkpoint_id):
            return
        if any(t.checkpoint_id <= last.checkpoint_id for t in coord.uncommitted_transactions()):
            return
        self.marker.mark(last.checkpoint_id)

    # -- lingering --------------------------------------------------------------------------------

    def held(self, sink: AnySink, extra: str | None = None) -> HeldCommittables[Any]:
        """What ``abort_lingering`` must keep for ``sink``: retained checkpoints (plus the one
        remembered at location ``extra``, e.g. a savepoint restored from elsewhere), what this run
        holds in memory, and what an acknowledgement about to be recorded carries
        (:func:`~twophase.coordinator.lingering.held_decoded`). Committables come decoded from
        where they were first decoded: the metadata cache for checkpoints, the coordinator's
        pending transactions for this run's; only those an acknowledgement about to be recorded
        carries are decoded here.

        Raises:
            CorruptCheckpointError: a retained checkpoint is unreadable.
            CommittableDecodeError: a held payload does not decode.
        """
        checkpoints = [
            (meta, self.cache.committables(location, sink))
            for location, meta in self.cache.retained_at(extra)
        ]
        pending: list[Any] = [sink.decode(p) for p in self.restore_held.get(sink.name, ())]
        live_in_progress: list[JsonObject] = []
        parallelism = 0
        if self.coord is not None:
            pending.extend(
                t.committable for t in self.coord.uncommitted_transactions() if t.sink_name == sink.name
            )
            live_in_progress = [
                st
                for (s, _), lc in self.coord.subtasks.items()
                if s == sink.name and lc.state.is_live and (st := lc.latest_in_progress) is not None
            ]
            parallelism = self.coord.parallelism.get(sink.name, 0)
        return held_decoded(
            sink,
            checkpoints,
            pending=pending,
            live_in_progress=live_in_progress,
            live_parallelism=parallelism,
        )

    def abort_lingering(self, sink: AnySink, up_to: int, *, extra: str | None = None) -> int:
        """``sink.abort_lingering`` with everything held (``extra``: see :meth:`held`); returns
        how many it aborted."""
        n = sink.abort_lingering(self.held(sink, extra).scope(self.job_id, sink.name, up_to))
        last = self.last_completed.checkpoint_id if self.last_completed is not None else 0
        self.sink_metrics.lingering(sink.name, min(up_to, last) if up_to < 2**62 else last, n)
        if n:
            log_event(
                log,
                logging.INFO,
                "lingering transactions aborted",
                job=self.job_id,
                sink=sink.name,
                count=n,
                up_to_checkpoint=up_to,
            )
        return n

    def abort_lingering_live(self, up_to: int) -> int:
        """:meth:`abort_lingering` for every live sink; returns the total."""
        return sum(self.abort_lingering(self.sinks[n], up_to) for n in self.coordinator().live_sinks())

    # -- completing a checkpoint ------------------------------------------------------------------

    def complete(
        self, checkpoint_id: int, *, notify: bool, abort_lingering: bool | None
    ) -> CheckpointMetrics:
        """Persist checkpoint ``checkpoint_id``, then (``notify``) commit every pending transaction
        ≤ it, then (unless other checkpoints are pending) abort what failed attempts left."""
        coord = self.coordinator()
        self.verify_acknowledged(checkpoint_id)
        done = coord.complete(checkpoint_id)
        self.remember(done)
        nr = NotifyResult(checkpoint_id, 0, 0, 0, 0.0)
        if notify:
            nr = coord.notify_checkpoint_complete(checkpoint_id)
            self.mark_committed_if_done()
            self.fault("after_commit")
        lingering = 0
        do_lingering = self.config.abort_lingering_each_epoch if abort_lingering is None else abort_lingering
        if do_lingering and not coord.pending_checkpoints:
            lingering = self.abort_lingering_live(checkpoint_id)
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
        self.committer.drain(self.config.commit_drain_timeout_s if timeout_s is None else timeout_s)
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
