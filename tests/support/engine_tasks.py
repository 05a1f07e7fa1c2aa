"""What an engine's tasks and a checkpoint store do to a job, for model-based tests.

:func:`run_tasks` runs one epoch's tasks in-process the way Spark runs them: one task per
partition through the production executor loop, each following a :data:`TASK_PLANS` entry (a
task that fails and is retried, an executor lost mid-task with nothing cleaned up, a zombie or
speculative attempt finishing after the winner, a stage that fails). :class:`RecordingStorage`
remembers every checkpoint that landed, and :func:`publish_fault` makes the next publish fail
the ways a store fails (refused; unknown outcome, landed or not).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Final

import pyarrow as pa

from support.memory_storage import InMemoryCheckpointStorage, MemoryStore
from twophase.coordinator.run.fanout import EpochPlan, write_subtasks
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import CheckpointPublishUnknownError, CheckpointStorageError

TASK_PLANS: Final = (
    "ok",
    "fails",
    "lost",
    "zombie_reports",
    "zombie_silent",
    "zombie_after_publish",
    "output_lost",
    "stage_fails",
)
"""How one partition's task goes:

- ``ok``: attempt 0 succeeds;
- ``fails``: attempt 0 raises at the fault point (its executor loop aborts what it opened),
  attempt 1 succeeds;
- ``lost``: attempt 0's executor dies at the fault point (nothing cleaned up), attempt 1 succeeds;
- ``zombie_reports``: attempt 0 succeeds, then attempt 1 of the same partition runs to the end
  and reports too (a speculative copy, a zombie of a lost stage): the epoch discards its report;
