"""One epoch as the execution layer sees it, and the one loop that runs an epoch.

An epoch is the work between two checkpoints (DESIGN.md §6). :class:`Epoch` is its interface:
:meth:`Epoch.plan` is what every task needs (shipped to executors), :meth:`Epoch.acknowledge_table`
takes all of an epoch's acknowledgements as one Arrow table, as :func:`run_epoch` does
(:meth:`Epoch.acknowledge`: one subtask's
:class:`~twophase.coordinator.state.acknowledgement.Acknowledgement`, for tests and the driver's own).
:func:`run_epoch` is the single loop every engine runs — trigger, write, acknowledge, complete —
with only the write step engine-specific (Spark's ``mapInArrow``, the harness in-process, the
Python Data Source's tasks)::

    result = run_epoch(runtime, num_partitions, write, position)

``write(plan)`` returns the acknowledgements, as a table of
:data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA` (Spark's collection) or as objects (one
per sink and partition, duplicates allowed: a second acknowledgement of a (sink, partition) is
discarded, its transaction aborted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import PendingCheckpoint
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.checkpoint.driver_finish import epoch_participants, finish_on_driver
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.fanout import EpochPlan
from twophase.coordinator.run.run_steps import RunCommits, RunProgress
from twophase.coordinator.state import collector
from twophase.coordinator.state.acknowledgement import Acknowledgement, acknowledgement_table
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.metrics import CheckpointMetrics
from twophase.coordinator.state.payload import decode_payload
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import CommitWaitTimeoutError, JobError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
WriteStep = Callable[[EpochPlan], "pa.Table | Iterable[Acknowledgement]"]
"""The engine-specific step of an epoch: run every task of ``plan`` and return their
acknowledgements (a table of :data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA`, or objects)."""


def position_covers(stored: JsonObject | None, position: JsonObject) -> bool:
    """Whether a checkpoint at ``stored`` already covers the epoch at ``position`` (replay check).

    Positions with ``batch_id`` (Spark: ``{"engine", "query_id", "batch_id"}``) are covered when
    the engine and query id match and the stored batch id is ≥; other positions when equal.

    Raises:
        JobError: the engine or query id differ: the job is being restored against another
            engine checkpoint (e.g. a new Spark checkpoint directory), which is refused.
    """
    if stored is None:
        return False
    if "batch_id" in stored and "batch_id" in position:
        for key in ("engine", "query_id"):
            if stored.get(key) != position.get(key):
                raise JobError(
                    f"the job's checkpoint was taken with {key}={stored.get(key)!r} but the engine now "
                    f"reports {key}={position.get(key)!r}: restoring against a different engine "
                    f"checkpoint is refused (use a new job id, or the original checkpoint location)"
                )
        return int(stored["batch_id"]) >= int(position["batch_id"])
    return dict(stored) == dict(position)


class Epoch:
    """One epoch's checkpoint, as the execution layer sees it (from ``JobRuntime.begin_epoch``).

    Args:
        job_id: the job.
        pending: the epoch's pending checkpoint.
        num_partitions: the epoch's parallelism.
        sinks: the sinks that write in this epoch (not fully finished), in job order.
        restored: sink → partition → in-progress state each subtask resumes (partitions below
            ``num_partitions`` only; the rest was handed over to the driver).
        coordinator: the run's coordinator, checked (``Run.coordinator``: raises once the run was
            abandoned); it records the acknowledgements, under ``lock``.
        committer: the run's committer operator: it aborts a discarded duplicate's transaction.
        lock: the runtime's lock.

    Attributes:
        checkpoint_id: the checkpoint the epoch's transactions belong to.
        kind: the checkpoint's kind.
        num_partitions: the epoch's parallelism.
        source_position: the engine position it covers.
    """

    def __init__(
        self,
        job_id: str,
        pending: PendingCheckpoint,
        num_partitions: int,
        sinks: Sequence[AnySink],
        restored: Mapping[str, Mapping[int, JsonObject]],
        coordinator: Callable[[], CheckpointCoordinator],
        committer: CommitterOperator,
        lock: AbstractContextManager[Any],
    ) -> None:
        self.job_id = job_id
        self._pending = pending
        self._sinks = {s.name: s for s in sinks}
        self._restored = restored
        self._coordinator = coordinator
        self._committer = committer
        self._lock = lock
        self.checkpoint_id = pending.checkpoint_id
        self.kind = pending.kind
        self.num_partitions = num_partitions
        self.source_position = pending.source_position

    def __repr__(self) -> str:
        return f"Epoch(checkpoint_id={self.checkpoint_id}, num_partitions={self.num_partitions})"

    def plan(self) -> EpochPlan:
        """What every task of the epoch needs: shipped to executors (configuration only, no clients)."""
        return EpochPlan(
            job_id=self.job_id,
            checkpoint_id=self.checkpoint_id,
            num_partitions=self.num_partitions,
            sinks=tuple(self._sinks.values()),
            restored=self._restored,
        )

    def acknowledge(self, ack: Acknowledgement) -> bool:
        """Record one subtask's acknowledgement with the run's checkpoint coordinator
        (:meth:`~twophase.coordinator.checkpoint.checkpoint_coordinator.CheckpointCoordinator.acknowledge`,
        which decodes its committable, the epoch's only decode).

        Returns:
            True if recorded; False if the checkpoint was aborted meanwhile (committable aborted).

        Raises:
            DuplicateAcknowledgementError: already acknowledged (nothing kept; see :meth:`discard`).
            CommittableDecodeError: the committable does not decode.
            IllegalTransitionError: not expected, or the checkpoint is no longer pending.
            JobError: the run was abandoned (a simulated crash).
        """
        with self._lock:
            return self._coordinator().acknowledge(self.checkpoint_id, ack)

    def discard(self, ack: Acknowledgement) -> int:
        """Abort, now, the committable of an attempt that is not acknowledged (a duplicate or
        speculative attempt). Returns how many transactions were aborted (0 or 1)."""
        if ack.committable is None:
            return 0
        sink = self._sinks[ack.sink]
        txn = PendingTransaction(
            ack.sink, ack.partition, ack.attempt, self.checkpoint_id, decode_payload(sink, ack.committable), 0
        )
        self._committer.abort(txn)
        return 1

    def acknowledge_all(self, acks: Iterable[Acknowledgement]) -> Intake:
        """:meth:`acknowledge_table` of ``acks``, in the order given."""
        return self.acknowledge_table(acknowledgement_table(acks))

    def acknowledge_table(self, table: pa.Table) -> Intake:
        """Record every task's acknowledgement, given as one table of
        :data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA` in arrival order, with the run's
        checkpoint coordinator
        (:meth:`~twophase.coordinator.checkpoint.checkpoint_coordinator.CheckpointCoordinator.acknowledge_table`:
        checked in Arrow compute, all or nothing); a duplicate (a later attempt of a (sink,
        partition)) is discarded, its transaction aborted, and logged. The cyclic garbage collector
        is paused for the intake (:func:`~twophase.coordinator.state.collector.paused`): at 10⁵ subtasks
        × 3 sinks its full collections cost more than the intake itself (issue #29).

        Raises:
            whatever ``acknowledge_table`` raises (nothing is recorded then).
        """
        with collector.paused(), self._lock:
            taken = self._coordinator().acknowledge_table(self.checkpoint_id, table)
        discarded = 0
        for ack in taken.duplicates:  # the sink's abort: not in the pause
            discarded += self.discard(ack)
            log_event(
                log,
                logging.WARNING,
                "duplicate acknowledgement discarded",
                job=self.job_id,
                sink=ack.sink,
                checkpoint=self.checkpoint_id,
                partition=ack.partition,
                attempt=ack.attempt,
            )
        return Intake(taken.records, discarded)


@dataclass(frozen=True)
class Intake:
    """What :meth:`Epoch.acknowledge_all` recorded.

    Attributes:
        records: sink → records its acknowledged attempts wrote (an attempt that did not say
            counts 0).
        discarded: duplicate acknowledgements discarded (their transactions aborted).
    """

    records: Mapping[str, int]
    discarded: int


@dataclass(frozen=True)
class EpochResult:
    """What :func:`run_epoch` did.

    Attributes:
        checkpoint: the completed checkpoint's metrics.
        partitions: the epoch's parallelism.
        records: records written (each sink receives all of them), from the acknowledgements.
        write_ms: wall time of the write step (tasks writing and pre-committing), ms.
        epoch_ms: wall time of the whole epoch, ms.
        discarded: duplicate acknowledgements discarded (their transactions aborted).
    """

    checkpoint: CheckpointMetrics
    partitions: int
    records: int
    write_ms: float
    epoch_ms: float
    discarded: int


class EpochRuntime(Protocol):
    """What :func:`run_epoch` drives: ``JobRuntime``'s epoch calls (a protocol, so that the epoch
    does not import the runtime that creates it)."""

    @property
    def job_id(self) -> str: ...

    def begin_epoch(
        self,
        num_partitions: int,
        source_position: JsonObject | None = None,
        *,
        checkpoint_id: int | None = None,
    ) -> Epoch: ...

    def complete_epoch(self, epoch: Epoch) -> CheckpointMetrics: ...

    def abort_epoch_if_pending(self, epoch: Epoch, reason: str) -> list[int]: ...


def run_epoch(
    runtime: EpochRuntime,
    num_partitions: int,
    write: WriteStep,
    source_position: JsonObject | None = None,
    *,
    checkpoint_id: int | None = None,
) -> EpochResult:
    """Run one epoch: trigger its checkpoint, ``write(plan)``, acknowledge, persist and commit.

    Args:
        runtime: the job's runtime (RUNNING).
        num_partitions: the epoch's parallelism (≥ 1).
        write: runs the tasks and returns their acknowledgements.
        source_position: the engine position the epoch covers.
        checkpoint_id: force the checkpoint id (the Data Source facade: ids follow batch ids).

    Raises:
        Whatever ``write`` or the runtime raise; the epoch's checkpoint is aborted first if it is
        still pending (its pre-committed transactions aborted).
    """
    started = time.perf_counter()
    epoch = runtime.begin_epoch(num_partitions, source_position, checkpoint_id=checkpoint_id)
    try:
        write_started = time.perf_counter()
        acks = write(epoch.plan())
        write_ms = (time.perf_counter() - write_started) * 1000.0
        intake = epoch.acknowledge_table(acks if isinstance(acks, pa.Table) else acknowledgement_table(acks))
        metrics = runtime.complete_epoch(epoch)
    except Exception as e:  # not BaseException: a process going down cleans nothing up; restore does
        runtime.abort_epoch_if_pending(epoch, f"epoch failed: {e!r}")
        raise
    return EpochResult(
        checkpoint=metrics,
        partitions=num_partitions,
        records=max(intake.records.values(), default=0),
        write_ms=write_ms,
        epoch_ms=(time.perf_counter() - started) * 1000.0,
        discarded=intake.discarded,
    )


class PendingCommitLimit:
    """At most ``max_pending_checkpoints`` uncommitted checkpoints per sink that declares it
    (Kafka: a new epoch would re-initialise their pooled transactional ids and fence them).

    Args:
        job_id: the job.
        sinks: the job's sinks by name.
        coord: the run's checkpoint coordinator.
        commits: the run's commits (waited for).
        checkpoints: the job's completed checkpoints (the latest is notified again).
        drain_timeout_s: ``RuntimeConfig.commit_drain_timeout_s``: the wait's bound, if set.
        commit_policy: the job's commit policy: its retry budget is the bound when no sink has a
            transaction timeout (computed only then: it sums every backoff).
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        coord: CheckpointCoordinator,
        commits: RunCommits,
        checkpoints: CompletedCheckpointStore,
        drain_timeout_s: float | None,
        commit_policy: CommitPolicy,
    ) -> None:
        self._job_id = job_id
        self._sinks = sinks
        self._coord = coord
        self._commits = commits
        self._checkpoints = checkpoints
        self._drain_timeout_s = drain_timeout_s
        self._commit_policy = commit_policy

    def too_old_for(self, writing: int) -> dict[str, list[int]]:
        """Per sink declaring ``max_pending_checkpoints``: the uncommitted (or pending) checkpoints
        older than ``writing - max_pending_checkpoints``, the ones epoch ``writing`` must not start
        beside."""
        coord = self._coord
        pending = [p.checkpoint_id for p in coord.pending_checkpoints]
        out: dict[str, list[int]] = {}
        for name in coord.live_sinks():
            limit = self._sinks[name].max_pending_checkpoints
            if limit is None:
                continue
            ids = {t.checkpoint_id for t in coord.uncommitted_transactions() if t.sink_name == name} | set(
                pending
            )
            old = sorted(c for c in ids if c < writing - limit)
            if old:
                out[name] = old
        return out

    def wait_bound_s(self, sinks: Iterable[str]) -> float:
        """How long an epoch may wait for the commits of ``sinks`` (s): the drain timeout; without
        it the longest of their ``transaction_timeout_ms`` (the external system aborts the
        transaction then: waiting longer cannot help), else the commit policy's retry budget."""
        if self._drain_timeout_s is not None:
            return self._drain_timeout_s
        timeouts = [t for n in sinks if (t := self._sinks[n].transaction_timeout_ms) is not None]
        return (max(timeouts) if timeouts else self._commit_policy.retry_budget_ms) / 1000.0

    def hold_back(self, writing: int) -> None:
        """Before epoch ``writing`` starts: if a sink's ``max_pending_checkpoints`` would be
        exceeded, commit what completed checkpoints hold (their notifications may have been lost: a
        completed checkpoint may be committed any time after it completed, FLIP-147's rule is
        "never before"), wait for the asynchronous commits (at most :meth:`wait_bound_s`), then
        check again.

        Raises:
            CommitWaitTimeoutError: the commits did not finish within the bound (names them).
            JobError: still exceeded (commits that cannot finish, or more checkpoints pending than
                the sink allows: e.g. ``max_concurrent_checkpoints`` above Kafka's
                ``max_pending_checkpoints``).
        """
        old = self.too_old_for(writing)
        if not old:
            return
        log_event(log, logging.INFO, "epoch waits for pending commits", job=self._job_id, checkpoint=writing)
        last = self._checkpoints.last
        if last is not None:
            self._coord.notify_checkpoint_complete(last.checkpoint_id)
        bound = self.wait_bound_s(old)
        try:
            self._commits.drain(bound)
        except CommitWaitTimeoutError:
            waited = "; ".join(
                f"{', '.join(f'checkpoint {c}' for c in ids)} of sink {n!r}" for n, ids in sorted(old.items())
            )
            raise CommitWaitTimeoutError(
                f"job {self._job_id}: checkpoint {writing} waited {bound} s for the commit of {waited}, "
                "which did not finish; it cannot start before (its transaction names would fence them)"
            ) from None
        still = self.too_old_for(writing)
        if still:
            raise JobError(
                f"job {self._job_id}: checkpoint {writing} cannot start while checkpoints {still} are not "
                "committed: the sinks allow at most max_pending_checkpoints uncommitted checkpoints (Kafka: "
                "the transactional id pool would fence them); raise the sink's pool_size and "
                "max_pending_checkpoints, or lower max_concurrent_checkpoints"
            )


