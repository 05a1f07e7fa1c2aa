"""The conformance kit's state machine: random lives of a job over one sink, through twophase's
production code, checked against an accounting of what durable checkpoints promised.

The accounting: an epoch's records are *promised* once its checkpoint is durable (it landed in
checkpoint storage), once each; nothing else may ever be visible (checked after every step), and
at the end of a life (the job driven to FINISHED) everything promised is visible, exactly once,
and nothing lingers. Records a ``LOST`` answer owned may be missing, and only when the system
really dropped them (:meth:`SinkContract.lose`). When a life loses its checkpoint storage, what
the lost checkpoints promised stays promised; checkpoint ids are then counted afresh.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import tempfile
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar

import pyarrow as pa
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig, DuplicateAcknowledgementError
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.epoch import Epoch
from twophase.coordinator.run.fanout import EpochPlan, write_subtasks
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.faults import POINTS
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.payload import payload_object
from twophase.coordinator.storage.local import LocalCheckpointStorage
from twophase.sinks.api import CheckpointCommitSink, InProgressSink, TwoPhaseCommitSink
from twophase.sinks.conformance.violation import ContractViolation
from twophase.sinks.errors import (
    CheckpointStorageError,
    CommitFailedError,
    ConcurrentAttemptError,
    DriverFencedError,
    ServiceUnavailableError,
    TransactionLostError,
)
from twophase.sinks.outcome import CommitOutcome, checked_outcomes

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
P = ParamSpec("P")
R = TypeVar("R")

TASKS: Final = (
    "ok",
    "ok",
    "fails",
    "lost",
    "zombie_reports",
    "zombie_silent",
    "zombie_same_attempt",
    "stage_fails",
)
"""How one partition's task goes (see :data:`TASK_WORDS`); ``ok`` twice, so most tasks succeed."""
TASK_WORDS: Final = {
    "ok": "succeeds",
    "fails": "attempt 0 fails at {point} (its loop aborts what it opened), attempt 1 succeeds",
    "lost": "attempt 0's executor dies at {point} (nothing cleaned up), attempt 1 succeeds",
    "zombie_reports": "succeeds; then a zombie attempt 1 writes the same data and reports too",
    "zombie_silent": "succeeds; then a zombie attempt 1 writes the same data and never reports",
    # Spark numbers task attempts from 0 again in a retried stage (SPARK-24552, SPARK-26682), and
    # a task of the earlier stage attempt may still run: two live attempts share an attempt number
    "zombie_same_attempt": (
        "succeeds in a retried stage; then a zombie of the earlier stage attempt, also attempt 0 "
        "(attempt numbers start again at 0 in a retried stage), writes the same data and fails at {point}"
    ),
    "stage_fails": "fails every attempt: the stage fails",
}
TASK_POINTS: Final = ("before_write", "mid_write", "after_pre_commit")
DRIVER_POINTS: Final = ("before_persist", "after_persist", "mid_commit", "after_commit")
"""Where the driver may die during an epoch (:data:`twophase.coordinator.state.faults.POINTS`)."""
DRIVER_CALLS: Final = (
    "commit",
    "recover_and_commit",
    "commit_batch",
    "recover_and_commit_batch",
    "commit_checkpoint",
    "recover_and_commit_checkpoint",
    "abort",
    "abort_batch",
    "recover_and_abort",
    "abort_lingering",
    "last_committed_checkpoint",
)
"""The driver-side calls the history shows, with their answers."""
RECOMMITS: Final = ("recover_and_commit", "recover_and_commit_batch", "recover_and_commit_checkpoint")
"""The calls a restore re-commits with."""
BATCHES: Final = ("commit_batch", "recover_and_commit_batch")
"""The calls that answer one outcome per committable."""
BATCH_OUTCOMES: Final = "commit_batch answers one outcome per committable, in input order"
"""The check a batch answer that cannot be matched to its committables breaks."""
COMMIT_FAILED: Final = "a pre-committed transaction must commit, once, whatever retries it"
"""The check a failed commit breaks: after pre-commit, only a lost transaction may fail to commit."""
TOLERATED: Final = (ConcurrentAttemptError, ServiceUnavailableError)
"""Errors a sink may raise in an epoch without breaking the contract: the epoch fails and is retried."""


class ContractHooks(Protocol):
    """What a life needs of the contract under test (:class:`~twophase.sinks.conformance.SinkContract`)."""

    @property
    def job_id(self) -> str: ...
    @property
    def max_partitions(self) -> int: ...
    @property
    def max_records(self) -> int: ...
    def new_system(self) -> Any: ...
    def make_sink(self, system: Any) -> AnySink: ...
    def read_committed(self, system: Any) -> Iterable[str]: ...
    def lingering(self, system: Any) -> Iterable[str]: ...
    def batch(self, keys: Sequence[str]) -> pa.RecordBatch: ...
    def executor_copy(self, sink: AnySink) -> AnySink: ...
    def lose(self, system: Any, committables: Sequence[Any]) -> bool: ...
    def close_system(self, system: Any) -> None: ...

    @property
    def supports_loss(self) -> bool: ...


class DriverCrash(BaseException):
    """The driver process dies at a fault point (injected). A ``BaseException``, like a kill: the
    runtime's error handling, which catches ``Exception`` to fail the job and clean up, does not run.

    Attributes:
        point: the fault point (:data:`twophase.coordinator.state.faults.POINTS`).
    """

    def __init__(self, point: str) -> None:
        super().__init__(f"the driver died at {point}")
        self.point = point


class DriverFaults:
    """The runtime's fault hook: raises :class:`DriverCrash` at the next hit of the armed point."""

    def __init__(self) -> None:
        self.armed: str | None = None

    def arm(self, point: str) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}")
        self.armed = point

    def disarm(self) -> None:
        self.armed = None

    def __call__(self, point: str) -> None:
        if point == self.armed:
            self.armed = None
            raise DriverCrash(point)


