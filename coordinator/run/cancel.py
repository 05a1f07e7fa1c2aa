"""Cancel cleanup: in-doubt transactions, and ``CleanupMode.DELETE`` (delete the job's
checkpoints, keep its savepoints).

A transaction whose checkpoint's publish had an unknown outcome (IN_DOUBT) is aborted once
listing shows its checkpoint did not land (:func:`abort_in_doubt`), in either mode: nothing will
ever commit it, and an open one stalls ``read_committed`` consumers until its timeout.

A published checkpoint promised its transactions, so they are committed before it is deleted.
In-progress state (files spanning checkpoints) that only the deleted checkpoints referenced is
aborted (``abort_in_progress``), unless a savepoint holds state of the same (sink, partition): a
file may continue across checkpoints under one upload, and a savepoint may still resume it. Then
``abort_lingering`` runs with only the savepoints held.

Cleanup goes on past a failed abort (:func:`keep_going`): every abort it can do is done, and the
failures are reported together by the caller (DESIGN.md §12).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from functools import partial
from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.metadata_cache import MetadataCache
from twophase.coordinator.commit.commit_calls import CommitCall
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS, Held, canonical, held_by, lingering_scope
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class DeleteCleanup:
    """What :func:`delete_checkpoints` did.

    Attributes:
        checkpoints_deleted: checkpoints deleted (savepoints are kept).
        in_progress_aborted: in-progress states aborted (failed ones are not counted).
        lingering_aborted: sink → transactions ``abort_lingering`` aborted.
    """

    checkpoints_deleted: int
    in_progress_aborted: int
    lingering_aborted: Mapping[str, int]


def keep_going(failures: list[BaseException], job_id: str, step: str, action: Callable[[], object]) -> bool:
    """Run one cleanup step; a failure is logged and appended to ``failures`` and the cleanup goes
    on (one failed abort must not leave every later transaction open). Returns True if it succeeded."""
    try:
        action()
    except Exception as e:
        log_event(log, logging.ERROR, "cancel: cleanup step failed", job=job_id, step=step, error=repr(e))
        failures.append(e)
        return False
    return True


def abort_in_doubt(
    coord: CheckpointCoordinator,
    committer: CommitterOperator,
    landed: Set[int],
    failures: list[BaseException],
) -> int:
    """Abort every IN_DOUBT transaction whose checkpoint storage does not show (``landed``: the
    listed ids): its publish did not land, so nothing will commit it. Each abort is tried; a
    failure goes to ``failures`` (lingering cleanup, which no longer holds the transaction, tries
    it again). Returns how many were aborted."""
    aborted = 0
    for t in coord.release_in_doubt(landed):
        # the transaction's repr, not its committable: decoding may fail, and must fail in the step
        step = f"abort in-doubt {t!r} of sink {t.sink_name!r} checkpoint {t.checkpoint_id}"
        aborted += keep_going(failures, coord.job_id, step, partial(committer.abort, t))
    return aborted


def commit_durable(
    coord: CheckpointCoordinator,
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
    done: list[CommitCall] = []
    try:
        committer.commit_all(
            coord.durable_transactions(landed=stored), cancellable=False, on_done=done.append
        )
    finally:  # confirmed here, on one thread: a subtask's pending list is not thread-safe
        for call in done:
            for t in call:
                coord.subtask(t.sink_name, t.partition).commit_confirmed(t)


def delete_checkpoints(
    job_id: str,
    sinks: Mapping[str, AnySink],
    cache: MetadataCache,
    live_sinks: list[str] | None,
    failures: list[BaseException],
) -> DeleteCleanup:
    """Delete every checkpoint that is not a savepoint, abort the in-progress state only they held,
    then abort what lingers with only the savepoints held. A failed abort goes to ``failures`` and
    the cleanup goes on with the next one.

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        cache: the job's checkpoint metadata (its storage is where checkpoints are deleted).
        live_sinks: sinks still live in the run being canceled, or ``None`` if it never restored
            (then every sink is cleaned).
        failures: where failed aborts are appended.

    Raises:
        CheckpointStorageError: a checkpoint cannot be read or deleted (nothing is aborted then:
            a checkpoint left must not reference aborted state).
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
    in_progress_aborted = 0
    for name, states in abandoned.items():
        sink = sinks.get(name)
        if isinstance(sink, InProgressSink):
            for state in states.values():
                step = f"abort in-progress state of sink {name!r}: {canonical(state)}"
                in_progress_aborted += keep_going(
                    failures, job_id, step, partial(sink.abort_in_progress, state)
                )
    lingering: dict[str, int] = {}
    for name, sink in sinks.items():
        if live_sinks is None or name in live_sinks:
            held = held_by(name, savepoints)

            def abort(name: str = name, sink: AnySink = sink, held: Held = held) -> None:
                lingering[name] = sink.abort_lingering(lingering_scope(job_id, sink, held, ALL_CHECKPOINTS))
                log_event(
                    log,
                    logging.INFO,
                    "cancel: lingering aborted",
                    job=job_id,
                    sink=name,
                    count=lingering[name],
                )

            keep_going(failures, job_id, f"abort lingering transactions of sink {name!r}", abort)
    cleanup = DeleteCleanup(len(doomed), in_progress_aborted, lingering)
    log_event(
        log,
        logging.INFO,
        "cancel: checkpoints deleted",
        job=job_id,
        count=cleanup.checkpoints_deleted,
        in_progress_aborted=cleanup.in_progress_aborted,
    )
    return cleanup