class EpochOpener:
    """Triggers an epoch's checkpoint (``JobRuntime.begin_epoch``, which holds the lock, checks
    the job is RUNNING and fails it on an error): every live sink expects one acknowledgement per
    partition; in-progress state of partitions beyond the epoch's is finished on the driver into
    this checkpoint (rescale handover).

    Args:
        job_id: the job.
        sinks: the job's sinks by name, in job order.
        coordinator: the run's coordinator, checked (``Run.coordinator``).
        progress: the run's ids and epochs.
        commits: the run's commits (housekeeping before the trigger).
        limit: the run's pending-commit limit.
        committer: the run's committer operator (the epoch aborts discarded duplicates with it).
        lock: the runtime's lock (the epoch acknowledges under it).
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        coordinator: Callable[[], CheckpointCoordinator],
        progress: RunProgress,
        commits: RunCommits,
        limit: PendingCommitLimit,
        committer: CommitterOperator,
        lock: AbstractContextManager[Any],
    ) -> None:
        self._job_id = job_id
        self._sinks = sinks
        self._coordinator = coordinator
        self._progress = progress
        self._commits = commits
        self._limit = limit
        self._committer = committer
        self._lock = lock

    def open(
        self, num_partitions: int, source_position: JsonObject | None, checkpoint_id: int | None
    ) -> Epoch:
        """Trigger the epoch's checkpoint and return the epoch.

        Raises:
            JobError: ``checkpoint_id`` is below the next id (the message names what took the ids:
                storage, a sink's committed record, or this run).
            CheckpointLimitError: too many pending checkpoints.
            CommitFailedError, TransactionLostError: an earlier asynchronous commit failed.
        """
        coord = self._coordinator()
        progress = self._progress
        self._commits.housekeeping()
        if checkpoint_id is not None:
            if checkpoint_id < coord.next_checkpoint_id:
                raise JobError(
                    progress.id_floor.refusal(
                        self._job_id, checkpoint_id, coord.next_checkpoint_id, progress.max_triggered
                    )
                )
            coord.skip_to(checkpoint_id)
        self._limit.hold_back(coord.next_checkpoint_id)
        with collector.paused():  # every subtask, no user code: a bulk pass (issue #42)
            participants, handover = epoch_participants(coord, self._sinks, num_partitions)
            pc = coord.trigger(
                CheckpointKind.CHECKPOINT,
                participants,
                num_partitions={n: num_partitions for n in participants},
                source_position=source_position,
            )
        progress.triggered(pc.checkpoint_id)
        try:
            finish_on_driver(self._job_id, self._sinks, coord, pc.checkpoint_id, handover)
        except Exception as e:
            coord.abort_checkpoint(pc.checkpoint_id, f"handover of in-progress state failed: {e!r}")
            raise
        progress.epoch_started()
        restored: dict[str, dict[int, JsonObject]] = {}
        with collector.paused():
            for sink in sorted(participants):
                # every partition below num_partitions of a participant is expected
                states = coord.in_progress_as_of(sink, pc.checkpoint_id - 1, num_partitions)
                if states:
                    restored[sink] = states
        live = [s for n, s in self._sinks.items() if n in participants]
        return Epoch(
            self._job_id, pc, num_partitions, live, restored, self._coordinator, self._committer, self._lock
        )