class KitCheckpointStorage(LocalCheckpointStorage):
    """The production local checkpoint storage, able to refuse every ``_committed`` marker write.

    The marker is best effort (DESIGN.md §12, "A committed checkpoint is marked"): a full disk, a
    permission, an S3 outage after the commit, or a driver dying between the commit and the marker
    leave a committed checkpoint unmarked, and the restore re-commits it. Only the sink's own
    durable record can then answer ``ALREADY_COMMITTED`` (issue #43).

    Attributes:
        refuse_markers: every :meth:`mark_committed` raises ``CheckpointStorageError``.
    """

    refuse_markers: bool = False

    def mark_committed(self, location: str) -> None:
        """Write the ``_committed`` marker, unless markers are refused.

        Raises:
            CheckpointStorageError: markers are refused, or it cannot be written.
        """
        if self.refuse_markers:
            raise CheckpointStorageError(f"the conformance kit refuses the _committed marker of {location}")
        super().mark_committed(location)


class TaskFailure(Exception):
    """A task attempt raised (injected): its executor loop aborts what it opened."""


class ExecutorLost(BaseException):
    """A task attempt's executor died (injected): nothing is cleaned up."""


def _raise_at(point: str, error: BaseException) -> Callable[[str], None]:
    def hook(reached: str) -> None:
        if reached == point:
            raise error

    return hook


def _no_fault(point: str) -> None:
    return None