- ``zombie_silent``: the same, but the late attempt's report never arrives;
- ``zombie_after_publish``: attempt 0 succeeds and reports; attempt 1 (a zombie of an earlier
  stage attempt Spark left running) starts only after the checkpoint was published, before its
  commit, and its report never arrives (:func:`zombies_after_publish` runs it; #26 item 4);
- ``output_lost``: attempt 0 succeeds (writes, pre-commits), but its report is lost before the
  driver has it: the write is a shuffle map stage when the acknowledgements are gathered
  (``tasks.acknowledgements_of``), and an executor lost before the gather fetched its output makes
  Spark run the write stage again for that partition, numbering attempts from 0 again
  (SPARK-24552). So attempt 0 runs a second time, **with the same attempt number**, and only that
  run reports; the first run's transaction must never commit (issue #42);
- ``stage_fails``: the task fails every attempt; the epoch fails.
"""

TASK_POINTS: Final = ("before_write", "mid_write", "pre_commit", "after_pre_commit")
"""Where a failing attempt fails: at ``write_subtasks``' fault points, or ``pre_commit``: inside one
sink's pre-commit (or ``finish``), the sink ``p % len(sinks)`` of partition ``p``, while the
others' pre-commits end as they do (all of them when the task pre-commits at once, as Spark's
tasks do; those before it in plan order otherwise), so that the attempt's abort meets some
transactions pre-committed and some open (issue #44's concurrent pre-commits)."""
PUBLISH_FAULTS: Final = ("ok", "refused", "unknown_landed", "unknown_not_landed", "landed_reported_failed")


class TaskFailure(Exception):
    """A task raised: its executor loop aborts what it opened; Spark retries it."""


class ExecutorLost(BaseException):
    """The executor died mid-task: nothing is cleaned up (a ``BaseException``, like a kill)."""


def key_value_batch(keys: Sequence[str]) -> pa.RecordBatch:
    """A batch with string columns ``key`` and ``value``, both ``keys``."""
    return pa.record_batch({"key": pa.array(keys, pa.string()), "value": pa.array(keys, pa.string())})


def _raise_at(point: str, error: BaseException) -> Callable[[str], None]:
    def hook(reached: str) -> None:
        if reached == point:
            raise error

    return hook


def _no_fault(point: str) -> None:
    return None


@contextmanager
def _pre_commit_raises(sink: TwoPhaseCommitSink[Any, Any], error: BaseException) -> Iterator[None]:
    """``sink``'s pre-commit and ``finish`` raise ``error`` instead of closing the transaction."""

    def fail(txn: Any) -> Any:
        raise error

    sink.pre_commit = fail  # type: ignore[method-assign]
    sink.finish = fail  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del sink.pre_commit
        del sink.finish  # type: ignore[attr-defined]


@contextmanager
def _killed(sinks: Sequence[TwoPhaseCommitSink[Any, Any]]) -> Iterator[None]:
    """A dead executor runs no clean-up: ``abort_open`` does nothing while the task dies."""
    for sink in sinks:
        sink.abort_open = lambda txn: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        for sink in sinks:
            del sink.abort_open


def _retried(
    plan: EpochPlan, p: int, batches: list[pa.RecordBatch], how: str, point: str, at_once: bool
) -> list[Acknowledgement]:
    error: BaseException = TaskFailure(point) if how == "fails" else ExecutorLost(point)
    try:
        with ExitStack() as faults:
            if how == "lost":
                faults.enter_context(_killed(plan.sinks))
            if point == "pre_commit" and plan.sinks:
                faults.enter_context(_pre_commit_raises(plan.sinks[p % len(plan.sinks)], error))
            first = write_subtasks(
                plan, p, 0, batches, fault=_raise_at(point, error), pre_commit_at_once=at_once
            )
    except (TaskFailure, ExecutorLost):
        return write_subtasks(plan, p, 1, batches, fault=_no_fault, pre_commit_at_once=at_once)
    return first  # the point was never reached (nothing to write)


LOST_OUTPUTS: list[Acknowledgement] = []
"""The reports of every ``output_lost`` first run (never delivered), oldest first, so that a model
can check that none of their transactions ever commits; a model clears it when it starts."""


def run_tasks(
    plan: EpochPlan, records: Sequence[str], plans: Sequence[str], point: str, *, at_once: bool = False
) -> list[Acknowledgement]:
    """Run the epoch's tasks: partition ``p`` writes ``records[p::num_partitions]`` (as two
    batches) and goes as ``plans[p]`` says; ``point`` (one of :data:`TASK_POINTS`) is where
    failing attempts fail; ``at_once``: each task pre-commits its sinks at once, one thread each,
    as Spark's tasks do (``write_subtasks``' ``pre_commit_at_once``). Returns the reports the
    driver receives, in arrival order.

    Raises:
        TaskFailure: a ``stage_fails`` partition.
        ValueError: an unknown plan, or fewer plans than partitions.
    """
    if len(plans) < plan.num_partitions:
        raise ValueError(f"{len(plans)} task plans for {plan.num_partitions} partitions")
    acks: list[Acknowledgement] = []

    def write(p: int, attempt: int, batches: list[pa.RecordBatch]) -> list[Acknowledgement]:
        return write_subtasks(plan, p, attempt, batches, fault=_no_fault, pre_commit_at_once=at_once)

    for p in range(plan.num_partitions):
        keys = list(records[p :: plan.num_partitions])
        batches = [key_value_batch(keys[:1]), key_value_batch(keys[1:])] if keys else []
        how = plans[p]
        if how in ("ok", "zombie_after_publish"):
            acks += write(p, 0, batches)
        elif how in ("fails", "lost"):
            acks += _retried(plan, p, batches, how, point, at_once)
        elif how in ("zombie_reports", "zombie_silent"):
            acks += write(p, 0, batches)
            late = write(p, 1, batches)
            if how == "zombie_reports":
                acks += late
        elif how == "output_lost":
            LOST_OUTPUTS.extend(write(p, 0, batches))  # never delivered
            acks += write(p, 0, batches)  # the retried stage's
        elif how == "stage_fails":
            raise TaskFailure(f"partition {p} failed every attempt")
        else:
            raise ValueError(f"unknown task plan {how!r}; known: {TASK_PLANS}")
    return acks


def zombies_after_publish(
    storage: InMemoryCheckpointStorage, plan: EpochPlan, records: Sequence[str], plans: Sequence[str]
) -> None:
    """Arm ``storage`` so that, right after the epoch's checkpoint becomes visible, attempt 1 of
    every ``zombie_after_publish`` partition runs to the end (writes, pre-commits; its report is
    lost), before the driver commits. Chains any ``after_publish_hook`` already armed."""
    zombies = [p for p in range(plan.num_partitions) if plans[p] == "zombie_after_publish"]
    if not zombies:
        return
    then = storage.after_publish_hook
    fired = [False]

    def hook(meta: CheckpointMetadata) -> None:
        if not fired[0] and meta.checkpoint_id == plan.checkpoint_id:
            fired[0] = True
            for p in zombies:
                keys = list(records[p :: plan.num_partitions])
                batches = [key_value_batch(keys[:1]), key_value_batch(keys[1:])] if keys else []
                write_subtasks(plan, p, 1, batches, fault=_no_fault)
        if then is not None:
            then(meta)

    storage.after_publish_hook = hook


class RecordingStorage(InMemoryCheckpointStorage):
    """In-memory checkpoint storage that remembers every metadata that landed (including one whose
    publish then reported an unknown outcome), in order, in :attr:`landed`.

    Attributes:
        landed_error: raised once, as is, by the next publish after its checkpoint landed: a
            backend reporting a visible checkpoint as a plain failure (S3's 412 after a retry whose
            read-back kept failing, #26), which the coordinator must treat as an unknown outcome.
    """

    def __init__(self, job_id: str, store: MemoryStore) -> None:
        super().__init__(job_id, store)
        self.landed: list[CheckpointMetadata] = []
        self.landed_error: Exception | None = None

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """See :meth:`InMemoryCheckpointStorage.publish`."""
        before = len(self.published)
        try:
            ref = super().publish(metadata)
        finally:
            if len(self.published) > before:
                self.landed.append(metadata)
        error, self.landed_error = self.landed_error, None
        if error is not None:
            raise error
        return ref


def _once(error: BaseException) -> Callable[[CheckpointMetadata], None]:
    fired = [False]

    def hook(meta: CheckpointMetadata) -> None:
        if not fired[0]:
            fired[0] = True
            raise error

    return hook


def publish_fault(storage: RecordingStorage, mode: str) -> None:
    """Make ``storage``'s next publish fail as ``mode`` (:data:`PUBLISH_FAULTS`) says: ``refused``
    (nothing lands: not published), ``unknown_landed`` (it lands, the writer hears an unknown
    outcome), ``unknown_not_landed`` (a timeout: nothing lands, the writer cannot know),
    ``landed_reported_failed`` (it lands, the backend says a plain ``CheckpointStorageError``:
    an exit not proven "not published", so unknown).

    Raises:
        ValueError: an unknown mode.
    """
    if mode == "refused":
        storage.publish_hook = _once(OSError("checkpoint storage refused the write"))
    elif mode == "unknown_landed":
        storage.after_publish_hook = _once(OSError("connection reset after the write"))
    elif mode == "unknown_not_landed":
        storage.publish_hook = _once(CheckpointPublishUnknownError("timed out; it may not have landed"))
    elif mode == "landed_reported_failed":
        storage.landed_error = CheckpointStorageError("412 after a retry, and reading it back kept failing")
    elif mode != "ok":
        raise ValueError(f"unknown publish fault {mode!r}; known: {PUBLISH_FAULTS}")
