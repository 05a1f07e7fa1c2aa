"""One run of a job: what each restore starts (issue #42 item 5).

A :class:`Run` owns its committer operator, its lingering cleanup and, once its restore has made
it, its checkpoint coordinator; it reads the job's completed checkpoints
(:class:`~twophase.coordinator.checkpoint.completed_checkpoints.CompletedCheckpointStore`, which outlives a
run as Flink's does a failover: the restore reads it, and its metadata cache keeps what earlier
runs read). When the coordinator exists the run builds the steps its epochs and endings use
(:mod:`~twophase.coordinator.run.run_steps`), each with only its collaborators. Its named
transitions: :meth:`Run.started` (the restore made the coordinator), :meth:`Run.fail`
(FAILING: subtasks closed, committer stopped) and :meth:`Run.abandon` (a simulated crash).
``JobRuntime`` holds the current run and replaces it at each restore.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.lingering_cleanup import LingeringCleanup
from twophase.coordinator.run.run_steps import (
    CheckpointCompletion,
    CheckpointHistory,
    LingeringSweep,
    RunCommits,
    RunProgress,
)
from twophase.coordinator.state.id_floor import IdFloor
from twophase.coordinator.state.job_lifecycle import JobLifecycle
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import IllegalTransitionError, JobError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class RunSettings:
    """What a run's steps are configured with (from ``RuntimeConfig``).

    Attributes:
        commit_drain_timeout_s: how long an ending waits for asynchronous commits (``None``: forever).
        abort_lingering_each_epoch: sweep what lingers after each completed epoch.
    """

    commit_drain_timeout_s: float | None
    abort_lingering_each_epoch: bool


@dataclass(frozen=True)
class _Started:
    coord: CheckpointCoordinator
    progress: RunProgress
    commits: RunCommits
    sweep: LingeringSweep
    completion: CheckpointCompletion


class Run:
    """One restore's run (see the module docstring). Not thread-safe: the runtime's lock guards it.

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        lifecycle: the job's lifecycle (read for messages only).
        committer: the run's committer operator (a new one per run).
        checkpoints: the job's completed checkpoints.
        lingering: the run's lingering cleanup.
        history: the job's checkpoint metrics.
        settings: the steps' settings.
        fault: the fault-point hook.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        lifecycle: JobLifecycle,
        committer: CommitterOperator,
        checkpoints: CompletedCheckpointStore,
        lingering: LingeringCleanup,
        history: CheckpointHistory,
        settings: RunSettings,
        fault: Callable[[str], None],
    ) -> None:
        self.job_id = job_id
        self._sinks = sinks
        self._lifecycle = lifecycle
        self._committer = committer
        self._checkpoints = checkpoints
        self._lingering = lingering
        self._history = history
        self._settings = settings
        self._fault = fault
        self._started: _Started | None = None
        self._abandoned = False

    # -- what the run owns (read-only to the other parts) ------------------------------------------

    @property
    def committer(self) -> CommitterOperator:
        """The run's committer operator."""
        return self._committer

    @property
    def lingering(self) -> LingeringCleanup:
        """The run's lingering cleanup."""
        return self._lingering

    @property
    def coord(self) -> CheckpointCoordinator | None:
        """The run's checkpoint coordinator, ``None`` until its restore made it."""
        return None if self._started is None else self._started.coord

    @property
    def abandoned(self) -> bool:
        """True once the driver died (a simulated crash): the run refuses further use."""
        return self._abandoned

    def coordinator(self) -> CheckpointCoordinator:
        """The run's coordinator.

        Raises:
            JobError: the run was abandoned (a simulated crash).
            IllegalTransitionError: its restore has not made it yet.
        """
        return self._steps().coord

    @property
    def progress(self) -> RunProgress:
        """Ids and epochs of the run (after :meth:`started`; raises as :meth:`coordinator`)."""
        return self._steps().progress

    @property
    def commits(self) -> RunCommits:
        """The run's commits (after :meth:`started`; raises as :meth:`coordinator`)."""
        return self._steps().commits

    @property
    def sweep(self) -> LingeringSweep:
        """The run's lingering sweep (after :meth:`started`; raises as :meth:`coordinator`)."""
        return self._steps().sweep

    @property
    def completion(self) -> CheckpointCompletion:
        """The run's checkpoint completion (after :meth:`started`; raises as :meth:`coordinator`)."""
        return self._steps().completion

    def _steps(self) -> _Started:
        if self._abandoned:
            raise JobError(f"job {self.job_id}: this runtime was abandoned (simulated crash)")
        if self._started is None:
            raise IllegalTransitionError(
                f"job {self.job_id}", self._lifecycle.state.value, "use before restore()"
            )
        return self._started

    # -- named transitions of the run --------------------------------------------------------------

    def started(self, id_floor: IdFloor, coord: CheckpointCoordinator) -> None:
        """The restore made the run's coordinator ``coord``, ids above ``id_floor``: the run's
        steps are built.

        Raises:
            IllegalTransitionError: the run was started already.
        """
        if self._started is not None:
            raise IllegalTransitionError(f"job {self.job_id}", "started", "start the run again")
        commits = RunCommits(coord, self._committer, self._checkpoints, self._settings.commit_drain_timeout_s)
        sweep = LingeringSweep(self._sinks, coord, self._lingering)
        completion = CheckpointCompletion(
            self.job_id,
            self._sinks,
            coord,
            self._checkpoints,
            commits,
            sweep,
            self._history,
            self._fault,
            self._settings.abort_lingering_each_epoch,
        )
        self._started = _Started(coord, RunProgress(id_floor), commits, sweep, completion)

    def fail(self, error: BaseException) -> None:
        """The job fails: close the subtasks (aborting what is not durable), stop the committer."""
        coord = self.coord
        if coord is not None:
            try:
                coord.close_subtasks(f"failure: {error!r}")
            except Exception:  # cleanup is best effort; lingering cleanup on restore finishes it
                log_event(log, logging.ERROR, "closing subtasks after a failure failed", exc_info=True)
        self._committer.shutdown(wait=False)

    def abandon(self) -> None:
        """The driver dies (a simulated crash): nothing is closed, aborted or committed, the run
        refuses further use, the committer thread stops."""
        self._abandoned = True
        self._committer.shutdown(wait=False)
