"""A restore: the start of every run (DESIGN.md §5, §6).

:class:`Restore` is built, for one run, with only what it uses: the job's sinks, storage and
completed checkpoints, and the new run's committer and lingering cleanup. ``JobRuntime.restore``
takes its steps in order: :meth:`Restore.recover` loads the savepoint (or the latest checkpoint
by listing), re-commits its committables (:func:`~twophase.coordinator.run.recovery.recovery_transactions`)
and makes the run's checkpoint coordinator above every stored id; the run starts with it;
:meth:`Restore.clean_up` aborts what lingers with everything retained held. What may be aborted
is decided in :mod:`~twophase.coordinator.run.lingering`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.checkpoint.driver_fence import DriverFence
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS
from twophase.coordinator.run.lingering_cleanup import LingeringCleanup
from twophase.coordinator.run.recovery import (
    RestoreResult,
    abort_lingering_before_refusing,
    check_restorable,
    publish_lineage_start,
    recovery_transactions,
    starts_a_lineage,
)
from twophase.coordinator.state.clock import Clock
from twophase.coordinator.state.id_floor import IdFloor
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import TransactionLostError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class Recovered:
    """What :meth:`Restore.recover` found and made.

    Attributes:
        meta: the restored checkpoint (``None``: a fresh start).
        location: where it is remembered (``None``: a fresh start).
        recommitted: committables re-committed.
        lost_ignored: of those, ``LOST`` ones ignored.
        id_floor: what checkpoint ids start above.
        coord: the run's checkpoint coordinator.
        next_checkpoint_id: the id the run's first checkpoint gets.
    """

    meta: CheckpointMetadata | None
    location: str | None
    recommitted: int
    lost_ignored: int
    id_floor: IdFloor
    coord: CheckpointCoordinator
    next_checkpoint_id: int


class Restore:
    """One run's restore (see the module docstring). Leaves the job state to the caller.

    Args:
        job_id: the job.
        sinks: the job's sinks by name, in job order.
        storage: the job's checkpoint storage.
        checkpoints: the job's completed checkpoints (what is read is remembered there).
        committer: the new run's committer operator (the re-commits go through it).
        lingering: the new run's lingering cleanup.
        config: the checkpoint settings of the run's coordinator.
        clock: ms clock.
        fault: the fault-point hook.
        fence: this driver's epoch of the job (``None``: no fencing).
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        storage: CheckpointStorage,
        checkpoints: CompletedCheckpointStore,
        committer: CommitterOperator,
        lingering: LingeringCleanup,
        config: CheckpointConfig,
        clock: Clock,
        fault: Callable[[str], None],
        fence: DriverFence | None,
    ) -> None:
        self._job_id = job_id
        self._sinks = sinks
        self._storage = storage
        self._checkpoints = checkpoints
        self._committer = committer
        self._lingering = lingering
        self._config = config
        self._clock = clock
        self._fault = fault
        self._fence = fence

    def recover(self, savepoint_location: str | None) -> Recovered:
        """Load the savepoint (or the latest checkpoint by listing), re-commit its committables,
        and make a checkpoint coordinator above every stored id.

        Raises:
            CorruptCheckpointError: the checkpoint is unreadable (no silent fallback).
            JobError: the checkpoint holds a sink this job does not have.
            TransactionLostError, CommitFailedError: a re-commit failed.
        """
        storage, sinks, job_id = self._storage, self._sinks, self._job_id
        refs = storage.list_checkpoints()
        # each checkpoint read and parsed once: the cache keeps what is read here for the lingering
        # cleanup, and each committable is decoded once, by the cache, for the re-commit and the cleanup
        meta: CheckpointMetadata | None = None
        location: str | None = None
        if savepoint_location is not None:
            meta, location = storage.load_location(savepoint_location), savepoint_location
        elif refs:  # the latest by listing (storage.latest()), read from storage as every restore does
            meta, location = storage.load(refs[-1]), refs[-1].location
        if meta is not None and location is not None:
            self._checkpoints.loaded(location, meta)
        lost_before = self._committer.metrics.lost_ignored
        recommitted = 0
        if meta is not None:
            if meta.job_id != job_id:
                log_event(
                    log,
                    logging.WARNING,
                    "restoring another job's checkpoint",
                    job=job_id,
                    checkpoint=meta.checkpoint_id,
                    from_job=meta.job_id,
                )
            check_restorable(meta, sinks, job_id)
            committed = location is not None and storage.is_committed(location)
            txns = (
                []
                if committed
                else recovery_transactions(meta, sinks, self._clock(), self._decoded(meta, location))
            )
            # a CheckpointCommitSink recovers each checkpoint with ONE call, in checkpoint order;
            # the sinks recover concurrently (one lane each)
            try:
                self._committer.commit_all(txns, recovery=True)
            except TransactionLostError:
                # the restore refuses; a zombie's open transaction (DESIGN.md §12) must not hold back
                # every read_committed reader until its timeout meanwhile (issue #43 item 3)
                abort_lingering_before_refusing(self._lingering, sinks.values(), job_id, location)
                raise
            recommitted = len(txns)
            if location is not None and not committed:
                try:  # everything it holds is committed now
                    storage.mark_committed(location)
                except Exception as e:
                    log_event(log, logging.WARNING, "committed marker not written", job=job_id, error=repr(e))
        # above every id in storage, and every id a sink's external system records as committed for
        # this job (Delta's txn version): ids start again when storage is empty, keys must not repeat
        recorded = {name: sink.last_committed_checkpoint(job_id) for name, sink in sinks.items()}
        floors = {name: f for name, f in recorded.items() if f is not None}
        # not above ids that failed epochs of this process used: nothing durable holds them, and
        # reusing them keeps a name pool (Kafka) away from the restored checkpoint's names
        newest_stored = max([*(r.checkpoint_id for r in refs), meta.checkpoint_id if meta else 0])
        id_floor = IdFloor(newest_stored, floors)
        max_id = max([newest_stored, *floors.values()])
        if meta is not None and savepoint_location is not None and starts_a_lineage(refs, savepoint_location):
            meta, location = publish_lineage_start(storage, meta, job_id, max_id + 1, self._clock())
            self._checkpoints.loaded(location, meta)
            max_id = meta.checkpoint_id
        coord = CheckpointCoordinator(
            job_id,
            list(sinks.values()),
            storage,
            self._committer,
            self._config,
            clock=self._clock,
            fault=self._fault,
            first_checkpoint_id=max_id + 1,
            restored=meta,
            marker=self._checkpoints.marker,
            fence=self._fence,
        )
        lost = self._committer.metrics.lost_ignored - lost_before
        return Recovered(meta, location, recommitted, lost, id_floor, coord, max_id + 1)

    def clean_up(self, recovered: Recovered) -> RestoreResult:
        """Once the run started with ``recovered.coord``: abort what lingers for every live sink,
        with everything retained held (and the restored checkpoint); the restored checkpoint is
        the latest completed one.

        Raises:
            DriverFencedError: a newer driver claimed the job. Whatever a sink's cleanup raises.
        """
        meta, location, coord = recovered.meta, recovered.location, recovered.coord
        lingering = self._lingering.sweep(  # one sweep: one fence check, one listing (#42)
            [self._sinks[name] for name in coord.live_sinks()], ALL_CHECKPOINTS, coord, extra=location
        )
        self._checkpoints.restored_from(meta, location)
        result = RestoreResult(
            checkpoint_id=meta.checkpoint_id if meta else None,
            kind=meta.kind if meta else None,
            source_position=meta.source_position if meta else None,
            end_of_input=meta.end_of_input if meta else False,
            recommitted=recovered.recommitted,
            lost_ignored=recovered.lost_ignored,
            lingering_aborted=lingering,
            fully_finished=tuple(sorted(meta.fully_finished)) if meta else (),
            next_checkpoint_id=recovered.next_checkpoint_id,
        )
        log_event(
            log,
            logging.INFO,
            "job restored",
            job=self._job_id,
            checkpoint=result.checkpoint_id,
            recommitted=recovered.recommitted,
            lingering_aborted=sum(lingering.values()),
            next_checkpoint=result.next_checkpoint_id,
        )
        return result

    def _decoded(self, meta: CheckpointMetadata, location: str | None) -> dict[str, Sequence[Any]]:
        """Per sink a restore from ``meta`` (remembered at ``location``) re-commits, its
        committables decoded by the metadata cache, which keeps them for the lingering cleanup.

        Raises:
            CommittableDecodeError: a payload does not decode.
        """
        if location is None:
            return {}
        cache = self._checkpoints.cache
        return {
            name: cache.committables(location, self._sinks[name])
            for name, snap in meta.sinks.items()
            if name not in meta.fully_finished and snap.committables
        }
