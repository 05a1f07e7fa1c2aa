"""Cancel with ``CleanupMode.DELETE``: delete the job's checkpoints, keep its savepoints.

A published checkpoint promised its transactions, so they are committed before it is deleted.
In-progress state (files spanning checkpoints) that only the deleted checkpoints referenced is
aborted (``abort_in_progress``), unless a savepoint holds state of the same (sink, partition): a
file may continue across checkpoints under one upload, and a savepoint may still resume it. Then
``abort_lingering`` runs with only the savepoints held.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.commit_requests import CommitRequest, commit_requests
from twophase.coordinator.committer_operator import CommitterOperator
from twophase.coordinator.metadata import CheckpointKind
from twophase.coordinator.recovery import ALL_CHECKPOINTS, MetadataCache, canonical, held_by, lingering_scope
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class DeleteCleanup:
    """What :func:`delete_checkpoints` did.

    Attributes:
        checkpoints_deleted: checkpoints deleted (savepoints are kept).
        in_progress_aborted: in-progress states aborted.
        lingering_aborted: sink → transactions ``abort_lingering`` aborted.
    """

    checkpoints_deleted: int
    in_progress_aborted: int
    lingering_aborted: Mapping[str, int]


def commit_durable(
    coord: CheckpointCoordinator,
    sinks: Mapping[str, AnySink],
    committer: CommitterOperator,
    stored: set[int],
) -> None:
    """Commit what the job's published checkpoints promised before they are deleted — durable
    transactions only: a transaction still PRE_COMMITTED belongs to a checkpoint that never
    completed (an abort that failed part-way leaves such ones behind) and is lingering, aborted by
    the cleanup that follows. An IN_DOUBT one (its checkpoint's publish had an unknown outcome) is
    committed if its checkpoint is in storage (``stored`` ids), else left to that cleanup too. The
    commits that succeed are confirmed even when a later one fails.

    Raises:
        CommitFailedError, TransactionLostError: a commit failed.
    """
    done: list[CommitRequest] = []
    try:
        committer.commit_all(
            commit_requests(sinks, coord.durable_transactions(landed=stored)),
            cancellable=False,
            on_done=done.append,
        )
    finally:  # confirmed here, on one thread: a subtask's pending list is not thread-safe
        for request in done:
            for t in request.txns:
                coord.subtasks[(t.sink_name, t.partition)].commit_confirmed(t)


def delete_checkpoints(
    job_id: str, sinks: Mapping[str, AnySink], cache: MetadataCache, live_sinks: list[str] | None
) -> DeleteCleanup:
    """Delete every checkpoint that is not a savepoint, abort the in-progress state only they held,
    then abort what lingers with only the savepoints held.

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        cache: the job's checkpoint metadata (its storage is where checkpoints are deleted).
        live_sinks: sinks still live in the run being canceled, or ``None`` if it never restored
            (then every sink is cleaned).

    Raises:
        CheckpointStorageError: a checkpoint cannot be read or deleted.
    """
    storage = cache.storage
    savepoints = cache.retained(savepoints_only=True)
    kept = {(name, p) for m in savepoints for name, snap in m.sinks.items() for p in snap.in_progress}
    doomed = [r for r in storage.list_checkpoints() if r.kind is not CheckpointKind.SAVEPOINT]
    abandoned: dict[str, dict[str, JsonObject]] = {}
    for ref in doomed:
        for name, snap in cache.load(ref).sinks.items():
            for p, state in snap.in_progress.items():
                if (name, p) not in kept:
                    abandoned.setdefault(name, {})[canonical(state)] = state
    for ref in doomed:
        storage.delete(ref)
        cache.forget(ref.location)
    for name, states in abandoned.items():
        sink = sinks.get(name)
        if isinstance(sink, InProgressSink):
            for state in states.values():
                sink.abort_in_progress(state)
    lingering: dict[str, int] = {}
    for name, sink in sinks.items():
        if live_sinks is None or name in live_sinks:
            held = held_by(name, savepoints)
            lingering[name] = sink.abort_lingering(lingering_scope(job_id, sink, held, ALL_CHECKPOINTS))
            log_event(
                log, logging.INFO, "cancel: lingering aborted", job=job_id, sink=name, count=lingering[name]
            )
    cleanup = DeleteCleanup(len(doomed), sum(len(v) for v in abandoned.values()), lingering)
    log_event(
        log,
        logging.INFO,
        "cancel: checkpoints deleted",
        job=job_id,
        count=cleanup.checkpoints_deleted,
        in_progress_aborted=cleanup.in_progress_aborted,
    )
    return cleanup
