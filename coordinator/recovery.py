"""Restore and lingering cleanup: what a restore re-commits, and what may be aborted.

The exactly-once argument rests on two choices made here (DESIGN.md §5, §6):

- **What a restore re-commits**: every committable of the restored checkpoint (the latest, or a
  savepoint), in checkpoint order, skipping sinks flagged fully finished (FLIP-147):
  :func:`recovery_transactions`. A checkpoint holds every transaction not yet confirmed committed,
  so the restored one alone is enough.
- **What may be aborted** (:func:`held_by`, a pure function): ``abort_lingering`` may touch a
  transaction of this job and sink only if nothing can still need it: no retained checkpoint or
  savepoint references it (as a committable or as in-progress state), the running job does not
  hold it in memory (pending commit, or in progress in a live subtask), and no acknowledgement
  about to be recorded carries it. Aborting anything else would lose data a checkpoint promised.

:class:`MetadataCache` reads retained checkpoints once per runtime.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.commit_requests import commit_requests
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, LingeringScope
from twophase.sinks.errors import JobError
from twophase.sinks.structured_log import log_event

if TYPE_CHECKING:
    from twophase.coordinator.run_state import RunState

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
ALL_CHECKPOINTS = 2**62
"""``LingeringScope.up_to_checkpoint`` meaning "every checkpoint"."""


def canonical(obj: JsonObject) -> str:
    """A JSON object as canonical text (sorted keys, no spaces): equal objects, equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


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


@dataclass(frozen=True)
class IdFloor:
    """What a restore started checkpoint ids above (DESIGN.md §12, "Checkpoint ids never repeat a
    committed one"), kept so that a refused id can name its true reason.

    Attributes:
        newest_stored: the newest checkpoint id in the job's storage (or restored), 0 if none.
        sinks: sink → the checkpoint its external system records as committed for this job
            (``last_committed_checkpoint``: Delta's txn version); sinks keeping no record are absent.
    """

    newest_stored: int = 0
    sinks: Mapping[str, int] = field(default_factory=dict)

    def refusal(self, job_id: str, asked: int, next_id: int, used_by_run: int) -> str:
        """The one-line reason checkpoint ``asked`` cannot be taken when the next id is ``next_id``
        and this run already triggered ids up to ``used_by_run`` (0: none): every source at or
        above ``asked``."""
        reasons = []
        if self.newest_stored >= asked:
            reasons.append(f"storage holds checkpoint {self.newest_stored}")
        for name, committed in sorted(self.sinks.items()):
            if committed >= asked:
                reasons.append(
                    f"sink {name!r} records checkpoint {committed} of this job as committed "
                    "(last_committed_checkpoint, e.g. Delta's txn version)"
                    + ("" if self.newest_stored else "; storage is empty")
                )
        if used_by_run >= asked:
            reasons.append(f"this run already used checkpoint ids up to {used_by_run}")
        return f"job {job_id}: checkpoint {asked} asked for, but the next id is {next_id}: " + "; ".join(
            reasons or [f"ids below {next_id} are taken"]
        )


class MetadataCache:
    """Checkpoint metadata by location, loaded from ``storage`` at most once (checkpoints never change).

    Args:
        storage: the job's checkpoint storage.
    """

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        self._by_location: dict[str, CheckpointMetadata] = {}

    def remember(self, location: str, metadata: CheckpointMetadata) -> None:
        """Keep ``metadata`` published (or loaded) at ``location``."""
        self._by_location[location] = metadata

    def forget(self, location: str) -> None:
        """Drop a deleted checkpoint."""
        self._by_location.pop(location, None)

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """The metadata of ``ref``.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata.
        """
        meta = self._by_location.get(ref.location)
        if meta is None:
            meta = self._by_location[ref.location] = self.storage.load(ref)
        return meta

    def retained(self, *, savepoints_only: bool = False) -> list[CheckpointMetadata]:
        """Every retained checkpoint and savepoint (only savepoints if asked), ascending by id."""
        return [
            self.load(ref)
            for ref in self.storage.list_checkpoints()
            if not savepoints_only or ref.kind is CheckpointKind.SAVEPOINT
        ]


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
    meta: CheckpointMetadata, sinks: Mapping[str, AnySink], now_ms: int
) -> list[PendingTransaction[Any]]:
    """The transactions a restore from ``meta`` re-commits: every committable of every sink not
    flagged fully finished, ascending by the checkpoint each was pre-committed for (metadata
    order within a checkpoint), decoded, with the payload kept as stored.

    Raises:
        CommittableDecodeError: a payload does not decode.
    """
    out: list[PendingTransaction[Any]] = []
    for name, snap in meta.sinks.items():
        if name in meta.fully_finished or not snap.committables:
            continue
        sink = sinks[name]
        txns = [
            PendingTransaction(
                name,
                rec.partition,
                rec.attempt,
                meta.checkpoint_id if rec.checkpoint_id is None else rec.checkpoint_id,
                sink.decode(rec.payload),
                now_ms,
                payload=rec.payload,
            )
            for rec in snap.committables
        ]
        out.extend(sorted(txns, key=lambda t: t.checkpoint_id))
    return out


