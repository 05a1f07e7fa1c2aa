"""Restore: what a restore re-commits (DESIGN.md §5, §6).

Every committable of the restored checkpoint (the latest, or a savepoint) is re-committed, in
checkpoint order, skipping sinks flagged fully finished (FLIP-147): :func:`recovery_transactions`.
A checkpoint holds every transaction not yet confirmed committed, so the restored one alone is
enough. What lingering cleanup may then abort is decided in :mod:`twophase.coordinator.run.lingering`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from twophase.coordinator.run.lingering import ALL_CHECKPOINTS
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.state.payload import decode_payload
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import JobError
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from twophase.coordinator.run.lingering_cleanup import LingeringCleanup

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