def _step(method: Callable[Concatenate[ContractLives, P], R]) -> Callable[Concatenate[ContractLives, P], R]:
    """Run one step of a life: an error the contract does not allow becomes a
    :class:`ContractViolation` with the history; any failure marks the life broken, so that
    teardown adds no second one."""

    @functools.wraps(method)
    def run(self: ContractLives, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except ContractViolation:
            self.broken = True
            raise
        except CommitFailedError as e:
            if isinstance(e.__cause__, ContractViolation):  # found inside the runtime's commit call
                self.broken = True
                raise e.__cause__ from None
            raise self.fail(COMMIT_FAILED, str(e)) from e
        except Exception as e:
            raise self.fail("an error the contract does not allow", f"{type(e).__name__}: {e}") from e
        except BaseException:
            self.broken = True
            raise

    return typing.cast("Callable[Concatenate[ContractLives, P], R]", run)


def _memory_folder() -> str | None:
    """A RAM-backed folder for the lives' checkpoint storage, if the machine has one: the production
    local backend fsyncs every publish, which on a busy disk costs more than the rest of a life."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _answer(answer: object) -> str:
    """A driver call's answer in the history: outcomes by name (a batch's as a list)."""
    if isinstance(answer, CommitOutcome):
        return answer.name
    if isinstance(answer, list) and all(isinstance(a, CommitOutcome) for a in answer):
        return "[" + ", ".join(a.name for a in answer) + "]"
    return str(answer)


def _short(keys: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return f"[{shown}{', ...' if len(keys) > limit else ''}]"


class ContractLives(RuleBasedStateMachine):
    """One random life of a job over ``contract``'s sink; see the module docstring."""

    def __init__(self, contract: ContractHooks) -> None:
        super().__init__()
        self.contract = contract
        self.system = contract.new_system()
        self.broken = False
        self.history: list[str] = []
        self.folder = tempfile.TemporaryDirectory(prefix="twophase-conformance-", dir=_memory_folder())
        self.storage = KitCheckpointStorage(self.folder.name, contract.job_id)
        """The production checkpoint storage, in a temporary folder that outlives driver processes
        (until :meth:`checkpoint_storage_lost` replaces it with an empty one)."""
        self.faults = DriverFaults()
        self.config = self.base_config = RuntimeConfig(
            # one retained checkpoint: what a checkpoint holds is never lingering cleanup's to take, so
            # with more, a lost transaction's leftovers (S3's tail objects) would outlive the life
            checkpoint=CheckpointConfig(retained_checkpoints=1),
            commit=CommitPolicy(max_attempts=4, initial_backoff_ms=1, max_backoff_ms=2),
            restart=RestartStrategy.fixed_delay(1_000_000, 0),
        )
        self.promised: Counter[str] = Counter()
        self.may_be_missing: Counter[str] = Counter()
        self.batches: dict[int, list[str]] = {}
        self.next_batch = 1
        self.batch_of: dict[int, int] = {}
        """Checkpoint id → the batch its epoch wrote (set when the epoch begins)."""
        self.durable: set[int] = set()
        self.acknowledged: dict[int, list[Any]] = {}
        """Checkpoint id → the encoded committables its epoch acknowledged."""
        self.committed_through = 0
        """Every durable checkpoint up to this id is committed (notified, or recovered)."""
        self.losing: int | None = None
        """The durable checkpoint whose transactions :meth:`SinkContract.lose` dropped, until a
        restore answers LOST for it."""
        self.lost: set[int] = set()
        """Checkpoints a restore answered LOST for (the system dropped them)."""
        self.ids_restarted: str | None = None
        """Set when checkpoint ids started again at or below a committed checkpoint after the
        checkpoint storage was lost: what the restore asked ``last_committed_checkpoint`` and got,
        for the message of any violation that follows."""
        self.answers: list[tuple[str, object]] = []
        """The driver-side calls and their answers, in order (cleared by the steps that check them)."""
        self.rt: JobRuntime | None = None
        self.driver: AnySink | None = None
        self._depth = 0
        self.start_driver("the driver starts")

    # -- plain words --------------------------------------------------------------------------------

    def say(self, line: str) -> None:
        self.history.append(f"{sum(1 for h in self.history if not h.startswith(' ')) + 1}. {line}")

    def note(self, line: str) -> None:
        self.history.append(f"     {line}")

    def fail(self, check: str, detail: str) -> ContractViolation:
        self.broken = True
        return ContractViolation(check, detail, self.history)

    # -- the sink, as each process sees it ----------------------------------------------------------

    def driver_sink(self) -> AnySink:
        """A new sink for a new driver process, validated, its driver-side calls shown in the history."""
        sink = self.contract.make_sink(self.system)
        sink.validate(self.contract.batch([]).schema)
        self.pristine = self.contract.make_sink(self.system)
        """What executor copies are made from: the driver's sink as configured and validated
        (without the history's wrappers, which do not pickle)."""
        self.pristine.validate(self.contract.batch([]).schema)
        for name in DRIVER_CALLS:
            if hasattr(sink, name):
                setattr(sink, name, self._shown(name, getattr(sink, name)))
        return sink

    def _shown(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def shown(*args: Any) -> Any:
            self._depth += 1
            try:
                answer = call(*args)
            except Exception as e:
                if self._depth == 1:
                    self.note(f"driver: {name} raised {type(e).__name__}: {e}")
                raise
            finally:
                self._depth -= 1
            if name in BATCHES:
                try:
                    checked_outcomes(answer, len(args[0]))
                except ValueError as e:
                    raise self.fail(BATCH_OUTCOMES, f"{name} of {len(args[0])} committables: {e}") from e
            if self._depth == 0:
                self.answers.append((name, answer))
            if self._depth == 0 and answer is None and name != "last_committed_checkpoint":
                self.note(f"driver: {name}")
            elif self._depth == 0:
                self.note(f"driver: {name} -> {_answer(answer)}")
            return answer

        return shown

    # -- driver processes ---------------------------------------------------------------------------

    @property
    def runtime(self) -> JobRuntime:
        assert self.rt is not None
        return self.rt

    @property
    def driver_side(self) -> AnySink:
        """The sink of the current driver process."""
        assert self.driver is not None
        return self.driver

    def start_driver(self, why: str) -> None:
        """A new driver process: new sink, new runtime over the same checkpoint storage, restore.
        A restore answering LOST is accepted only for transactions the system really dropped.
        The running driver, if any, dies first (:meth:`second_driver` keeps it running instead)."""
        if self.rt is not None:
            self.rt.abandon()
        self.say(why)
        self.observe()
        for _ in range(3):
            self.faults.disarm()
            self.driver = self.driver_sink()
            self.rt = JobRuntime(
                self.contract.job_id,
                [self.driver],
                self.storage,
                self.config,
                sleep=lambda _s: None,  # restart without delay
                fault=self.faults,
            )
            try:
                self.rt.restore()
            except TransactionLostError as e:
                self.accept_lost(e)
                continue
            self.committed_through = max(self.durable, default=0)
            self.config = self.base_config  # ignore_lost_on_recovery was for that one restore
            return
        raise self.fail("restore never succeeds", "three driver processes in a row failed to restore")

    def accept_lost(self, error: TransactionLostError) -> None:
        self.note(f"the restore fails: {type(error).__name__}")
        if self.losing is None and self.storage.refuse_markers:
            newest = max((r.checkpoint_id for r in self.storage.list_checkpoints()), default=None)
            if newest in self.lost:  # the restore that accepted the loss could not mark it
                event("a restore reported an accepted loss again: its checkpoint is unmarked")
                self.note(
                    f"checkpoint {newest}, accepted as lost, is still unmarked: every restore reports it"
                )
                commit = replace(self.config.commit, ignore_lost_on_recovery=True)
                self.config = replace(self.config, commit=commit)
                return
        if self.losing is None:
            raise self.fail(
                "LOST only when the data is really gone",
                f"a restore reported a lost transaction, but the system dropped nothing: {error}",
            )
        seen = self.visible()
        shown = sorted(seen & Counter(self.batches[self.batch_of[self.losing]]))
        if shown:
            raise self.fail(
                "LOST only when the data is really gone",
                f"checkpoint {self.losing} was reported LOST, yet its records are visible: {_short(shown)}",
            )
        event("a restore answered LOST for what the system dropped")
        self.may_be_missing += self.promised - seen
        self.lost.add(self.losing)
        self.losing = None
        commit = replace(self.config.commit, ignore_lost_on_recovery=True)
        self.config = replace(self.config, commit=commit)
        self.note("as the system dropped them: the next driver restores with ignore_lost_on_recovery")

    def driver_crashed(self, crash: DriverCrash) -> None:
        event(f"the driver died at {crash.point}")
        self.note(f"the driver dies at {crash.point}")
        self.observe()
        self.start_driver("a new driver process starts and restores")

    def fail_over(self, error: BaseException) -> None:
        """The engine's query fails; the job fails over in the same driver (``JobRuntime.failover``:
        pending checkpoints aborted, subtasks closed, restore from the latest checkpoint)."""
        self.note(f"the epoch fails ({type(error).__name__}: {error}); the job fails over")
        self.observe()
        try:
            self.runtime.failover(error)
        except TransactionLostError as e:
            self.accept_lost(e)
            self.start_driver("a new driver process starts and restores")
            return
        self.committed_through = max(self.durable, default=0)

    # -- the accounting -----------------------------------------------------------------------------

    def visible(self) -> Counter[str]:
        return Counter(self.contract.read_committed(self.system))

    def observe(self) -> None:
        """Promise the records of every epoch checkpoint that became durable."""
        for ref in self.storage.list_checkpoints():
            meta = self.storage.load(ref)
            c = meta.checkpoint_id
            n = self.batch_of.get(c)
            position = meta.source_position or {}
            if n is None or c in self.durable or position.get("batch_id") != n:
                continue
            self.durable.add(c)
            self.promised.update(self.batches[n])
            self.note(f"checkpoint {c} is durable: batch {n}'s {len(self.batches[n])} records are promised")

    def check_hidden(self, keys: Sequence[str], when: str) -> None:
        shown = sorted(self.visible() & Counter(keys))
        if shown:
            raise self.fail("no record visible before commit", f"{when}, yet visible: {_short(shown)}")

    @invariant()
    def nothing_visible_unpromised_or_twice(self) -> None:
        if self.broken:
            return
        extra = self.visible() - self.promised
        if extra:
            twice = sorted(k for k in extra if self.promised[k])
            never = sorted(k for k in extra if not self.promised[k])
            raise self.fail(
                "nothing twice, nothing uncommitted",
                f"visible twice: {_short(twice)}; visible without a durable checkpoint: {_short(never)}",
            )

    # -- tasks --------------------------------------------------------------------------------------

    def run_tasks(
        self, plan: EpochPlan, records: Sequence[str], tasks: Sequence[str], point: str
    ) -> list[Acknowledgement]:
        """One task per partition, each through the production executor loop on its own copy of
        the sink, going as ``tasks[p]`` says; returns the reports the driver receives."""
        acks: list[Acknowledgement] = []
        for p in range(plan.num_partitions):
            keys = list(records[p :: plan.num_partitions])
            batches = [self.contract.batch(keys[:1]), self.contract.batch(keys[1:])] if keys else []
            how = tasks[p % len(tasks)]
            event(
                f"a task {how}" + (f" at {point}" if how in ("fails", "lost", "zombie_same_attempt") else "")
            )
            self.note(f"partition {p} {_short(keys)}: " + TASK_WORDS[how].format(point=point))
            if how == "stage_fails":
                raise TaskFailure(f"partition {p} failed every attempt")
            if how in ("fails", "lost"):
                error: BaseException = TaskFailure(point) if how == "fails" else ExecutorLost(point)
                try:
                    acks += self.attempt(plan, p, 0, batches, _raise_at(point, error), killed=how == "lost")
                    continue  # the point was never reached (nothing to write)
                except (TaskFailure, ExecutorLost):
                    pass
                acks += self.attempt(plan, p, 1, batches)
                continue
            acks += self.attempt(plan, p, 0, batches)
            if how == "zombie_same_attempt":  # it never reports: its task failed
                with contextlib.suppress(TaskFailure):
                    self.attempt(plan, p, 0, batches, _raise_at(point, TaskFailure(point)))
            elif how.startswith("zombie"):
                late = self.attempt(plan, p, 1, batches)
                acks += late if how == "zombie_reports" else []
        return acks

    def attempt(
        self,
        plan: EpochPlan,
        partition: int,
        attempt: int,
        batches: Sequence[Any],
        fault: Callable[[str], None] = _no_fault,
        *,
        killed: bool = False,
    ) -> list[Acknowledgement]:
        copies = (self.contract.executor_copy(self.pristine),)
        if killed:  # a dead executor runs no clean-up
            for sink in copies:
                sink.abort_open = lambda txn: None  # type: ignore[method-assign]
        return write_subtasks(replace(plan, sinks=copies), partition, attempt, batches, fault=fault)

    def acknowledge(self, epoch: Epoch, acks: Sequence[Acknowledgement]) -> None:
        accepted = []
        for ack in acks:
            try:
                if epoch.acknowledge(ack) and ack.committable is not None:
                    accepted.append(payload_object(ack.committable))
            except DuplicateAcknowledgementError:
                self.note(f"the driver discards attempt {ack.attempt}'s report of partition {ack.partition}")
                epoch.discard(ack)
        self.acknowledged[epoch.checkpoint_id] = accepted

    # -- steps --------------------------------------------------------------------------------------

    def records_of(self, n: int, size: int, least: int = 0) -> list[str]:
        """Batch ``n``'s records, ``least..max_records`` of them (``size`` is the raw draw): drawn
        the first time, the same when the batch is replayed."""
        count = least + (size - least) % (self.contract.max_records - least + 1)
        return self.batches.setdefault(n, [f"b{n}r{i}" for i in range(count)])

    def position(self, n: int) -> dict[str, object]:
        return {"engine": "spark", "query_id": "conformance", "batch_id": n}

    def partitions(self, drawn: int) -> int:
        """A drawn partition count as 1..``max_partitions`` (shrinking to 1)."""
        return (drawn - 1) % self.contract.max_partitions + 1

    def skip_replayed(self, n: int) -> bool:
        """Whether batch ``n`` is a replay the latest checkpoint covers: then it is skipped."""
        if not self.runtime.replay_check(self.position(n)):
            return False
        self.say(f"batch {n} is replayed; the latest checkpoint covers it: skipped")
        self.next_batch += 1
        return True

    def begin_epoch(self, parts: int, n: int) -> Epoch:
        """Trigger the checkpoint of batch ``n`` on ``parts`` partitions."""
        epoch = self.runtime.begin_epoch(parts, self.position(n))
        self.batch_of[epoch.checkpoint_id] = n
        self.note(f"checkpoint {epoch.checkpoint_id} triggered")
        return epoch

    @rule(
        parts=st.integers(1, 12),
        size=st.integers(0, 20),
        tasks=st.lists(st.sampled_from(TASKS), min_size=3, max_size=3),
        point=st.sampled_from(TASK_POINTS),
        crash=st.none() | st.sampled_from(DRIVER_POINTS),
        notify=st.sampled_from((True, True, False)),
    )
    @_step
    def epoch(
        self, parts: int, size: int, tasks: list[str], point: str, crash: str | None, notify: bool
    ) -> None:
        """The engine's next batch (the same records when it is replayed after a failure)."""
        self.write_batch(parts, size, tasks, point, crash=crash, notify=notify)

    def write_batch(
        self,
        parts: int,
        size: int,
        tasks: Sequence[str],
        point: str,
        *,
        crash: str | None = None,
        notify: bool = True,
        least: int = 0,
    ) -> int | None:
        """Run the engine's next batch through the current driver; return its checkpoint id if the
        checkpoint completed (and, with ``notify``, was committed), else ``None`` (skipped as a
        replay, failed over, or the driver died)."""
        parts = self.partitions(parts)
        n = self.next_batch
        records = self.records_of(n, size, least)
        rt = self.runtime
        if self.skip_replayed(n):
            self.observe()
            return None
        words = f"; the driver dies at {crash} if it gets there" if crash else ""
        words += "" if notify else "; the commit notification is lost"
        self.say(f"batch {n}: {len(records)} records on {parts} partitions{words}")
        if crash is not None:
            self.faults.arm(crash)
        epoch: Epoch | None = None
        try:
            # the trigger may commit older checkpoints first (a sink's max_pending_checkpoints): the
            # armed crash may hit there
            epoch = self.begin_epoch(parts, n)
            self.acknowledge(epoch, self.run_tasks(epoch.plan(), records, tasks, point))
            self.check_hidden(records, f"batch {n} is pre-committed, its checkpoint not complete")
            rt.complete_epoch(epoch, notify=notify)
            if notify:
                self.committed_through = epoch.checkpoint_id
                self.note(f"a replayed notification commits checkpoint {epoch.checkpoint_id} again")
                self.recommit(epoch.checkpoint_id, self.driver_side, recovering=False)
            else:
                self.check_hidden(records, f"checkpoint {epoch.checkpoint_id} is durable, not committed")
            self.next_batch += 1
            self.observe()
            return epoch.checkpoint_id
        except ContractViolation:
            raise
        except DriverCrash as crash_:
            self.driver_crashed(crash_)
        except TransactionLostError as e:
            raise self.fail("LOST only when the data is really gone", f"a commit answered LOST: {e}") from e
        except (TaskFailure, *TOLERATED) as e:
            if epoch is not None:
                rt.abort_epoch_if_pending(epoch, f"epoch failed: {e!r}")
            self.fail_over(e)
        finally:
            self.faults.disarm()
        return None

    @rule()
    @_step
    def driver_dies(self) -> None:
        """The driver dies between two epochs; a new one restores (recover-and-commit, lingering abort)."""
        self.say("the driver dies between epochs")
        self.start_driver("a new driver process starts and restores")

    @rule(parts=st.integers(1, 12), size=st.integers(1, 20))
    @_step
    def checkpoint_fails(self, parts: int, size: int) -> None:
        """Every task pre-commits, then the checkpoint is declined: the driver aborts what was
        pre-committed (``abort``), and aborting again must change nothing."""
        parts = self.partitions(parts)
        n = self.next_batch
        records = self.records_of(n, size, least=1)
        rt = self.runtime
        if self.skip_replayed(n):
            return
        self.say(f"batch {n}: {len(records)} records on {parts} partitions; the checkpoint is then declined")
        epoch = self.begin_epoch(parts, n)
        try:
            self.acknowledge(epoch, self.run_tasks(epoch.plan(), records, ["ok"] * parts, "before_write"))
        except TOLERATED as e:
            rt.abort_epoch_if_pending(epoch, f"epoch failed: {e!r}")
            self.fail_over(e)
            return
        rt.abort_epoch(epoch, "declined by the conformance kit")
        self.check_hidden(records, f"checkpoint {epoch.checkpoint_id} was aborted")
        sink = self.driver_side
        self.note(f"the kit aborts checkpoint {epoch.checkpoint_id}'s transactions again")
        for payload in self.acknowledged.get(epoch.checkpoint_id, []):
            sink.abort(sink.decode(payload))
        self.check_hidden(records, f"checkpoint {epoch.checkpoint_id} was aborted twice")
        self.fail_over(TaskFailure("the checkpoint was declined"))

    @precondition(lambda self: self.committed_through in self.durable)
    @rule(recovering=st.booleans())
    @_step
    def commit_again(self, recovering: bool) -> None:
        """Commit the latest committed checkpoint again, from a new driver process: the answer must
        be ``ALREADY_COMMITTED`` and nothing may change for a reader."""
        c = self.committed_through
        if c != max(self.durable) or c in self.lost:
            return
        how = "recover_and_commit" if recovering else "commit"
        self.say(f"{how} checkpoint {c} again, from a new driver process")
        sink = self.driver_sink()
        try:
            self.recommit(c, sink, recovering=recovering)
        finally:
            sink.close()

    def recommit(self, c: int, sink: AnySink, *, recovering: bool) -> None:
        """Commit checkpoint ``c``'s acknowledged committables again with ``sink``: every answer
        must be ``ALREADY_COMMITTED`` and nothing may change for a reader."""
        committables = [sink.decode(p) for p in self.acknowledged.get(c, [])]
        how = "recover_and_commit" if recovering else "commit"
        before = self.visible()
        answers: list[CommitOutcome] = []
        try:
            if isinstance(sink, CheckpointCommitSink):
                if committables:
                    call = sink.recover_and_commit_checkpoint if recovering else sink.commit_checkpoint
                    answers.append(call(c, committables))
            elif committables:  # one batch, as the runtime commits a checkpoint's committables
                answers.extend(
                    (sink.recover_and_commit_batch if recovering else sink.commit_batch)(committables)
                )
        except Exception as e:
            raise self.fail(
                "commit is not idempotent",
                f"committing checkpoint {c} again raised {type(e).__name__}: {e}"
                " (contract: ALREADY_COMMITTED)",
            ) from e
        wrong = [a.name for a in answers if a is not CommitOutcome.ALREADY_COMMITTED]
        if wrong:
            raise self.fail(
                "commit is not idempotent",
                f"committing checkpoint {c} again answered {', '.join(wrong)} (contract: ALREADY_COMMITTED)",
            )
        if answers:
            event(f"a second {how} answered ALREADY_COMMITTED")
        after = self.visible()
        if after != before:
            raise self.fail(
                "commit is not idempotent",
                f"committing checkpoint {c} again changed what a reader sees: "
                f"new {_short(sorted(after - before))}, gone {_short(sorted(before - after))}",
            )

    @rule(parts=st.integers(2, 12), size=st.integers(2, 20), every=st.integers(2, 3), lose=st.booleans())
    @_step
    def partial_batch(self, parts: int, size: int, every: int, lose: bool) -> None:
        """A batch half committed: an epoch's checkpoint is durable, its notification lost, and
        every ``every``-th of its transactions was committed on its own (as by a driver that died
        mid-batch); with ``lose`` (if the system can drop transactions, and the sink keeps nothing
        in progress) the system then drops all the others (:meth:`SinkContract.lose` may drop more
        than it is given, as a transaction timeout does). A new driver process commits the whole
        checkpoint with ONE ``commit_batch``, given in reverse order: each answer must be that
        committable's own, in input order (``ALREADY_COMMITTED`` for the ones committed before,
        ``LOST`` for the dropped ones, else ``COMMITTED``), and every record but the dropped ones'
        must then be visible once. A checkpoint-commit sink has no partial batch."""
        if isinstance(self.driver_side, CheckpointCommitSink):
            return
        n = self.next_batch
        c = self.write_batch(parts, size, ["ok"] * 3, "before_write", notify=False, least=2)
        if c is None:
            return
        committables = [self.driver_side.decode(p) for p in self.acknowledged.get(c, [])]
        if len(committables) < 2:
            return
        batch = committables[::-1]
        first = set(range(0, len(batch), every))
        dropped = set(range(len(batch))) - first
        if not lose or isinstance(self.driver_side, InProgressSink):
            dropped = set()  # in-progress data would blur which records the dropped ones held
        self.say(
            f"checkpoint {c}: {len(first)} of its {len(batch)} transactions are committed one by one"
            + (", the system drops the others" if dropped else "")
            + ", then a new driver process commits all of them in one batch"
        )
        sink = self.driver_sink()
        try:
            for i in sorted(first):
                if (answer := sink.commit(batch[i])) is not CommitOutcome.COMMITTED:
                    raise self.fail(COMMIT_FAILED, f"a commit of checkpoint {c} answered {answer.name}")
            if dropped and not self.contract.lose(self.system, [batch[i] for i in sorted(dropped)]):
                dropped = set()
            answers = sink.commit_batch(batch)
        finally:
            sink.close()
        expected = [
            CommitOutcome.ALREADY_COMMITTED
            if i in first
            else CommitOutcome.LOST
            if i in dropped
            else CommitOutcome.COMMITTED
            for i in range(len(batch))
        ]
        if answers != expected:
            raise self.fail(
                BATCH_OUTCOMES,
                f"a batch of checkpoint {c}, some committed before, answered {_answer(answers)}; "
                f"expected {_answer(expected)}",
            )
        event("a partial batch answered each committable its own outcome")
        if dropped:
            gone = Counter(self.batches[n]) - self.visible()
            if not gone or gone == Counter(self.batches[n]):
                raise self.fail(
                    "LOST only when the data is really gone",
                    f"transactions of checkpoint {c} were dropped and answered LOST, yet "
                    + ("every record is visible" if not gone else "no record of the others is"),
                )
            event("a partial batch answered LOST for the dropped transactions")
            self.may_be_missing += gone
            self.lost.add(c)
            commit = replace(self.config.commit, ignore_lost_on_recovery=True)
            self.config = replace(self.config, commit=commit)
            self.note("as the system dropped them: the next driver restores with ignore_lost_on_recovery")
        self.start_driver(f"the driver dies; a new one restores checkpoint {c}, committed by the batch")

    @precondition(lambda self: self.contract.supports_loss)
    @rule(parts=st.integers(1, 12), size=st.integers(1, 20))
    @_step
    def transactions_lost(self, parts: int, size: int) -> None:
        """An epoch's checkpoint is durable but its notification lost; the system then drops its
        pre-committed transactions (:meth:`SinkContract.lose`) and the driver dies: the restore
        must answer LOST, and none of those records may be visible."""
        parts = self.partitions(parts)
        n = self.next_batch
        records = self.records_of(n, size, least=1)
        rt = self.runtime
        if self.skip_replayed(n):
            return
        self.say(f"batch {n}: {len(records)} records on {parts} partitions; the commit notification is lost")
        epoch = self.begin_epoch(parts, n)
        try:
            self.acknowledge(epoch, self.run_tasks(epoch.plan(), records, ["ok"] * parts, "before_write"))
            rt.complete_epoch(epoch, notify=False)
        except TOLERATED as e:
            rt.abort_epoch_if_pending(epoch, f"epoch failed: {e!r}")
            self.fail_over(e)
            return
        self.next_batch += 1
        self.observe()
        c = epoch.checkpoint_id
        sink = self.driver_side
        committables = [sink.decode(p) for p in self.acknowledged.get(c, [])]
        if not committables or not self.contract.lose(self.system, committables):
            return
        self.say(f"the system drops checkpoint {c}'s {len(committables)} pre-committed transactions")
        self.losing = c
        self.start_driver("the driver dies; a new one restores")
        if self.losing is not None:  # the restore answered COMMITTED or ALREADY_COMMITTED
            self.losing = None
            missing = sorted(Counter(records) - self.visible())
            if missing:
                raise self.fail(
                    "LOST only when the data is really gone",
                    f"the restore committed checkpoint {c}, which the system had dropped, and answered "
                    f"success, but its records are missing: {_short(missing)}",
                )

    # -- what only the sink's own record can answer (issue #43) ----------------------------------------

    @rule(parts=st.integers(1, 12), size=st.integers(1, 20))
    @_step
    def checkpoint_storage_lost(self, parts: int, size: int) -> None:
        """The job finishes; then its checkpoint storage is lost (deleted, cancel with delete, a new
        directory configured, a savepoint restored elsewhere) and the job runs again with the same
        id. With storage empty, checkpoint ids start above what the sink answers to
        ``last_committed_checkpoint(job_id)`` (DESIGN.md §12, "Checkpoint ids never repeat a
        committed one"): a sink that names or records its commits by checkpoint id must answer the
        highest one it committed, or a new checkpoint is taken for an old one (overwritten, or
        answered ALREADY_COMMITTED and dropped). Batches run until the new ids reach the lowest
        committed checkpoint that held records, so a reused id is always met."""
        self.say("end of input: the job finishes")
        self.drive_to_finished()
        self.runtime.close()
        self.observe()
        before = self.visible()
        newest = max((r.checkpoint_id for r in self.storage.list_checkpoints()), default=0)
        held = [c for c in self.durable if self.acknowledged.get(c) and c not in self.lost]
        self.say(
            "the job's checkpoint storage is lost (deleted, or a new directory configured); "
            "the job runs again with the same id"
        )
        self.lose_checkpoint_storage()
        self.start_driver("a new driver process starts over the empty checkpoint storage")
        answered = self.pristine.last_committed_checkpoint(self.contract.job_id)
        reached = 0
        for _ in range(max(newest, 1)):
            c = self.write_batch(parts, size, ["ok"] * 3, "before_write", least=1)
            if c is None:  # a tolerated failure failed over: the epochs end here
                break
            reached = c
            if c <= newest and self.ids_restarted is None:
                event("checkpoint ids started again at a committed one")
                self.ids_restarted = (
                    f"after the checkpoint storage was lost, the restore asked last_committed_checkpoint"
                    f"({self.contract.job_id!r}) and got {answered}, so checkpoint {c} was taken again, "
                    f"though the lost storage had committed checkpoints up to {newest} (contract: a sink "
                    "whose names or commit records carry the checkpoint id answers the highest checkpoint "
                    "it committed for the job)"
                )
            if not held or c >= min(held):
                break
        gone = sorted(before - self.visible())
        if gone:
            raise self.fail(
                "checkpoint ids never repeat a committed one"
                if self.ids_restarted
                else "every durable record exactly once",
                f"records committed before the checkpoint storage was lost are gone after checkpoint "
                f"{reached}: {_short(gone)}" + (f"; {self.ids_restarted}" if self.ids_restarted else ""),
            )

    def lose_checkpoint_storage(self) -> None:
        """Replace the checkpoint storage with an empty one for the same job; what the lost one
        promised stays promised, and checkpoint ids are counted afresh."""
        refuse = self.storage.refuse_markers
        # the engine keeps its own progress: a batch a lost checkpoint covered is not run again
        self.next_batch = max([self.next_batch, *(self.batch_of[c] + 1 for c in self.durable)])
        self.folder.cleanup()
        self.folder = tempfile.TemporaryDirectory(prefix="twophase-conformance-", dir=_memory_folder())
        self.storage = KitCheckpointStorage(self.folder.name, self.contract.job_id)
        self.storage.refuse_markers = refuse
        self.durable, self.acknowledged, self.batch_of, self.lost = set(), {}, {}, set()
        self.committed_through = 0
        self.rt = None  # finished and closed: nothing to abandon

    @rule(parts=st.integers(1, 12), size=st.integers(1, 20))
    @_step
    def markers_refused(self, parts: int, size: int) -> None:
        """From now on checkpoint storage refuses every ``_committed`` marker write (the marker is
        best effort). A batch commits, unmarked; the driver dies and the restore re-commits its
        checkpoint: the sink must answer ALREADY_COMMITTED from its own durable record, and nothing
        may change for a reader."""
        if not self.storage.refuse_markers:
            self.say("from now on the checkpoint storage refuses every _committed marker write")
            self.storage.refuse_markers = True
        c = self.write_batch(parts, size, ["ok"] * 3, "before_write", least=1)
        if c is None:
            return
        before = self.visible()
        self.answers.clear()
        self.start_driver(f"the driver dies; a new one restores checkpoint {c}, committed but unmarked")
        wrong = [
            f"{name} -> {getattr(a, 'name', a)}"
            for name, answer in self.answers
            if name in RECOMMITS
            for a in (answer if isinstance(answer, list) else [answer])
        ]
        wrong = [w for w in wrong if not w.endswith("-> ALREADY_COMMITTED")]
        if wrong:
            raise self.fail(
                "a restore decides a repeated commit from the sink's own record",
                f"checkpoint {c} was committed and its _committed marker refused; the restore re-committed "
                f"it and got {', '.join(wrong)} (contract: ALREADY_COMMITTED, decided from the sink's "
                "own durable record, never from the marker)",
            )
        after = self.visible()
        if after != before:
            raise self.fail(
                "a restore decides a repeated commit from the sink's own record",
                f"re-committing checkpoint {c} (committed, unmarked) changed what a reader sees: "
                f"new {_short(sorted(after - before))}, gone {_short(sorted(before - after))}",
            )

    @rule(
        parts=st.integers(1, 12),
        size=st.integers(1, 20),
        stale=st.sampled_from(("publishes", "commits", "publishes_after_newer_writes")),
    )
    @_step
    def second_driver(self, parts: int, size: int, stale: str) -> None:
        """A second driver of the job starts while the first still runs (a YARN application-master
        retry, a replaced Kubernetes pod, a retrying scheduler). Its restore claims a newer driver
        epoch in checkpoint storage and commits the latest checkpoint; the old driver then tries to
        go on and must stop with ``DriverFencedError``:

        - ``publishes``: it had pre-committed a batch and tries to publish its checkpoint;
        - ``commits``: its checkpoint is durable, its notification late: it tries to commit it;
        - ``publishes_after_newer_writes``: as ``publishes``, but the new driver has already
          pre-committed the same batch under the same checkpoint id when the old one tries.

        The sink's output stays exactly once: what the old driver does on its way out (it aborts
        what it pre-committed) must not touch the new driver's transactions."""
        parts = self.partitions(parts)
        n = self.next_batch
        records = self.records_of(n, size, least=1)
        old = self.runtime
        if self.skip_replayed(n):
            return
        self.say(f"batch {n}: {len(records)} records on {parts} partitions; a second driver will start")
        epoch = self.begin_epoch(parts, n)
        try:
            self.acknowledge(epoch, self.run_tasks(epoch.plan(), records, ["ok"] * parts, "before_write"))
            if stale == "commits":
                old.complete_epoch(epoch, notify=False)
                self.next_batch += 1
        except TOLERATED as e:
            old.abort_epoch_if_pending(epoch, f"epoch failed: {e!r}")
            self.fail_over(e)
            return
        self.observe()
        self.rt = None  # the old driver keeps running
        self.start_driver("a second driver of the job starts and restores, while the first still runs")
        newer: Epoch | None = None
        if stale == "publishes_after_newer_writes" and not self.skip_replayed(n):
            newer = self.begin_epoch(parts, n)
            try:
                self.acknowledge(newer, self.run_tasks(newer.plan(), records, ["ok"] * parts, "before_write"))
            except TOLERATED as e:
                self.runtime.abort_epoch_if_pending(newer, f"epoch failed: {e!r}")
                self.fail_over(e)
                newer = None
        if stale == "commits":
            self.note(f"the old driver's late notification tries to commit checkpoint {epoch.checkpoint_id}")
            self.stale_driver_stops(old, lambda: old.notify_checkpoint_complete(epoch.checkpoint_id))
        else:
            self.note(f"the old driver tries to publish checkpoint {epoch.checkpoint_id}")
            self.stale_driver_stops(old, lambda: old.complete_epoch(epoch))
        if newer is None:
            return
        self.note(f"the new driver completes checkpoint {newer.checkpoint_id}")
        try:
            self.runtime.complete_epoch(newer)
        except TransactionLostError as e:
            raise self.fail(
                "a fenced driver stops without touching the newer one's work",
                f"the new driver's commit of checkpoint {newer.checkpoint_id} answered LOST after the "
                f"old driver, fenced, gave up the same checkpoint id: {e} (contract: transactions of "
                "different drivers never share a name; WriterContext.attempt alone does not tell them apart)",
            ) from e
        except TOLERATED as e:
            self.runtime.abort_epoch_if_pending(newer, f"epoch failed: {e!r}")
            self.fail_over(e)
            return
        self.committed_through = newer.checkpoint_id
        self.next_batch += 1
        self.observe()

    def stale_driver_stops(self, old: JobRuntime, action: Callable[[], object]) -> None:
        """Run the old driver's ``action``: it must raise ``DriverFencedError`` (at once, or from
        the restore of the fail-over a tolerated error leads to), and the old driver must not restart."""
        fenced: DriverFencedError | None = None
        try:
            action()
        except DriverFencedError as e:
            fenced = e
        except TOLERATED as e:  # e.g. verification finds its transactions aborted by the new driver
            self.note(f"the old driver's epoch fails ({type(e).__name__}); it fails over")
            try:
                old.failover(e)
            except DriverFencedError as again:
                fenced = again
        try:
            if fenced is None:
                raise self.fail(
                    "a fenced driver stops",
                    "the old driver went on after a newer driver of the job restored it (contract: "
                    "DriverFencedError)",
                )
            event("the old driver stopped with DriverFencedError")
            self.note("the old driver stops: DriverFencedError")
            try:
                old.failover(fenced)
            except DriverFencedError:
                pass
            else:
                raise self.fail("a fenced driver stops", "the old driver restarted after DriverFencedError")
        finally:
            old.abandon()
        self.observe()

    # -- the end ------------------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if not self.broken and self.rt is not None:
                _step(ContractLives.finish_and_check)(self)
        finally:
            if self.rt is not None:
                self.rt.abandon()
            try:
                self.contract.close_system(self.system)
            finally:
                self.folder.cleanup()

    def drive_to_finished(self) -> None:
        """End of input: drive the job to FINISHED (FLIP-147's final checkpoint), through crashes
        and fail-overs."""
        for _ in range(5):
            try:
                self.runtime.finish()
            except DriverCrash as crash:
                self.driver_crashed(crash)
                continue
            except TOLERATED as e:
                self.fail_over(e)
                continue
            if self.runtime.state is JobState.FINISHED:
                return
        raise self.fail("the job finishes", "five attempts to finish the job failed")

    def finish_and_check(self) -> None:
        """Drive the job to FINISHED (end of input: FLIP-147's final checkpoint), then check that
        every promise is kept exactly once and that nothing lingers."""
        self.say("end of input: the job finishes")
        self.drive_to_finished()
        self.runtime.close()
        self.observe()
        got = self.visible()
        extra = sorted(got - self.promised)
        missing = sorted(self.promised - got - self.may_be_missing)
        if extra or missing:
            raise self.fail(
                "checkpoint ids never repeat a committed one"
                if self.ids_restarted
                else "every durable record exactly once",
                f"after the job finished: missing {_short(missing)}, extra {_short(extra)}"
                + (f"; {self.ids_restarted}" if self.ids_restarted else ""),
            )
        event("a life ended with records visible" if self.promised else "a life ended without a record")
        left = sorted(self.contract.lingering(self.system))
        if left:
            raise self.fail("lingering abort", f"after the job finished, left open: {_short(left)}")
