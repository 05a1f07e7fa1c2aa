"""How a job ends: the final checkpoint (finish; stop with savepoint and drain), the suspend
checkpoint (stop with savepoint without drain; plain stop) and the cleanup of a cancel.

- **Final checkpoint** (FLIP-147): every live subtask finishes (flushes into its current
  transaction, opens no new one), then ONE checkpoint is taken for all sinks — k finishing sinks
  cost one checkpoint, not k. In-progress data is turned into committables on the driver. The
  first notification after finish() commits everything and the subtasks close.
- **Suspend checkpoint** ("reinforce job stop semantic"): one checkpoint holding the last source
  position and the in-progress state, pending commits committed, subtasks closed; a resume
  continues the same in-progress transactions and replays nothing.
- **Cancel cleanup**: keep completed checkpoints (``RETAIN``: abort what lingers) or delete them
  (``DELETE``, :mod:`~twophase.coordinator.cancel`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from twophase.coordinator.cancel import abort_in_doubt, commit_durable, delete_checkpoints, keep_going
from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.driver_finish import final_participants, finish_on_driver, finish_subtasks
from twophase.coordinator.job_lifecycle import JobState, JobTransition
from twophase.coordinator.lingering import ALL_CHECKPOINTS
from twophase.coordinator.lingering_cleanup import LingeringCleanup
from twophase.coordinator.metadata import CheckpointKind
from twophase.coordinator.metrics import CheckpointMetrics
from twophase.coordinator.run_state import AnySink, RunState
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import JobError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


def final_checkpoint(
    s: RunState, kind: CheckpointKind, source_position: JsonObject | None, fault: str
) -> CheckpointMetrics:
    """Finish every live subtask, take ONE final checkpoint of ``kind`` (FINAL, or SAVEPOINT for a
    drained stop), commit it, abort what lingers. ``fault`` fires before it is persisted.

    Raises:
        whatever completing the checkpoint raises (storage, commit errors).
    """
    coord = s.coordinator()
    finish_subtasks(coord)
    participants = final_participants(coord, s.sinks)
    last = s.checkpoints.last
    position = source_position if source_position is not None else (last.source_position if last else None)
    pc = coord.trigger(kind, participants, source_position=position, end_of_input=True)
    s.triggered(pc.checkpoint_id)
    on_driver = [(n, p, coord.parallelism.get(n, p + 1)) for n, parts in participants.items() for p in parts]
    finish_on_driver(s.job_id, s.sinks, coord, pc.checkpoint_id, on_driver)
    s.fault(fault)
    metrics = s.complete(pc.checkpoint_id, notify=True, abort_lingering=False)
    s.drain_commits()
    s.abort_lingering_live(pc.checkpoint_id)
    return metrics


def suspend_checkpoint(s: RunState, kind: CheckpointKind, fault: str) -> CheckpointRef:
    """Take a checkpoint of ``kind`` (SAVEPOINT, or CHECKPOINT for a plain stop) holding the
    in-progress state, commit what is pending, close the subtasks, abort what lingers.

    Returns:
        the checkpoint's ref.
    """
    coord = s.coordinator()
    last = s.checkpoints.last
    pc = coord.trigger(kind, {}, source_position=last.source_position if last else None)
    s.triggered(pc.checkpoint_id)
    s.fault(fault)
    s.complete(pc.checkpoint_id, notify=True, abort_lingering=False)
    s.drain_commits()
    coord.close_subtasks("suspended")
    s.abort_lingering_live(pc.checkpoint_id)
    return coord.completed[-1].ref


def cancel_cleanup(s: RunState, delete: bool) -> list[BaseException]:
    """After a cancel closed the subtasks: abort the in-doubt transactions whose checkpoint did
    not land, then abort what lingers (checkpoints kept), or commit what published checkpoints
    promised and delete them (savepoints kept). A delete that cannot go ahead (the checkpoints
    cannot be listed, or their commit failed) keeps the checkpoints and aborts what lingers. Every
    abort is tried: a failure is kept and the cleanup goes on
    (:func:`~twophase.coordinator.cancel.keep_going`).

    Returns:
        every failure, in order (empty: all clean).
    """
    failures: list[BaseException] = []
    coord = s.coord
    landed: set[int] | None = None
    try:
        landed = {r.checkpoint_id for r in s.storage.list_checkpoints()}
    except Exception as e:  # cannot tell which in-doubt checkpoint landed: a restore decides
        log_event(log, logging.ERROR, "cancel: checkpoints cannot be listed", job=s.job_id, error=repr(e))
        failures.append(e)
    if coord is not None and landed is not None:
        abort_in_doubt(coord, s.committer, landed, failures)
    if not delete or landed is None:  # deleting needs to know what was published
        abort_lingering(s.lingering, s.sinks, coord, s.job_id, failures)
        return failures
    if coord is not None:
        try:
            with s.spare_committer() as committer:  # the run's own was shut down by the cancel
                commit_durable(coord, committer, landed)
        except Exception as e:  # a checkpoint whose promise is not kept is never deleted
            log_event(log, logging.ERROR, "cancel: commit before delete failed", job=s.job_id, error=repr(e))
            failures.append(e)
            abort_lingering(s.lingering, s.sinks, coord, s.job_id, failures)  # kept: clean up as RETAIN
            return failures
    live = coord.live_sinks() if coord is not None else None
    delete_all = partial(delete_checkpoints, s.job_id, s.sinks, s.checkpoints.cache, live, failures)
    keep_going(failures, s.job_id, "delete checkpoints", delete_all)
    return failures


def abort_lingering(
    lingering: LingeringCleanup,
    sinks: Mapping[str, AnySink],
    coord: CheckpointCoordinator | None,
    job_id: str,
    failures: list[BaseException],
) -> None:
    """Abort, per live sink of ``coord``, every transaction no kept checkpoint holds (the cleanup
    of a cancel that keeps its checkpoints); each failure is appended to ``failures`` and the next
    sink tried (:func:`~twophase.coordinator.cancel.keep_going`). Nothing to do without ``coord``."""
    if coord is None:
        return
    for name in coord.live_sinks():
        step = f"abort lingering transactions of sink {name!r}"
        abort = partial(lingering.abort, sinks[name], ALL_CHECKPOINTS, coord)
        keep_going(failures, job_id, step, abort)


def finish_job(s: RunState, source_position: JsonObject | None) -> CheckpointMetrics | None:
    """``JobRuntime.finish``: RUNNING → FINISHING → (final checkpoint) → FINISHED; ``None`` when
    the job was restored from a final checkpoint and nothing ran since."""
    with s.lock:
        s.lifecycle.require(JobState.RUNNING, action="finish")
        s.require_no_pending("finish")
        s.transition(JobTransition.FINISH)
        with s.guard():
            s.fault("during_finish")
            s.housekeeping()
            restored = s.checkpoints.restored
            metrics = None
            if restored is not None and restored.end_of_input and s.epochs_since_restore == 0:
                log_event(
                    log,
                    logging.INFO,
                    "job restored from a final checkpoint: nothing to finish",
                    job=s.job_id,
                    checkpoint=restored.checkpoint_id,
                )
            else:
                metrics = final_checkpoint(
                    s, CheckpointKind.FINAL, source_position, "during_final_checkpoint"
                )
            s.transition(JobTransition.FINISHED)
            return metrics


def stop_with_savepoint(s: RunState, drain: bool) -> CheckpointRef:
    """``JobRuntime.stop_with_savepoint``: STOPPING → FINISHED (drain) or SUSPENDED."""
    with s.lock:
        s.lifecycle.require(JobState.RUNNING, action="stop_with_savepoint")
        s.require_no_pending("stop_with_savepoint")
        s.transition(JobTransition.STOP)
        with s.guard():
            s.housekeeping()
            if drain:
                final_checkpoint(s, CheckpointKind.SAVEPOINT, None, "during_stop_with_savepoint")
                ref = s.coordinator().completed[-1].ref
                s.transition(JobTransition.STOPPED_DRAINED)
            else:
                ref = suspend_checkpoint(s, CheckpointKind.SAVEPOINT, "during_stop_with_savepoint")
                s.transition(JobTransition.SUSPEND)
            return ref


def stop_job(s: RunState) -> CheckpointRef:
    """``JobRuntime.stop``: STOPPING → (retained checkpoint) → SUSPENDED."""
    with s.lock:
        s.lifecycle.require(JobState.RUNNING, action="stop")
        s.require_no_pending("stop")
        s.transition(JobTransition.STOP)
        with s.guard():
            s.housekeeping()
            ref = suspend_checkpoint(s, CheckpointKind.CHECKPOINT, "during_stop_with_savepoint")
            s.transition(JobTransition.SUSPEND)
            return ref


def cancel_job(s: RunState) -> None:
    """``JobRuntime.cancel``: CANCELLING at once (retries stop), then, once the running action has
    returned, close subtasks and clean up per ``RuntimeConfig.cancel_cleanup``; CANCELED.

    Raises:
        JobError: canceled, but cleanup steps failed (each logged, all named; every other step
            was done; the job is CANCELED anyway).
    """
    s.lifecycle.transition(JobTransition.CANCEL)
    s.cancel_requested.set()
    s.committer.cancel()
    with s.lock:
        errors: list[BaseException] = []
        s.fault("during_cancel")
        if s.coord is not None:
            try:
                s.coord.close_subtasks("canceled")
            except Exception as e:
                log_event(log, logging.ERROR, "cancel: closing subtasks failed", exc_info=True, job=s.job_id)
                errors.append(e)
        s.committer.shutdown(wait=False)
        try:
            errors.extend(cancel_cleanup(s, delete=s.config.cancel_cleanup.value == "delete"))
        except Exception as e:
            log_event(log, logging.ERROR, "cancel: cleanup failed", exc_info=True, job=s.job_id)
            errors.append(e)
        s.lifecycle.transition(JobTransition.CANCELED)
        if errors:
            raise JobError(
                f"job {s.job_id} canceled, but cleanup failed ({len(errors)} failures, every other "
                f"step done): {'; '.join(repr(e) for e in errors)}"
            ) from errors[0]