@dataclass(frozen=True)
class Held:
    """What ``abort_lingering`` must never touch for one sink (see :func:`held_by`).

    Attributes:
        committables: canonical JSON → encoded committable.
        in_progress: canonical JSON → in-progress state.
        max_partitions: the largest parallelism the sink ran with in any of them.
    """

    committables: Mapping[str, JsonObject]
    in_progress: Mapping[str, JsonObject]
    max_partitions: int


def held_by(
    sink_name: str,
    checkpoints: Iterable[CheckpointMetadata],
    *,
    pending: Iterable[JsonObject] = (),
    live_in_progress: Iterable[JsonObject] = (),
    live_parallelism: int = 0,
) -> Held:
    """What may NOT be aborted for ``sink_name``: the module docstring's rule, as a pure function.

    Args:
        sink_name: the sink.
        checkpoints: the checkpoints whose promises stand — every retained checkpoint and
            savepoint, plus one being restored from elsewhere (a savepoint location); on cancel
            with delete, the savepoints only.
        pending: encoded committables the running job holds (pre-committed and not yet confirmed
            committed, or acknowledged but not yet in a checkpoint).
        live_in_progress: in-progress states of the running job's live subtasks.
        live_parallelism: the running job's parallelism for the sink (0 if none).

    Returns:
        Everything held; whatever ``abort_lingering`` finds of this job and sink outside it is
        lingering and may be aborted.
    """
    committables: dict[str, JsonObject] = {}
    in_progress: dict[str, JsonObject] = {}
    max_partitions = live_parallelism
    for meta in checkpoints:
        snap = meta.sinks.get(sink_name)
        if snap is None:
            continue
        max_partitions = max(max_partitions, snap.num_partitions)
        for rec in snap.committables:
            committables.setdefault(canonical(rec.payload), rec.payload)
        for state in snap.in_progress.values():
            in_progress.setdefault(canonical(state), state)
    for payload in pending:
        committables.setdefault(canonical(payload), payload)
    for state in live_in_progress:
        in_progress.setdefault(canonical(state), state)
    return Held(committables, in_progress, max_partitions)


def lingering_scope(job_id: str, sink: AnySink, held: Held, up_to_checkpoint: int) -> LingeringScope[Any]:
    """The :class:`~twophase.sinks.context.LingeringScope` handed to ``sink.abort_lingering``.

    Raises:
        CommittableDecodeError: a held payload does not decode with the sink's codec.
    """
    return LingeringScope(
        job_id=job_id,
        sink_name=sink.name,
        held=tuple(sink.decode(p) for p in held.committables.values()),
        held_in_progress=tuple(held.in_progress.values()),
        up_to_checkpoint=up_to_checkpoint,
        max_partitions=held.max_partitions,
    )


def encoded(sink: AnySink, txns: Sequence[PendingTransaction[Any]]) -> list[JsonObject]:
    """The payloads of ``txns`` (as received, or encoded where a test built them by hand)."""
    return [t.payload if t.payload is not None else sink.encode(t.committable) for t in txns]


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


def restore_run(s: RunState, savepoint_location: str | None) -> RestoreResult:
    """Restore a run: load the savepoint (or the latest checkpoint by listing), re-commit its
    committables, start a new checkpoint coordinator above every stored id, and abort what
    lingers with everything retained held. Leaves the job state to the caller.

    Raises:
        CorruptCheckpointError: the checkpoint is unreadable (no silent fallback).
        JobError: the checkpoint holds a sink this job does not have.
        TransactionLostError, CommitFailedError: a re-commit failed.
    """
    if s.coord is not None:
        s.replace_committer()
    refs = s.storage.list_checkpoints()
    if savepoint_location is not None:
        meta: CheckpointMetadata | None = s.storage.load_location(savepoint_location)
        location: str | None = savepoint_location
    else:
        meta = s.storage.latest()
        location = next((r.location for r in refs if meta and r.checkpoint_id == meta.checkpoint_id), None)
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
        if savepoint_location is not None:
            s.cache.remember(savepoint_location, meta)
        committed = location is not None and s.storage.is_committed(location)
        txns = [] if committed else recovery_transactions(meta, s.sinks, s.clock())
        # a CheckpointCommitSink recovers each checkpoint with ONE call, in checkpoint order;
        # the sinks recover concurrently (one lane each)
        s.committer.commit_all(commit_requests(s.sinks, txns, recovery=True))
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
    s.id_floor = IdFloor(newest_stored, floors)
    max_id = max([newest_stored, *floors.values()])
    if meta is not None and savepoint_location is not None and starts_a_lineage(refs, savepoint_location):
        meta, location = publish_lineage_start(s.storage, meta, s.job_id, max_id + 1, s.clock())
        max_id = meta.checkpoint_id
    s.coord = CheckpointCoordinator(
        s.job_id,
        list(s.sinks.values()),
        s.storage,
        s.committer,
        s.config.checkpoint,
        clock=s.clock,
        fault=s.fault,
        first_checkpoint_id=max_id + 1,
        restored=meta,
        marker=s.marker,
    )
    lingering = {
        name: s.abort_lingering(s.sinks[name], ALL_CHECKPOINTS, extra=meta) for name in s.coord.live_sinks()
    }
    s.restored = meta
    s.last_completed = meta
    s.marker.restored(meta.checkpoint_id if meta is not None else None, location)
    s.epochs_since_restore = 0
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
