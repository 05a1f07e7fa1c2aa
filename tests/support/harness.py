"""A deterministic, in-process test harness for two-phase-commit sinks (like Flink's operator test
harnesses). Not a data engine: data at scale runs on Spark.

It drives real :class:`~twophase.coordinator.run.runtime.JobRuntime` objects over in-memory checkpoint
storage with a manual clock, through the production code paths: every subtask runs the executor
loop :func:`~twophase.coordinator.run.fanout.write_subtasks` in-process, and a whole epoch runs the one
epoch loop :func:`~twophase.coordinator.run.epoch.run_epoch`. Tests can script any interleaving:

- concurrent checkpoints: several :meth:`TwoPhaseHarness.begin_epoch` before completing any
  (with ``CheckpointConfig.max_concurrent_checkpoints`` > 1);
- late, lost and out-of-order notifications: ``complete(epoch, notify=False)`` then
  :meth:`TwoPhaseHarness.notify` in any order, or never;
- failures at every step: :meth:`TwoPhaseHarness.crash_at` arms a named fault point
  (:data:`twophase.coordinator.state.faults.POINTS`); reaching it raises :class:`SimulatedCrash`;
- a driver crash and a restart in another process: :meth:`TwoPhaseHarness.restart_process`
  abandons the runtime (nothing is closed, committed or aborted) and builds a new one over the
  same storage and the same sinks (whose external system outlives the process, like a broker).

Typical use::

    h = TwoPhaseHarness([sink])
    h.restore()
    h.write_epoch([[batch(["a", "b"])], [batch(["c"])]])   # 2 partitions, checkpoint 1, committed
    h.runtime.finish()                                       # final checkpoint
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, overload

import pyarrow as pa

from support.clock import ManualClock
from support.memory_storage import InMemoryCheckpointStorage
from twophase.coordinator.run.epoch import Epoch, run_epoch
from twophase.coordinator.run.fanout import EpochPlan, write_subtasks
from twophase.coordinator.run.recovery import RestoreResult
from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.faults import POINTS
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.state.metrics import CheckpointMetrics
from twophase.coordinator.state.payload import decode_payload
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
R = TypeVar("R")


class SimulatedCrash(BaseException):
    """Raised at an armed fault point: the harness's stand-in for the process dying there.

    A ``BaseException`` (like ``SystemExit``), so the runtime's error handling — which catches
    ``Exception`` to fail the job and clean up — does not run: a killed process cleans nothing up.

    Attributes:
        point: the fault point's name.
    """

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


class FaultScript:
    """A fault hook (``Callable[[str], None]``) that raises :class:`SimulatedCrash` at the n-th hit
    of an armed point. Counts every point it sees in :attr:`hits`."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self._armed: dict[str, int] = {}
        # called with each point before the armed check: where a model orders its threads
        self.observer: Callable[[str], None] | None = None

    def arm(self, point: str, nth: int = 1) -> None:
        """Crash the ``nth`` time ``point`` is reached from now on.

        Raises:
            ValueError: unknown point, or ``nth`` < 1.
        """
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {sorted(POINTS)}")
        if nth < 1:
            raise ValueError("nth must be >= 1")
        self._armed[point] = self.hits[point] + nth

    def disarm(self) -> None:
        """Disarm every point."""
        self._armed.clear()

    def __call__(self, point: str) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}")
        self.hits[point] += 1
        if self.observer is not None:
            self.observer(point)
        if self._armed.get(point) == self.hits[point]:
            del self._armed[point]
            log.warning("harness: simulated crash at %s", point)
            raise SimulatedCrash(point)


@dataclass(frozen=True)
class SubtaskResult:
    """What one in-process subtask produced.

    Attributes:
        sink: sink name.
        partition: subtask index.
        attempt: the attempt number.
        committable: the decoded committable, or ``None`` (empty transaction).
        in_progress: the in-progress state snapshotted, or ``None``.
        records: records written.
        acknowledged: whether it was acknowledged (False for a discarded duplicate).
    """

    sink: str
    partition: int
    attempt: int
    committable: Any
    in_progress: JsonObject | None
    records: int
    acknowledged: bool


def batch(keys: Sequence[str], column: str = "key") -> pa.RecordBatch:
    """An Arrow batch with one string column (``key`` by default) holding ``keys``."""
    return pa.RecordBatch.from_pydict({column: pa.array(list(keys), pa.string())})


