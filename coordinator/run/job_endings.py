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
  (``DELETE``, :mod:`~twophase.coordinator.run.cancel`).

Each is an object built with only the collaborators it uses (issue #42 item 5); ``JobRuntime``
takes the job's transitions around them (FINISHING, STOPPING, CANCELLING, …) and fails the job
when one raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.checkpoint.driver_finish import (
    final_participants,
    finish_on_driver,
    finish_subtasks,
)
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.cancel import abort_in_doubt, commit_durable, delete_checkpoints, keep_going
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS
from twophase.coordinator.run.lingering_cleanup import LingeringCleanup
from twophase.coordinator.run.run_steps import CheckpointCompletion, LingeringSweep, RunCommits, RunProgress
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.metrics import CheckpointMetrics
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


class FinalCheckpoint:
    """The final checkpoint of a finish, or of a stop with savepoint and drain (FLIP-147).

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        coord: the run's checkpoint coordinator.
        checkpoints: the job's completed checkpoints (the last source position).
        progress: the run's ids (the final checkpoint is triggered).
        completion: the run's checkpoint completion.
        commits: the run's commits (drained).
        sweep: the run's lingering sweep.
        fault: the fault-point hook.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        coord: CheckpointCoordinator,
        checkpoints: CompletedCheckpointStore,
        progress: RunProgress,
        completion: CheckpointCompletion,
        commits: RunCommits,
        sweep: LingeringSweep,
        fault: Callable[[str], None],
    ) -> None:
        self._job_id = job_id
        self._sinks = sinks
        self._coord = coord
        self._checkpoints = checkpoints
        self._progress = progress
        self._completion = completion
        self._commits = commits
        self._sweep = sweep
        self._fault = fault

    def take(self, kind: CheckpointKind, source_position: JsonObject | None, fault: str) -> CheckpointMetrics:
        """Finish every live subtask, take ONE final checkpoint of ``kind`` (FINAL, or SAVEPOINT
        for a drained stop), commit it, abort what lingers. ``fault`` fires before it is persisted.

        Raises:
            whatever completing the checkpoint raises (storage, commit errors).
        """
        coord = self._coord
        finish_subtasks(coord)
        participants = final_participants(coord, self._sinks)
        last = self._checkpoints.last
        position = (
            source_position if source_position is not None else (last.source_position if last else None)
        )
        pc = coord.trigger(kind, participants, source_position=position, end_of_input=True)
        self._progress.triggered(pc.checkpoint_id)
        on_driver = [
            (n, p, coord.parallelism.get(n, p + 1)) for n, parts in participants.items() for p in parts
        ]
        finish_on_driver(self._job_id, self._sinks, coord, pc.checkpoint_id, on_driver)
        self._fault(fault)
        metrics = self._completion.complete(pc.checkpoint_id, notify=True, abort_lingering=False)
        self._commits.drain()
        self._sweep.abort_live(pc.checkpoint_id)
        return metrics


class SuspendCheckpoint:
    """The checkpoint of a stop with savepoint without drain, or of a plain stop.

    Args:
        coord: the run's checkpoint coordinator.
        checkpoints: the job's completed checkpoints (the last source position).
        progress: the run's ids (the checkpoint is triggered).
        completion: the run's checkpoint completion.
        commits: the run's commits (drained).
        sweep: the run's lingering sweep.
        fault: the fault-point hook.
    """

    def __init__(
        self,
        coord: CheckpointCoordinator,
        checkpoints: CompletedCheckpointStore,
        progress: RunProgress,
        completion: CheckpointCompletion,
        commits: RunCommits,
        sweep: LingeringSweep,
        fault: Callable[[str], None],
    ) -> None:
        self._coord = coord
        self._checkpoints = checkpoints
        self._progress = progress
        self._completion = completion
        self._commits = commits
        self._sweep = sweep
        self._fault = fault

    def take(self, kind: CheckpointKind, fault: str) -> CheckpointRef:
        """Take a checkpoint of ``kind`` (SAVEPOINT, or CHECKPOINT for a plain stop) holding the
        in-progress state, commit what is pending, close the subtasks, abort what lingers.

        Returns:
            the checkpoint's ref.
        """
        coord = self._coord
        last = self._checkpoints.last
        pc = coord.trigger(kind, {}, source_position=last.source_position if last else None)
        self._progress.triggered(pc.checkpoint_id)
        self._fault(fault)
        self._completion.complete(pc.checkpoint_id, notify=True, abort_lingering=False)
        self._commits.drain()
        coord.close_subtasks("suspended")
        self._sweep.abort_live(pc.checkpoint_id)
        return coord.completed[-1].ref


class CancelCleanup:
    """The cleanup of a cancel, once it closed the subtasks.

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        storage: the job's checkpoint storage (which checkpoints landed).
        checkpoints: the job's completed checkpoints (their metadata cache, for a delete).
        coord: the canceled run's coordinator, or ``None`` if no restore made one.
        committer: the canceled run's committer (shut down; aborts still run on it); needed with
            ``coord``.
        lingering: the canceled run's lingering cleanup; needed with ``coord``.
        spare_committer: a committer beside the run's, for the commits before a delete.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        storage: CheckpointStorage,
        checkpoints: CompletedCheckpointStore,
        coord: CheckpointCoordinator | None,
        committer: CommitterOperator | None,
        lingering: LingeringCleanup | None,
        spare_committer: Callable[[], AbstractContextManager[CommitterOperator]],
    ) -> None:
        self._job_id = job_id
        self._sinks = sinks
        self._storage = storage
        self._checkpoints = checkpoints
        self._coord = coord
        self._committer = committer
        self._lingering = lingering
        self._spare_committer = spare_committer

    def run(self, delete: bool) -> list[BaseException]:
        """Abort the in-doubt transactions whose checkpoint did not land, then abort what lingers
        (checkpoints kept), or commit what published checkpoints promised and delete them
        (savepoints kept). A delete that cannot go ahead (the checkpoints cannot be listed, or
        their commit failed) keeps the checkpoints and aborts what lingers. Every abort is tried: a
        failure is kept and the cleanup goes on (:func:`~twophase.coordinator.run.cancel.keep_going`).

        Returns:
            every failure, in order (empty: all clean).
        """
        failures: list[BaseException] = []
        coord = self._coord
        landed: set[int] | None = None
        try:
            landed = {r.checkpoint_id for r in self._storage.list_checkpoints()}
        except Exception as e:  # cannot tell which in-doubt checkpoint landed: a restore decides
            log_event(
                log, logging.ERROR, "cancel: checkpoints cannot be listed", job=self._job_id, error=repr(e)
            )
            failures.append(e)
        if coord is not None and landed is not None:
            assert self._committer is not None
            abort_in_doubt(coord, self._committer, landed, failures)
        if not delete or landed is None:  # deleting needs to know what was published
            self._abort_lingering(failures)
            return failures
        if coord is not None:
            try:
                with self._spare_committer() as committer:  # the run's own was shut down by the cancel
                    commit_durable(coord, committer, landed)
            except Exception as e:  # a checkpoint whose promise is not kept is never deleted
                log_event(
                    log, logging.ERROR, "cancel: commit before delete failed", job=self._job_id, error=repr(e)
                )
                failures.append(e)
                self._abort_lingering(failures)  # kept: clean up as RETAIN
                return failures
        live = coord.live_sinks() if coord is not None else None
        delete_all = partial(
            delete_checkpoints, self._job_id, self._sinks, self._checkpoints.cache, live, failures
        )
        keep_going(failures, self._job_id, "delete checkpoints", delete_all)
        return failures

    def _abort_lingering(self, failures: list[BaseException]) -> None:
        if self._coord is not None:
            assert self._lingering is not None
            abort_lingering(self._lingering, self._sinks, self._coord, self._job_id, failures)


def abort_lingering(
    lingering: LingeringCleanup,
    sinks: Mapping[str, AnySink],
    coord: CheckpointCoordinator | None,
    job_id: str,
    failures: list[BaseException],
) -> None:
    """Abort, per live sink of ``coord``, every transaction no kept checkpoint holds (the cleanup
    of a cancel that keeps its checkpoints); each failure is appended to ``failures`` and the next
    sink tried (:func:`~twophase.coordinator.run.cancel.keep_going`). Nothing to do without ``coord``."""
    if coord is None:
        return
    for name in coord.live_sinks():
        step = f"abort lingering transactions of sink {name!r}"
        abort = partial(lingering.abort, sinks[name], ALL_CHECKPOINTS, coord)
        keep_going(failures, job_id, step, abort)
