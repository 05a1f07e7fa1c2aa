"""Restore: what a restore re-commits (DESIGN.md §5, §6).

Every committable of the restored checkpoint (the latest, or a savepoint) is re-committed, in
checkpoint order, skipping sinks flagged fully finished (FLIP-147): :func:`recovery_transactions`.
A checkpoint holds every transaction not yet confirmed committed, so the restored one alone is
enough. What lingering cleanup may then abort is decided in :mod:`twophase.coordinator.lingering`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.id_floor import IdFloor
from twophase.coordinator.lingering import ALL_CHECKPOINTS
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.payload import decode_payload
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import JobError, TransactionLostError
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from twophase.coordinator.lingering_cleanup import LingeringCleanup
    from twophase.coordinator.run_state import RunState

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class RestoreResult:
    """What ``JobRuntime.restore`` found and did.

    Attributes:
        checkpoint_id: the restored checkpoint's id, or ``None`` for a fresh start.
        kind: its kind.
        source_position: the engine position it covers (replay check), or ``None``.
        end_of_input: it is a final checkpoint (or drained savepoint): the job had finished.
        recommitted: committables passed to ``recover_and_commit``.
        lost_ignored: of those, ``LOST`` ones ignored (``ignore_lost_on_recovery``).
        lingering_aborted: sink → transactions ``abort_lingering`` aborted.
        fully_finished: operators flagged fully finished (their sinks were skipped).
        next_checkpoint_id: the id the next checkpoint gets.
    """

    checkpoint_id: int | None
    kind: CheckpointKind | None
    source_position: JsonObject | None
    end_of_input: bool
    recommitted: int
    lost_ignored: int
    lingering_aborted: Mapping[str, int]
    fully_finished: tuple[str, ...]
    next_checkpoint_id: int


def check_restorable(meta: CheckpointMetadata, sink_names: Iterable[str], job_id: str) -> None:
    """Refuse to restore a checkpoint holding transactions of sinks the job no longer has.

    Raises:
        JobError: the checkpoint holds state of a sink missing from the job (not fully finished):
            restoring would silently drop its transactions.
    """
    unknown = sorted(set(meta.sinks) - set(sink_names) - set(meta.fully_finished))
    if unknown:
        raise JobError(
            f"checkpoint {meta.checkpoint_id} of job {meta.job_id!r} holds state of sinks {unknown} "
            f"that job {job_id!r} does not have; refusing to drop their transactions"
        )


def recovery_transactions(
    meta: CheckpointMetadata,
    sinks: Mapping[str, AnySink],
    now_ms: int,
    decoded: Mapping[str, Sequence[Any]] | None = None,
) -> list[PendingTransaction[Any]]:
    """The transactions a restore from ``meta`` re-commits: every committable of every sink not
    flagged fully finished, ascending by the checkpoint each was pre-committed for (metadata
    order within a checkpoint), decoded, with the payload kept as stored.

    Args:
        meta: the restored checkpoint.
        sinks: the job's sinks by name.
        now_ms: the restore's time (the transactions' pre-commit time, for age warnings).
        decoded: sink → its committables in ``meta`` already decoded, in metadata order (the
            runtime's metadata cache); a sink missing here has its payloads decoded now.

    Raises:
        CommittableDecodeError: a payload does not decode.
    """
    out: list[PendingTransaction[Any]] = []
    for name, snap in meta.sinks.items():
        if name in meta.fully_finished or not snap.committables:
            continue
        sink = sinks[name]
        given = None if decoded is None else decoded.get(name)
        committables = (
            given if given is not None else [decode_payload(sink, rec.payload) for rec in snap.committables]
        )
        txns = [
            PendingTransaction(
                name,
                rec.partition,
                rec.attempt,
                meta.checkpoint_id if rec.checkpoint_id is None else rec.checkpoint_id,
                committable,
                now_ms,
                payload=rec.payload,
            )
            for rec, committable in zip(snap.committables, committables, strict=True)
        ]
        out.extend(sorted(txns, key=lambda t: t.checkpoint_id))
    return out


def starts_a_lineage(refs: Sequence[CheckpointRef], savepoint_location: str) -> bool:
    """True if restoring ``savepoint_location`` rewinds the job (a later checkpoint or savepoint
    of this job exists) or brings a savepoint from elsewhere (it is not in this job's storage):
    then the restored state must become the job's newest checkpoint, or a failover or a driver
    restart before the next checkpoint would restore the abandoned later state instead."""

    def place(location: str) -> str:  # the _metadata file or its directory
        return location.rstrip("/").removesuffix("/_metadata")

    return not refs or place(refs[-1].location) != place(savepoint_location)


def publish_lineage_start(
    storage: CheckpointStorage, meta: CheckpointMetadata, job_id: str, checkpoint_id: int, now_ms: int
) -> tuple[CheckpointMetadata, str]:
    """Publish the restored savepoint ``meta`` as checkpoint ``checkpoint_id`` of ``job_id``: the
    start of the lineage the rewound job continues (Flink adds a restored savepoint to the
    completed-checkpoint store for the same reason). Its committables are left out: the restore
    has just committed them, and re-committing them under a later id would be wrong for sinks
    that commit per checkpoint id (Delta's txn version). In-progress states, the source position,
    end of input and the fully finished operators are kept.

    Returns the published metadata and its location.

    Raises:
        CheckpointStorageError: the checkpoint could not be published (the restore fails).
    """
    kind = CheckpointKind.FINAL if meta.kind is CheckpointKind.FINAL else CheckpointKind.CHECKPOINT
    copy = replace(
        meta,
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        kind=kind,
        timestamp_ms=now_ms,
        sinks={name: replace(snap, committables=()) for name, snap in meta.sinks.items()},
    )
    ref = storage.publish(copy)
    log_event(
        log,
        logging.INFO,
        "restored savepoint published as the newest checkpoint",
        job=job_id,
        checkpoint=checkpoint_id,
        from_checkpoint=meta.checkpoint_id,
    )
    return copy, ref.location


def decoded_in(s: RunState, meta: CheckpointMetadata, location: str | None) -> dict[str, Sequence[Any]]:
    """Per sink a restore from ``meta`` (remembered at ``location``) re-commits, its committables
    decoded by the run's metadata cache, which keeps them for the lingering cleanup.

    Raises:
        CommittableDecodeError: a payload does not decode.
    """
    if location is None:
        return {}
    return {
        name: s.checkpoints.cache.committables(location, s.sinks[name])
        for name, snap in meta.sinks.items()
        if name not in meta.fully_finished and snap.committables
    }


def abort_lingering_before_refusing(
    lingering: LingeringCleanup, sinks: Iterable[AnySink], job_id: str, location: str | None
) -> None:
    """Abort what lingers for every sink, holding every retained checkpoint (and the one at
    ``location``), before a restore refuses with a lost transaction. Best effort: a failure is
    logged (the restore's own error is the one to raise), never raised."""
    for sink in sinks:
        try:
            lingering.abort(sink, ALL_CHECKPOINTS, None, extra=location)
        except Exception as e:
            log_event(
                log,
                logging.WARNING,
                "lingering cleanup before refusing failed",
                job=job_id,
                sink=sink.name,
                error=e,
            )


def restore_run(s: RunState, savepoint_location: str | None) -> RestoreResult:
    """Restore a run: load the savepoint (or the latest checkpoint by listing), re-commit its
    committables, start a new checkpoint coordinator above every stored id, and abort what
    lingers with everything retained held. Leaves the job state to the caller.

    Raises:
        DriverFencedError: a newer driver of the job claimed it.
        CorruptCheckpointError: the checkpoint is unreadable (no silent fallback).
        JobError: the checkpoint holds a sink this job does not have.
        TransactionLostError, CommitFailedError: a re-commit failed.
    """
    # before reading anything: a restore whose listing raced a stale driver's publish is fenced
    # off by it once this claim is visible (issue #43)
    if s.fence is not None:
        s.fence.claim()
    if s.coord is not None:
        s.replace_committer()
    refs = s.storage.list_checkpoints()
    # each checkpoint read and parsed once: the cache keeps what is read here for the lingering
    # cleanup, and each committable is decoded once, by the cache, for the re-commit and the cleanup
    meta: CheckpointMetadata | None = None
    location: str | None = None
    if savepoint_location is not None:
        meta, location = s.storage.load_location(savepoint_location), savepoint_location
    elif refs:  # the latest by listing (storage.latest()), read from storage as every restore does
        meta, location = s.storage.load(refs[-1]), refs[-1].location
    if meta is not None and location is not None:
        s.checkpoints.loaded(location, meta)
    lost_before = s.committer.metrics.lost_ignored
    recommitted = 0
    if meta is not None:
        if meta.job_id != s.job_id:
            log_event(
                log,
                logging.WARNING,
                "restoring another job's checkpoint",
                job=s.job_id,
                checkpoint=meta.checkpoint_id,
                from_job=meta.job_id,
            )
        check_restorable(meta, s.sinks, s.job_id)
        committed = location is not None and s.storage.is_committed(location)
        txns = (
            []
            if committed
            else recovery_transactions(meta, s.sinks, s.clock(), decoded_in(s, meta, location))
        )
        # a CheckpointCommitSink recovers each checkpoint with ONE call, in checkpoint order;
        # the sinks recover concurrently (one lane each)
        try:
            s.committer.commit_all(txns, recovery=True)
        except TransactionLostError:
            # the restore refuses; a zombie's open transaction (DESIGN.md §12) must not hold back
            # every read_committed reader until its timeout meanwhile (issue #43 item 3)
            abort_lingering_before_refusing(s.lingering, s.sinks.values(), s.job_id, location)
            raise
        recommitted = len(txns)
        if location is not None and not committed:
            try:  # everything it holds is committed now
                s.storage.mark_committed(location)
            except Exception as e:
                log_event(log, logging.WARNING, "committed marker not written", job=s.job_id, error=repr(e))
    # above every id in storage, and every id a sink's external system records as committed for
    # this job (Delta's txn version): ids start again when storage is empty, keys must not repeat
    recorded = {name: sink.last_committed_checkpoint(s.job_id) for name, sink in s.sinks.items()}
    floors = {name: f for name, f in recorded.items() if f is not None}
    # not above ids that failed epochs of this process used: nothing durable holds them, and
    # reusing them keeps a name pool (Kafka) away from the restored checkpoint's names
    newest_stored = max([*(r.checkpoint_id for r in refs), meta.checkpoint_id if meta else 0])
    id_floor = IdFloor(newest_stored, floors)
    max_id = max([newest_stored, *floors.values()])
    if meta is not None and savepoint_location is not None and starts_a_lineage(refs, savepoint_location):
        meta, location = publish_lineage_start(s.storage, meta, s.job_id, max_id + 1, s.clock())
        s.checkpoints.loaded(location, meta)
        max_id = meta.checkpoint_id
    coord = CheckpointCoordinator(
        s.job_id,
        list(s.sinks.values()),
        s.storage,
        s.committer,
        s.config.checkpoint,
        clock=s.clock,
        fault=s.fault,
        first_checkpoint_id=max_id + 1,
        restored=meta,
        marker=s.checkpoints.marker,
        fence=s.fence,
    )
    s.begin_run(id_floor, coord)
    lingering = {
        name: s.lingering.abort(s.sinks[name], ALL_CHECKPOINTS, coord, extra=location)
        for name in coord.live_sinks()
    }
    s.restored_from(meta, location)
    result = RestoreResult(
        checkpoint_id=meta.checkpoint_id if meta else None,
        kind=meta.kind if meta else None,
        source_position=meta.source_position if meta else None,
        end_of_input=meta.end_of_input if meta else False,
        recommitted=recommitted,
        lost_ignored=s.committer.metrics.lost_ignored - lost_before,
        lingering_aborted=lingering,
        fully_finished=tuple(sorted(meta.fully_finished)) if meta else (),
        next_checkpoint_id=max_id + 1,
    )
    log_event(
        log,
        logging.INFO,
        "job restored",
        job=s.job_id,
        checkpoint=result.checkpoint_id,
        recommitted=recommitted,
        lingering_aborted=sum(lingering.values()),
        next_checkpoint=max_id + 1,
    )
    return result