class TwoPhaseHarness:
    """Drives sinks through the protocol in-process; see the module docstring.

    Args:
        sinks: the job's sinks (their external system must outlive runtimes).
        job_id: the job id.
        config: runtime settings (default: retention 3, no restarts' delay matters: the clock is manual).
        storage: checkpoint storage (default: a new in-memory one).
        clock: the manual clock (also used as the sleep of restarts and commit backoff).
        real_commit_backoff: commit retries wait in real time, interruptibly by cancel (the
            production default), instead of advancing the manual clock.

    Attributes:
        runtime: the current runtime (replaced by :meth:`restart_process`).
        faults: the fault script shared by every runtime of this harness.
    """

    def __init__(
        self,
        sinks: Sequence[AnySink],
        *,
        job_id: str = "harness-job",
        config: RuntimeConfig | None = None,
        storage: InMemoryCheckpointStorage | None = None,
        clock: ManualClock | None = None,
        real_commit_backoff: bool = False,
    ) -> None:
        self.sinks = list(sinks)
        self.job_id = job_id
        self.config = config or RuntimeConfig()
        self.storage = storage or InMemoryCheckpointStorage(job_id)
        self.clock = clock or ManualClock()
        self.faults = FaultScript()
        self._real_commit_backoff = real_commit_backoff
        self.runtimes: list[JobRuntime] = []
        self.runtime = self._new_runtime()

    def _new_runtime(self) -> JobRuntime:
        rt = JobRuntime(
            self.job_id,
            self.sinks,
            self.storage,
            self.config,
            clock=self.clock,
            sleep=self.clock.sleep,
            commit_sleep=None if self._real_commit_backoff else self.clock.sleep,
            fault=self.faults,
        )
        self.runtimes.append(rt)
        return rt

    def sink(self, name: str) -> AnySink:
        """The sink called ``name``."""
        return next(s for s in self.sinks if s.name == name)

    # -- process-level actions ----------------------------------------------------------------------

    def restore(self, savepoint_location: str | None = None) -> RestoreResult:
        """``runtime.restore(...)``."""
        return self.runtime.restore(savepoint_location)

    def restart_process(
        self, *, restore: bool = True, savepoint_location: str | None = None
    ) -> RestoreResult | None:
        """Simulate the driver dying and a new one starting: abandon the runtime without closing
        anything, build a new one over the same storage and sinks, and (by default) restore it."""
        self.runtime.abandon()
        self.faults.disarm()
        self.runtime = self._new_runtime()
        return self.runtime.restore(savepoint_location) if restore else None

    def crash_at(self, point: str, nth: int = 1) -> None:
        """Arm fault ``point`` (:data:`~twophase.coordinator.state.faults.POINTS`) to crash at its
        ``nth`` hit."""
        self.faults.arm(point, nth)

    @staticmethod
    def expect_crash(action: Callable[[], R]) -> SimulatedCrash:
        """Run ``action`` and return the :class:`SimulatedCrash` it raised.

        Raises:
            AssertionError: it did not crash.
        """
        try:
            action()
        except SimulatedCrash as e:
            return e
        raise AssertionError("expected a simulated crash")

    # -- epochs ---------------------------------------------------------------------------------------

    def begin_epoch(self, num_partitions: int, source_position: JsonObject | None = None) -> Epoch:
        """``runtime.begin_epoch(...)``."""
        return self.runtime.begin_epoch(num_partitions, source_position)

    def run_subtask(
        self,
        epoch: Epoch,
        sink_name: str,
        partition: int,
        batches: Sequence[pa.RecordBatch],
        *,
        attempt: int = 0,
        acknowledge: bool = True,
    ) -> SubtaskResult:
        """Run one sink's subtask in-process through the production executor loop
        (:func:`~twophase.coordinator.run.fanout.write_subtasks`), then acknowledge it (unless told not to).

        Fault points ``before_write``, ``mid_write`` (after the first batch) and ``after_pre_commit``
        are honoured. An error before the pre-commit calls ``abort_open`` (as the executor side
        does); a simulated crash anywhere leaves the transaction open or pre-committed: lingering.
        """
        plan = replace(epoch.plan(), sinks=(self.sink(sink_name),))
        [ack] = write_subtasks(plan, partition, attempt, batches, fault=self.faults)
        acked = epoch.acknowledge(ack) if acknowledge else False
        return self._result(ack, acked)

    def _result(self, ack: Acknowledgement, acknowledged: bool) -> SubtaskResult:
        sink = self.sink(ack.sink)
        committable = None if ack.committable is None else decode_payload(sink, ack.committable)
        return SubtaskResult(
            ack.sink, ack.partition, ack.attempt, committable, ack.in_progress, ack.records or 0, acknowledged
        )

    def write_partitions(
        self, plan: EpochPlan, partitions: Sequence[Sequence[pa.RecordBatch]], *, attempt: int = 0
    ) -> list[Acknowledgement]:
        """The harness's write step: every partition's task (all sinks in one pass) in-process."""
        return [
            ack
            for p, batches in enumerate(partitions)
            for ack in write_subtasks(plan, p, attempt, batches, fault=self.faults)
        ]

    def run_to_finish(self, epochs: Sequence[tuple[JsonObject, Sequence[Sequence[pa.RecordBatch]]]]) -> int:
        """Drive ``epochs`` (source position, partitions) and finish, as an engine would across
        driver crashes: an epoch the latest checkpoint covers is skipped (replay check), and on a
        :class:`SimulatedCrash` the process restarts and the epochs run again.

        Returns:
            How many times the process crashed.
        """
        crashes = 0
        while True:
            try:
                for position, partitions in epochs:
                    if not self.runtime.replay_check(position):
                        self.write_epoch(partitions, source_position=position)
                self.runtime.finish()
                return crashes
            except SimulatedCrash:
                crashes += 1
                self.restart_process()

    @overload
    def write_epoch(
        self,
        partitions: Sequence[Sequence[pa.RecordBatch]],
        *,
        source_position: JsonObject | None = None,
        complete: Literal[True] = True,
        notify: Literal[True] = True,
    ) -> None: ...

    @overload
    def write_epoch(
        self,
        partitions: Sequence[Sequence[pa.RecordBatch]],
        *,
        source_position: JsonObject | None = None,
        complete: Literal[False],
        notify: bool = True,
    ) -> Epoch: ...

    @overload
    def write_epoch(
        self,
        partitions: Sequence[Sequence[pa.RecordBatch]],
        *,
        source_position: JsonObject | None = None,
        complete: bool = True,
        notify: Literal[False],
    ) -> Epoch: ...

    def write_epoch(
        self,
        partitions: Sequence[Sequence[pa.RecordBatch]],
        *,
        source_position: JsonObject | None = None,
        complete: bool = True,
        notify: bool = True,
    ) -> Epoch | None:
        """One epoch: ``partitions[p]`` is partition p's batches. With ``complete`` and ``notify``
        (the default) it is the production epoch loop (:func:`~twophase.coordinator.run.epoch.run_epoch`)
        and returns ``None``; otherwise it triggers, writes and acknowledges, then persists
        (``complete``) without the notification, and returns the epoch."""
        if complete and notify:
            run_epoch(
                self.runtime,
                len(partitions),
                lambda plan: self.write_partitions(plan, partitions),
                source_position,
            )
            return None
        epoch = self.begin_epoch(len(partitions), source_position)
        epoch.acknowledge_all(self.write_partitions(epoch.plan(), partitions))
        if complete:
            self.complete(epoch, notify=notify)
        return epoch

    def complete(self, epoch: Epoch, *, notify: bool = True) -> CheckpointMetrics:
        """``runtime.complete_epoch(epoch, notify=notify)``."""
        return self.runtime.complete_epoch(epoch, notify=notify)

    def job_state(self) -> JobState:
        """The runtime's state now. A call, not an attribute: after a transition, mypy keeps no
        narrowing from an earlier ``assert h.runtime.state is ...``."""
        return self.runtime.state

    def notify(self, checkpoint_id: int) -> None:
        """Deliver ``notify_checkpoint_complete(checkpoint_id)`` (late, repeated, out of order)."""
        self.runtime.notify_checkpoint_complete(checkpoint_id)

    # -- inspection ---------------------------------------------------------------------------------

    def checkpoints(self) -> list[CheckpointMetadata]:
        """Every published checkpoint and savepoint, ascending by id."""
        return [self.storage.load(r) for r in self.storage.list_checkpoints()]
