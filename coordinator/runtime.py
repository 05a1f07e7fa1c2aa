"""The job runtime: what an execution layer (Spark, the test harness) drives, epoch by epoch.

Engine-agnostic (no Spark import). It ties together the job lifecycle
(:mod:`twophase.coordinator.job_lifecycle`), the checkpoint coordinator, the committer, checkpoint storage
and the restart strategy, and implements the job actions of DESIGN.md §5.

Streaming flow, per micro-batch N (DESIGN.md §6)::

    rt = JobRuntime(job_id, sinks, storage, config)
    rt.restore()                                     # or rt.restore(savepoint_location)
    ...
    def on_batch(batch_df, N):                       # foreachBatch
        pos = {"engine": "spark", "query_id": qid, "batch_id": N}
        if rt.replay_check(pos):                     # 1. replay: committed already, skip writing
            return
        epoch = rt.begin_epoch(num_partitions, pos)  # 2. trigger checkpoint c
        plan = ... epoch.checkpoint_id, epoch.restored_in_progress() ...   # broadcast
        rows = ...mapInArrow(...)...collect()        # 3. write + pre-commit in tasks
        for r in rows:                               # 4. acknowledge (one per sink and partition)
            epoch.acknowledge_encoded(r.sink, r.partition, r.attempt, r.committable, r.in_progress, r.records)
        rt.complete_epoch(epoch)                     # 5. persist, 6. notify/commit, 7. abort lingering
                                                     # 8. return: Spark writes its commit log
    rt.finish()                                      # end of input: ONE final checkpoint for all sinks
    # or rt.stop_with_savepoint(drain=...), rt.stop(), rt.cancel()

On a failure, call ``rt.failover(error)`` (restart strategy, then restore) and restart the query;
or wrap the whole run in ``rt.run_with_restarts(body)``. A batch write is one epoch followed by
``finish()``.

Decisions worth knowing:

- Restore: ``recover_and_commit`` every committable of the restored checkpoint (the latest, or a
  savepoint), skipping fully finished sinks (a :class:`~twophase.sinks.api.CheckpointCommitSink`:
  ``recover_and_commit_checkpoint`` once per checkpoint its committables were pre-committed for,
  in checkpoint order); then ``abort_lingering`` per sink, with every
  committable and in-progress state of every retained checkpoint and savepoint held (never
  aborted). New checkpoint ids continue above every id in storage.
- Rescale (the number of partitions changes): new partitions start empty. In-progress state of
  partitions beyond the new parallelism is *handed over*, never aborted: the runtime finishes it
  on the driver (``begin_transaction`` with the state, then ``finish``) inside the new epoch's
  checkpoint, so its data is committed with that checkpoint. Aborting it would lose data the
  previous checkpoint's source position already covers.
- The final checkpoint (finish, stop with savepoint and drain): every live subtask finishes, then
  ONE checkpoint is taken for all sinks; in-progress data is turned into committables by
  ``InProgressSink.finish`` on the driver. The job is FINISHED when its commits are done.
- Stop with savepoint without drain, and plain stop (a retained checkpoint, "reinforce job stop
  semantic"): one checkpoint holding the last source position and the in-progress state, pending
  commits committed, subtasks closed; SUSPENDED. A resume restores it and continues the same
  in-progress transactions; since the position covers the last batch, nothing is replayed.
- Cancel: stops at once, aborts open and pre-committed (not durable) transactions, keeps completed
  checkpoints (``CleanupMode.RETAIN``) or deletes them (``DELETE``: durable but uncommitted
  transactions are committed first — a published checkpoint's promise —, their in-progress state
  is aborted with ``abort_in_progress`` unless a savepoint holds state of the same (sink,
  partition), then ``abort_lingering`` runs with only the savepoints held; savepoints are kept).
  A cancel from another thread while an action hangs (e.g. a commit retrying) takes effect: the
  retry stops, the action raises :class:`JobCanceledError`. Checkpoints are always kept on failure.
- Errors: an ``IllegalTransitionError`` (a caller's protocol mistake) leaves the job as it was;
  any other error of an action moves the job to FAILING (pending checkpoints aborted, subtasks
  closed). Then :meth:`JobRuntime.failover` restarts or gives up (FAILED).
"""

from __future__ import annotations

import enum
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception

from twophase.coordinator.checkpoint_coordinator import (
    CheckpointConfig,
    CheckpointCoordinator,
    CompletedCheckpoint,
    NotifyResult,
    PendingCheckpoint,
)
from twophase.coordinator.clock import Clock, system_clock_ms
from twophase.coordinator.commit_requests import CommitRequest, commit_requests, sink_concurrency
from twophase.coordinator.committer_operator import CommitPolicy, CommitterMetrics, CommitterOperator
from twophase.coordinator.fanout import sink_names_unique
from twophase.coordinator.faults import fault_point
from twophase.coordinator.job_lifecycle import JobLifecycle, JobState, JobTransition
from twophase.coordinator.lanes import group_lanes, run_lanes
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.restart import RestartStrategy, RestartTracker
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError, IllegalTransitionError, JobError

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
R = TypeVar("R")
ALL_CHECKPOINTS = 2**62
"""``LingeringScope.up_to_checkpoint`` meaning "every checkpoint"."""


class JobCanceledError(JobError):
    """The job was canceled while (or before) this action ran."""


class CleanupMode(enum.Enum):
    """What a cancel does with completed checkpoints (savepoints are always kept)."""

    RETAIN = "retain"
    DELETE = "delete"


@dataclass(frozen=True)
class RuntimeConfig:
    """Settings of a job runtime.

    Attributes:
        checkpoint: concurrency, timeout, retention.
        commit: commit retries, transaction-timeout warnings, async commit, LOST on recovery.
        restart: the restart strategy for :meth:`JobRuntime.failover`.
        cancel_cleanup: keep or delete completed checkpoints on cancel.
        abort_lingering_each_epoch: after each completed epoch, ``abort_lingering`` for what failed
            and speculative attempts left (DESIGN.md §6 step 7); skipped while another checkpoint
            is pending.
        commit_drain_timeout_s: how long finish/stop wait for asynchronous commits (``None``: forever).
    """

    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    commit: CommitPolicy = field(default_factory=CommitPolicy)
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    cancel_cleanup: CleanupMode = CleanupMode.RETAIN
    abort_lingering_each_epoch: bool = True
    commit_drain_timeout_s: float | None = None


@dataclass(frozen=True)
class RestoreResult:
    """What :meth:`JobRuntime.restore` found and did.

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
class CheckpointMetrics:
    """Metrics of one completed checkpoint.

    Attributes:
        job_id: the job.
        checkpoint_id: the checkpoint.
        kind: checkpoint, savepoint or final.
        location: where it was published.
        records: records written in its epoch, if every subtask said.
        acknowledgements: acknowledgements received.
        committables: committables in its metadata (its own and older ones still pending).
        persist_ms: time to build and publish the metadata, ms.
        commit_ms: time to commit (submission time only with async commit), ms.
        transactions_committed: transactions committed by its notification.
        transactions_aborted: transactions aborted by its notification and lingering cleanup.
        lingering_aborted: of those, aborted by ``abort_lingering``.
    """

    job_id: str
    checkpoint_id: int
    kind: CheckpointKind
    location: str
    records: int | None
    acknowledgements: int
    committables: int
    persist_ms: float
    commit_ms: float
    transactions_committed: int
    transactions_aborted: int
    lingering_aborted: int


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


def _canonical(obj: JsonObject) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


class Epoch:
    """One epoch's checkpoint, as the execution layer sees it (from :meth:`JobRuntime.begin_epoch`).

    Attributes:
        checkpoint_id: the checkpoint the epoch's transactions belong to.
        kind: the checkpoint's kind.
        num_partitions: the epoch's parallelism.
        source_position: the engine position it covers.
    """

    def __init__(self, runtime: JobRuntime, pending: PendingCheckpoint, num_partitions: int) -> None:
        self._rt = runtime
        self._pending = pending
        self.checkpoint_id = pending.checkpoint_id
        self.kind = pending.kind
        self.num_partitions = num_partitions
        self.source_position = pending.source_position

    def __repr__(self) -> str:
        return f"Epoch(checkpoint_id={self.checkpoint_id}, num_partitions={self.num_partitions})"

    @property
    def sinks(self) -> list[str]:
        """Sinks that write in this epoch (not fully finished), in job order."""
        return sorted({s for s, _ in self._pending.expected}, key=list(self._rt.sinks).index)

    def writer_context(self, sink: str, partition: int, attempt: int = 0) -> WriterContext:
        """The context of subtask (sink, partition, attempt), with its restored in-progress state.

        Raises:
            ConfigError: unknown sink; IllegalTransitionError: the sink does not write in this epoch.
        """
        if (sink, partition) not in self._pending.expected:
            raise IllegalTransitionError(
                f"checkpoint {self.checkpoint_id}",
                self._pending.status.value,
                f"writer_context {sink}[{partition}]",
            )
        return WriterContext(
            job_id=self._rt.job_id,
            sink_name=sink,
            checkpoint_id=self.checkpoint_id,
            partition=partition,
            attempt=attempt,
            num_partitions=self.num_partitions,
            restored_state=self._rt._restored_state(sink, partition, self.checkpoint_id),
        )

    def restored_in_progress(self) -> dict[str, dict[int, JsonObject]]:
        """sink → partition → in-progress state to resume, for partitions ``< num_partitions``."""
        out: dict[str, dict[int, JsonObject]] = {}
        for sink, p in sorted(self._pending.expected):
            if p < self.num_partitions:
                state = self._rt._restored_state(sink, p, self.checkpoint_id)
                if state is not None:
                    out.setdefault(sink, {})[p] = state
        return out

    def acknowledge(
        self,
        sink: str,
        partition: int,
        attempt: int,
        committables: Sequence[Any] = (),
        in_progress: JsonObject | None = None,
        records: int | None = None,
    ) -> bool:
        """Acknowledge subtask (sink, partition): its decoded committables (0 or more) and state.

        Returns:
            True if recorded; False if the checkpoint was aborted meanwhile (committables aborted).

        Raises:
            DuplicateAcknowledgementError: already acknowledged (nothing kept; see :meth:`discard`).
            IllegalTransitionError: not expected, or the checkpoint is no longer pending.
        """
        with self._rt._op_lock:
            return self._rt._coordinator().acknowledge(
                self.checkpoint_id, sink, partition, attempt, committables, in_progress, records
            )

    def acknowledge_encoded(
        self,
        sink: str,
        partition: int,
        attempt: int,
        committable: JsonObject | None,
        in_progress: JsonObject | None = None,
        records: int | None = None,
    ) -> bool:
        """Like :meth:`acknowledge` with the committable as the codec's JSON object (or ``None``).

        Raises:
            CommittableDecodeError: the payload does not decode; plus those of :meth:`acknowledge`.
        """
        sink_obj = self._rt._sink(sink)
        comms = [] if committable is None else [sink_obj.decode(committable)]
        return self.acknowledge(sink, partition, attempt, comms, in_progress, records)

    def discard(self, sink: str, partition: int, attempt: int, committables: Sequence[Any]) -> int:
        """Abort, now, the committables of an attempt that is not acknowledged (a duplicate or
        speculative attempt). Returns how many were aborted."""
        sink_obj = self._rt._sink(sink)
        for c in committables:
            txn = PendingTransaction(sink, partition, attempt, self.checkpoint_id, c, self._rt.clock())
            self._rt._committer.abort(sink_obj, txn)
        return len(committables)

    @property
    def missing(self) -> frozenset[tuple[str, int]]:
        """(sink, partition) acknowledgements still expected."""
        return self._pending.missing

    @property
    def is_fully_acknowledged(self) -> bool:
        """True once every expected acknowledgement arrived."""
        return self._pending.is_fully_acknowledged


class JobRuntime:
    """One job's runtime; see the module docstring for the flow and the decisions.

    Args:
        job_id: the job's stable id (survives restarts).
        sinks: the job's sinks; names unique.
        storage: the job's checkpoint storage (``storage.job_id == job_id``).
        config: settings.
        clock: ms clock (checkpoint timestamps, timeouts, age warnings, restart windows).
        sleep: sleep in seconds (restart delays); commit backoff uses the committer's own.
        commit_sleep: backoff sleep of commit retries (default: interruptible by cancel).
        fault: fault-point hook (default :func:`twophase.coordinator.faults.fault_point`, driven by
            ``TWOPHASE_FAULT``); the harness injects exceptions through it.

    Raises:
        ConfigError: duplicate sink names, or storage of another job.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Sequence[AnySink],
        storage: CheckpointStorage,
        config: RuntimeConfig | None = None,
        *,
        clock: Clock = system_clock_ms,
        sleep: Callable[[float], None] = time.sleep,
        commit_sleep: Callable[[float], None] | None = None,
        fault: Callable[[str], None] = fault_point,
    ) -> None:
        self.job_id = job_id
        sink_names_unique(sinks)
        self.sinks: dict[str, AnySink] = {s.name: s for s in sinks}
        if storage.job_id != job_id:
            raise ConfigError(f"checkpoint storage of job {storage.job_id!r} given to job {job_id!r}")
        self.storage = storage
        self.config = config or RuntimeConfig()
        self.clock = clock
        self._sleep = sleep
        self._commit_sleep = commit_sleep
        self._fault = fault
        self.lifecycle = JobLifecycle(job_id)
        self.restarts = RestartTracker(self.config.restart, clock)
        self._op_lock = threading.RLock()
        self._cancel_requested = threading.Event()
        self._committer = self._new_committer()
        self._past_committer_metrics: list[CommitterMetrics] = []
        self._coord: CheckpointCoordinator | None = None
        self._meta_cache: dict[str, CheckpointMetadata] = {}
        self._restored: CheckpointMetadata | None = None
        self._restore_held: dict[str, tuple[Any, ...]] = {}
        self._last_completed: CheckpointMetadata | None = None
        self._epochs_since_restore = 0
        self._max_triggered = 0
        self._abandoned = False
        self.checkpoint_metrics: list[CheckpointMetrics] = []

    # -- plumbing ---------------------------------------------------------------------------------

    def _new_committer(self) -> CommitterOperator:
        return CommitterOperator(
            self.job_id, self.config.commit, clock=self.clock, sleep=self._commit_sleep, fault=self._fault
        )

    def _sink(self, name: str) -> AnySink:
        try:
            return self.sinks[name]
        except KeyError:
            raise ConfigError(f"unknown sink {name!r}; the job's sinks are {sorted(self.sinks)}") from None

    def _coordinator(self) -> CheckpointCoordinator:
        if self._abandoned:
            raise JobError(f"job {self.job_id}: this runtime was abandoned (simulated crash)")
        if self._coord is None:
            raise IllegalTransitionError(f"job {self.job_id}", self.state.value, "use before restore()")
        return self._coord

    def _restored_state(self, sink: str, partition: int, checkpoint_id: int) -> JsonObject | None:
        return self._coordinator().subtask(sink, partition).in_progress_for(checkpoint_id - 1)

    def _check_canceled(self) -> None:
        if self._cancel_requested.is_set():
            raise JobCanceledError(f"job {self.job_id} was canceled")

    def _transition(self, t: JobTransition) -> None:
        self._check_canceled()
        self.lifecycle.transition(t)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Run an action: a protocol mistake propagates as is; any other error fails the job."""
        try:
            yield
        except IllegalTransitionError:
            raise
        except JobCanceledError:
            raise
        except Exception as e:
            if self._cancel_requested.is_set():
                raise JobCanceledError(f"job {self.job_id} was canceled during the action") from e
            self._fail(e)
            raise

    def _fail(self, error: BaseException) -> None:
        if self._cancel_requested.is_set() or self._abandoned:
            return
        state = self.lifecycle.state
        if state is not JobState.FAILING:
            if not self.lifecycle.can(JobTransition.FAIL):
                return
            self.lifecycle.transition(JobTransition.FAIL)
        log.error(
            "job failing job=%s error=%r", self.job_id, error, extra={"job": self.job_id, "state": "FAILING"}
        )
        if self._coord is not None:
            try:
                self._coord.close_subtasks(f"failure: {error!r}")
            except Exception:  # cleanup is best effort; lingering cleanup on restore finishes it
                log.exception("closing subtasks after a failure failed job=%s", self.job_id)
        self._committer.shutdown(wait=False)

    def _housekeeping(self) -> None:
        coord = self._coordinator()
        self._committer.raise_if_failed()
        coord.confirm_commits()
        coord.check_timeouts()
        self._committer.ages.check(coord.uncommitted_transactions())

    def _remember(self, done: CompletedCheckpoint) -> None:
        self._meta_cache[done.ref.location] = done.metadata
        self._last_completed = done.metadata

    # -- state ------------------------------------------------------------------------------------

    @property
    def state(self) -> JobState:
        """The job's state."""
        return self.lifecycle.state

    @property
    def coordinator(self) -> CheckpointCoordinator:
        """The current run's checkpoint coordinator (after :meth:`restore`).

        Raises:
            IllegalTransitionError: before :meth:`restore`.
        """
        return self._coordinator()

    @property
    def latest_checkpoint(self) -> CheckpointMetadata | None:
        """The newest checkpoint completed in this run, or the restored one."""
        return self._last_completed

    @property
    def committer_metrics(self) -> CommitterMetrics:
        """CommitterOperator counters summed over every run of this runtime."""
        ms = [*self._past_committer_metrics, self._committer.metrics]
        return CommitterMetrics(
            committed=sum(m.committed for m in ms),
            already_committed=sum(m.already_committed for m in ms),
            aborted=sum(m.aborted for m in ms),
            lost_ignored=sum(m.lost_ignored for m in ms),
            retries=sum(m.retries for m in ms),
            commit_time_ms=sum(m.commit_time_ms for m in ms),
        )

    # -- restore ----------------------------------------------------------------------------------

    def restore(
        self, savepoint_location: str | None = None, *, held: Mapping[str, Sequence[Any]] | None = None
    ) -> RestoreResult:
        """Start (CREATED) or finish a restart (RESTARTING): restore, recover, clean up, RUNNING.

        Loads ``savepoint_location`` or the latest checkpoint by listing; ``recover_and_commit``
        its committables (fully finished sinks skipped); ``abort_lingering`` per live sink with
        every retained checkpoint's and savepoint's committables and in-progress states held.

        Args:
            savepoint_location: resume from this savepoint instead of the latest checkpoint.
            held: sink name → committables (decoded) pre-committed for an epoch that is about to
                be acknowledged but is in no checkpoint yet (the Data Source facade, whose tasks
                write before the driver restores); the lingering cleanup keeps them.

        Raises:
            IllegalTransitionError: not CREATED or RESTARTING.
            CorruptCheckpointError: the checkpoint is unreadable (no silent fallback).
            JobError: the checkpoint holds a sink this job does not have.
            TransactionLostError: a committable is LOST (unless ``ignore_lost_on_recovery``).
            CommitFailedError: a re-commit failed.
        """
        with self._op_lock:
            state = self.lifecycle.state
            if state is JobState.CREATED:
                done_transition = JobTransition.START
            elif state is JobState.RESTARTING:
                done_transition = JobTransition.RESTARTED
            else:
                raise IllegalTransitionError(f"job {self.job_id}", state.value, "restore")
            self._check_canceled()
            try:
                self._restore_held = {k: tuple(v) for k, v in (held or {}).items()}
                result = self._restore(savepoint_location)
            except Exception as e:
                if self.lifecycle.state is JobState.RESTARTING and not self._cancel_requested.is_set():
                    self._fail(e)
                raise
            finally:
                self._restore_held = {}
            self._transition(done_transition)
            return result

    def _restore(self, savepoint_location: str | None) -> RestoreResult:
        if self._coord is not None:
            self._past_committer_metrics.append(self._committer.metrics)
            self._committer.shutdown(wait=False)
            self._committer = self._new_committer()
        meta = (
            self.storage.load_location(savepoint_location)
            if savepoint_location is not None
            else self.storage.latest()
        )
        refs = self.storage.list_checkpoints()
        if meta is not None:
            if meta.job_id != self.job_id:
                log.warning(
                    "restoring checkpoint %d of job %s into job %s",
                    meta.checkpoint_id, meta.job_id, self.job_id,
                    extra={"job": self.job_id, "checkpoint": meta.checkpoint_id},
                )  # fmt: skip
            unknown = sorted(set(meta.sinks) - set(self.sinks) - set(meta.fully_finished))
            if unknown:
                raise JobError(
                    f"checkpoint {meta.checkpoint_id} of job {meta.job_id!r} holds state of sinks {unknown} "
                    f"that job {self.job_id!r} does not have; refusing to drop their transactions"
                )
            if savepoint_location is not None:
                self._meta_cache[savepoint_location] = meta
        fully_finished = set(meta.fully_finished) if meta is not None else set()
        recommitted = 0
        lost_before = self._committer.metrics.lost_ignored
        if meta is not None:
            requests: list[CommitRequest] = []
            for name, snap in meta.sinks.items():
                if name in fully_finished:
                    continue
                sink = self.sinks[name]
                txns = [
                    PendingTransaction(
                        name,
                        rec.partition,
                        rec.attempt,
                        meta.checkpoint_id if rec.checkpoint_id is None else rec.checkpoint_id,
                        sink.decode(rec.payload),
                        self.clock(),
                    )
                    for rec in snap.committables
                ]
                txns.sort(key=lambda t: t.checkpoint_id)  # stable: metadata order within a checkpoint
                # a CheckpointCommitSink recovers each checkpoint with ONE call, in checkpoint order
                requests.extend(commit_requests(self.sinks, txns, recovery=True))
            # the sinks recover concurrently (one lane each), see CommitterOperator.commit_all
            self._committer.commit_all(requests)
            recommitted = sum(len(r.txns) for r in requests)
        max_id = max(
            [self._max_triggered, *(r.checkpoint_id for r in refs), meta.checkpoint_id if meta else 0]
        )
        self._coord = CheckpointCoordinator(
            self.job_id,
            list(self.sinks.values()),
            self.storage,
            self._committer,
            self.config.checkpoint,
            clock=self.clock,
            fault=self._fault,
            first_checkpoint_id=max_id + 1,
            restored=meta,
        )
        lingering: dict[str, int] = {}
        for name in self._coord.live_sinks():
            lingering[name] = self._abort_lingering(self.sinks[name], ALL_CHECKPOINTS, extra=meta)
        self._restored = meta
        self._last_completed = meta
        self._epochs_since_restore = 0
        result = RestoreResult(
            checkpoint_id=meta.checkpoint_id if meta else None,
            kind=meta.kind if meta else None,
            source_position=meta.source_position if meta else None,
            end_of_input=meta.end_of_input if meta else False,
            recommitted=recommitted,
            lost_ignored=self._committer.metrics.lost_ignored - lost_before,
            lingering_aborted=lingering,
            fully_finished=tuple(sorted(fully_finished)),
            next_checkpoint_id=max_id + 1,
        )
        log.info(
            "job restored job=%s checkpoint=%s recommitted=%d lingering_aborted=%d next_checkpoint=%d",
            self.job_id, result.checkpoint_id, recommitted, sum(lingering.values()), max_id + 1,
            extra={"job": self.job_id, "checkpoint": result.checkpoint_id},
        )  # fmt: skip
        return result

    # -- lingering ----------------------------------------------------------------------------------

    def _retained_metadata(self, *, savepoints_only: bool = False) -> list[CheckpointMetadata]:
        out: list[CheckpointMetadata] = []
        for ref in self.storage.list_checkpoints():
            if savepoints_only and ref.kind is not CheckpointKind.SAVEPOINT:
                continue
            meta = self._meta_cache.get(ref.location)
            if meta is None:
                meta = self._meta_cache[ref.location] = self.storage.load(ref)
            out.append(meta)
        return out

    def _lingering_scope(
        self,
        sink: AnySink,
        up_to: int,
        *,
        savepoints_only: bool = False,
        extra: CheckpointMetadata | None = None,
    ) -> LingeringScope[Any]:
        held: dict[str, Any] = {}
        held_ip: dict[str, JsonObject] = {}
        max_partitions = 0
        metas = self._retained_metadata(savepoints_only=savepoints_only)
        if extra is not None:
            metas.append(extra)
        for meta in metas:
            snap = meta.sinks.get(sink.name)
            if snap is None:
                continue
            max_partitions = max(max_partitions, snap.num_partitions)
            for rec in snap.committables:
                held.setdefault(_canonical(rec.payload), None)
                if held[_canonical(rec.payload)] is None:
                    held[_canonical(rec.payload)] = sink.decode(rec.payload)
            for state in snap.in_progress.values():
                held_ip[_canonical(state)] = state
        if self._coord is not None and not savepoints_only:
            for t in self._coord.uncommitted_transactions():
                if t.sink_name == sink.name:
                    held[_canonical(sink.encode(t.committable))] = t.committable
            for (s, _), lc in self._coord.subtasks.items():
                if s == sink.name and lc.state.is_live and (st := lc.latest_in_progress) is not None:
                    held_ip[_canonical(st)] = st
            max_partitions = max(max_partitions, self._coord.parallelism.get(sink.name, 0))
        for committable in self._restore_held.get(sink.name, ()):
            held[_canonical(sink.encode(committable))] = committable
        return LingeringScope(
            job_id=self.job_id,
            sink_name=sink.name,
            held=tuple(held.values()),
            held_in_progress=tuple(held_ip.values()),
            up_to_checkpoint=up_to,
            max_partitions=max_partitions,
        )

    def _abort_lingering(
        self,
        sink: AnySink,
        up_to: int,
        *,
        savepoints_only: bool = False,
        extra: CheckpointMetadata | None = None,
    ) -> int:
        n = sink.abort_lingering(
            self._lingering_scope(sink, up_to, savepoints_only=savepoints_only, extra=extra)
        )
        if n:
            log.info(
                "lingering transactions aborted job=%s sink=%s count=%d up_to_checkpoint=%d",
                self.job_id, sink.name, n, up_to, extra={"job": self.job_id, "sink": sink.name},
            )  # fmt: skip
        return n

    # -- epochs -------------------------------------------------------------------------------------

    def replay_check(self, source_position: JsonObject) -> bool:
        """Step 1: if the latest completed checkpoint covers ``source_position`` (the engine replays
        an epoch it had not marked done), make sure its committables are committed and return True:
        the caller must skip writing. Otherwise return False.

        Raises:
            JobError: the position belongs to another engine query (see :func:`position_covers`).
            IllegalTransitionError: not RUNNING.
        """
        with self._op_lock:
            self.lifecycle.require(JobState.RUNNING, action="replay_check")
            last = self._last_completed
            if last is None or not position_covers(last.source_position, source_position):
                return False
            with self._guard():
                self._coordinator().notify_checkpoint_complete(last.checkpoint_id)
                self._committer.drain(self.config.commit_drain_timeout_s)
                self._coordinator().confirm_commits()
            log.info(
                "replayed epoch skipped job=%s checkpoint=%d position=%s",
                self.job_id, last.checkpoint_id, dict(source_position),
                extra={"job": self.job_id, "checkpoint": last.checkpoint_id},
            )  # fmt: skip
            return True

    def begin_epoch(
        self,
        num_partitions: int,
        source_position: JsonObject | None = None,
        *,
        checkpoint_id: int | None = None,
    ) -> Epoch:
        """Step 2: trigger the epoch's checkpoint; every live sink expects one acknowledgement per
        partition ``0 <= p < num_partitions``. In-progress state of partitions beyond
        ``num_partitions`` (rescale) is handed over: finished on the driver into this checkpoint.

        ``checkpoint_id`` forces the id (ids then follow the engine's batch ids, as the Data Source
        facade needs, whose tasks name their transactions before the driver triggers); it must be
        at least the next id.

        Raises:
            JobError: ``checkpoint_id`` is below the next id (storage holds newer checkpoints).
            IllegalTransitionError: not RUNNING; CheckpointLimitError: too many pending checkpoints.
            ConfigError: ``num_partitions`` < 1.
            CommitFailedError, TransactionLostError: an earlier asynchronous commit failed.
        """
        if num_partitions < 1:
            raise ConfigError(f"an epoch needs at least one partition, got {num_partitions}")
        with self._op_lock:
            self.lifecycle.require(JobState.RUNNING, action="begin_epoch")
            self._check_canceled()
            coord = self._coordinator()
            with self._guard():
                self._housekeeping()
                if checkpoint_id is not None:
                    if checkpoint_id < coord.next_checkpoint_id:
                        raise JobError(
                            f"job {self.job_id}: checkpoint {checkpoint_id} asked for, but the next id is "
                            f"{coord.next_checkpoint_id} (storage holds newer checkpoints)"
                        )
                    coord.next_checkpoint_id = checkpoint_id
                participants: dict[str, set[int]] = {}
                handover: list[tuple[str, int, int]] = []
                for name in coord.live_sinks():
                    participants[name] = set(range(num_partitions))
                    if isinstance(self.sinks[name], InProgressSink):
                        old = coord.parallelism.get(name, 0)
                        for (s, p), lc in sorted(coord.subtasks.items()):
                            if (
                                s == name
                                and p >= num_partitions
                                and lc.state.is_live
                                and lc.latest_in_progress
                            ):
                                participants[name].add(p)
                                handover.append((name, p, max(old, p + 1)))
                pc = coord.trigger(
                    CheckpointKind.CHECKPOINT,
                    participants,
                    num_partitions={n: num_partitions for n in participants},
                    source_position=source_position,
                )
                self._max_triggered = pc.checkpoint_id
                try:
                    self._finish_in_process(pc, handover)
                except Exception as e:
                    coord.abort_checkpoint(pc.checkpoint_id, f"handover of in-progress state failed: {e!r}")
                    raise
                self._epochs_since_restore += 1
                return Epoch(self, pc, num_partitions)

    def _finish_in_process(self, pc: PendingCheckpoint, subtasks: Sequence[tuple[str, int, int]]) -> None:
        """Turn each ``(sink, partition, num_partitions)``'s in-progress state into a committable
        of ``pc`` on the driver: the sinks concurrently, a sink's partitions up to its
        ``commit_concurrency`` at once (the same driver-side clients as its commits). All are
        acknowledged only if all succeed."""
        coord = self._coordinator()
        finished: dict[tuple[str, int], Any] = {}

        def finish_one(subtask: tuple[str, int, int]) -> None:
            name, partition, num_partitions = subtask
            sink = self.sinks[name]
            assert isinstance(sink, InProgressSink)
            ctx = WriterContext(
                job_id=self.job_id,
                sink_name=name,
                checkpoint_id=pc.checkpoint_id,
                partition=partition,
                attempt=0,
                num_partitions=max(num_partitions, partition + 1),
                restored_state=coord.subtask(name, partition).in_progress_for(pc.checkpoint_id - 1),
            )
            txn = sink.begin_transaction(ctx)
            try:
                finished[(name, partition)] = sink.finish(txn)
            except Exception:
                try:
                    sink.abort_open(txn)
                except Exception:
                    log.exception(
                        "abort_open failed job=%s sink=%s partition=%d", self.job_id, name, partition
                    )
                raise

        lanes = group_lanes(subtasks, lambda s: s[0], lambda name: sink_concurrency(self.sinks[name]))
        run_lanes(lanes, finish_one, thread_prefix=f"finish-{self.job_id}")
        for (name, partition), committable in sorted(finished.items()):
            coord.acknowledge(
                pc.checkpoint_id, name, partition, 0, [] if committable is None else [committable], None, 0
            )
            log.info(
                "in-progress state finished on the driver job=%s sink=%s checkpoint=%d partition=%d",
                self.job_id, name, pc.checkpoint_id, partition,
                extra={"job": self.job_id, "sink": name, "checkpoint": pc.checkpoint_id,
                       "partition": partition},
            )  # fmt: skip

    def complete_epoch(
        self, epoch: Epoch, *, notify: bool = True, abort_lingering: bool | None = None
    ) -> CheckpointMetrics:
        """Steps 5–7: persist the epoch's checkpoint atomically, then (``notify``) commit every
        pending transaction ≤ it, then abort what failed and speculative attempts left.

        Args:
            epoch: from :meth:`begin_epoch`, fully acknowledged.
            notify: False leaves the notification to a later :meth:`notify_checkpoint_complete`
                (the harness scripts late, lost and out-of-order notifications this way).
            abort_lingering: override ``RuntimeConfig.abort_lingering_each_epoch``.

        Raises:
            IllegalTransitionError: missing acknowledgements, or an older checkpoint is pending.
            CheckpointStorageError: publishing failed (the checkpoint is aborted; the job fails).
            TransactionLostError, CommitFailedError: a commit failed (the job fails).
        """
        with self._op_lock:
            self.lifecycle.require(JobState.RUNNING, action="complete_epoch")
            self._check_canceled()
            with self._guard():
                return self._complete(epoch.checkpoint_id, notify=notify, abort_lingering=abort_lingering)

    def _complete(
        self, checkpoint_id: int, *, notify: bool, abort_lingering: bool | None
    ) -> CheckpointMetrics:
        coord = self._coordinator()
        done = coord.complete(checkpoint_id)
        self._remember(done)
        nr = NotifyResult(checkpoint_id, 0, 0, 0, 0.0)
        if notify:
            nr = coord.notify_checkpoint_complete(checkpoint_id)
            self._fault("after_commit")
        lingering = 0
        do_lingering = self.config.abort_lingering_each_epoch if abort_lingering is None else abort_lingering
        if do_lingering and not coord.pending_checkpoints:
            for name in coord.live_sinks():
                lingering += self._abort_lingering(self.sinks[name], checkpoint_id)
        metrics = CheckpointMetrics(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            kind=done.metadata.kind,
            location=done.ref.location,
            records=done.records,
            acknowledgements=done.acknowledgements,
            committables=sum(len(s.committables) for s in done.metadata.sinks.values()),
            persist_ms=done.persist_ms,
            commit_ms=nr.commit_ms,
            transactions_committed=nr.committed,
            transactions_aborted=nr.aborted + lingering,
            lingering_aborted=lingering,
        )
        self.checkpoint_metrics.append(metrics)
        log.info(
            "checkpoint metrics job=%s checkpoint=%d kind=%s records=%s persist_ms=%.1f commit_ms=%.1f "
            "committed=%d aborted=%d",
            self.job_id, checkpoint_id, metrics.kind.value, metrics.records, metrics.persist_ms,
            metrics.commit_ms, metrics.transactions_committed, metrics.transactions_aborted,
            extra={"job": self.job_id, "checkpoint": checkpoint_id},
        )  # fmt: skip
        return metrics

    def notify_checkpoint_complete(self, checkpoint_id: int) -> NotifyResult:
        """Deliver a (late, repeated or out-of-order) notification: commit every pending
        transaction ≤ ``checkpoint_id``. A no-op for what a newer notification committed.

        Raises:
            IllegalTransitionError: the checkpoint never completed.
            TransactionLostError, CommitFailedError: a commit failed (the job fails).
        """
        with self._op_lock:
            self._check_canceled()
            with self._guard():
                return self._coordinator().notify_checkpoint_complete(checkpoint_id)

    def await_commits(self, timeout_s: float | None = None) -> None:
        """Wait until every asynchronous commit submitted so far has run (a no-op with synchronous
        commit), then forget the confirmed transactions.

        Raises:
            TransactionLostError, CommitFailedError: a commit failed, or the wait timed out (the
                job fails).
        """
        with self._op_lock, self._guard():
            self._committer.drain(timeout_s)
            self._coordinator().confirm_commits()

    def abort_epoch(self, epoch: Epoch, reason: str) -> list[int]:
        """Abort the epoch's checkpoint (and newer pending ones) and their pre-committed
        transactions; the job keeps its state (call :meth:`failover` to restart). Returns the
        aborted ids.

        Raises:
            IllegalTransitionError: the checkpoint already completed.
        """
        with self._op_lock:
            return self._coordinator().abort_checkpoint(epoch.checkpoint_id, reason)

    # -- finish / stop / cancel -------------------------------------------------------------------

    def _require_no_pending(self, action: str) -> None:
        pending = self._coordinator().pending_checkpoints
        if pending:
            raise IllegalTransitionError(
                f"job {self.job_id}", self.state.value, f"{action} with pending checkpoints "
                f"{[p.checkpoint_id for p in pending]} (complete or abort them first)",
            )  # fmt: skip

    def finish(self, source_position: JsonObject | None = None) -> CheckpointMetrics | None:
        """End of input: every live subtask finishes, then ONE final checkpoint for all sinks
        (FLIP-147), commit, close; FINISHED. Returns the final checkpoint's metrics, or ``None``
        when the job was restored from a final checkpoint and nothing ran since (nothing to do).

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            plus the errors of :meth:`complete_epoch` (the job fails).
        """
        with self._op_lock:
            self.lifecycle.require(JobState.RUNNING, action="finish")
            self._require_no_pending("finish")
            self._transition(JobTransition.FINISH)
            with self._guard():
                self._fault("during_finish")
                self._housekeeping()
                restored = self._restored
                if restored is not None and restored.end_of_input and self._epochs_since_restore == 0:
                    log.info(
                        "job restored from a final checkpoint: nothing to finish job=%s checkpoint=%d",
                        self.job_id, restored.checkpoint_id, extra={"job": self.job_id},
                    )  # fmt: skip
                    metrics = None
                else:
                    metrics = self._final_checkpoint(
                        CheckpointKind.FINAL, source_position, "during_final_checkpoint"
                    )
                self._transition(JobTransition.FINISHED)
                return metrics

    def _final_checkpoint(
        self, kind: CheckpointKind, source_position: JsonObject | None, fault: str
    ) -> CheckpointMetrics:
        coord = self._coordinator()
        coord.finish_subtasks()
        participants: dict[str, list[int]] = {}
        for (name, p), lc in sorted(coord.subtasks.items()):
            if (
                name in coord.live_sinks()
                and isinstance(self.sinks[name], InProgressSink)
                and lc.state.is_live
                and lc.latest_in_progress is not None
            ):
                participants.setdefault(name, []).append(p)
        last = self._last_completed
        pc = coord.trigger(
            kind,
            participants,
            source_position=source_position
            if source_position is not None
            else (last.source_position if last else None),
            end_of_input=True,
        )
        self._max_triggered = pc.checkpoint_id
        self._finish_in_process(
            pc, [(n, p, coord.parallelism.get(n, p + 1)) for n, parts in participants.items() for p in parts]
        )
        self._fault(fault)
        metrics = self._complete(pc.checkpoint_id, notify=True, abort_lingering=False)
        self._committer.drain(self.config.commit_drain_timeout_s)
        coord.confirm_commits()
        for name in coord.live_sinks():
            self._abort_lingering(self.sinks[name], pc.checkpoint_id)
        return metrics

    def _suspend_checkpoint(self, kind: CheckpointKind, fault: str) -> CheckpointRef:
        coord = self._coordinator()
        last = self._last_completed
        pc = coord.trigger(kind, {}, source_position=last.source_position if last else None)
        self._max_triggered = pc.checkpoint_id
        self._fault(fault)
        self._complete(pc.checkpoint_id, notify=True, abort_lingering=False)
        self._committer.drain(self.config.commit_drain_timeout_s)
        coord.confirm_commits()
        coord.close_subtasks("suspended")
        for name in coord.live_sinks():
            self._abort_lingering(self.sinks[name], pc.checkpoint_id)
        return coord.completed[-1].ref

    def stop_with_savepoint(self, drain: bool) -> CheckpointRef:
        """Stop with a savepoint (between epochs).

        ``drain=True``: like :meth:`finish`, the final checkpoint kept as a savepoint; FINISHED.
        ``drain=False``: a savepoint holding the in-progress state without finishing it, pending
        commits done, subtasks closed; SUSPENDED. Resume with ``restore(ref.location)`` in a new
        runtime: the same in-progress transactions continue.

        Returns:
            the savepoint's ref (``location`` to resume from).

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            JobCanceledError: a cancel took over.
        """
        with self._op_lock:
            self.lifecycle.require(JobState.RUNNING, action="stop_with_savepoint")
            self._require_no_pending("stop_with_savepoint")
            self._transition(JobTransition.STOP)
            with self._guard():
                self._housekeeping()
                if drain:
                    self._final_checkpoint(CheckpointKind.SAVEPOINT, None, "during_stop_with_savepoint")
                    ref = self._coordinator().completed[-1].ref
                    self._transition(JobTransition.STOPPED_DRAINED)
                else:
                    ref = self._suspend_checkpoint(CheckpointKind.SAVEPOINT, "during_stop_with_savepoint")
                    self._transition(JobTransition.SUSPEND)
                return ref

    def stop(self) -> CheckpointRef:
        """Plain stop ("reinforce job stop semantic"): a final *retained checkpoint* (not a
        savepoint) so that a resume replays nothing; no drain; SUSPENDED. A :meth:`cancel` from
        another thread while it hangs takes effect.

        Raises:
            IllegalTransitionError: not RUNNING, or checkpoints pending.
            JobCanceledError: a cancel took over.
        """
        with self._op_lock:
            self.lifecycle.require(JobState.RUNNING, action="stop")
            self._require_no_pending("stop")
            self._transition(JobTransition.STOP)
            with self._guard():
                self._housekeeping()
                ref = self._suspend_checkpoint(CheckpointKind.CHECKPOINT, "during_stop_with_savepoint")
                self._transition(JobTransition.SUSPEND)
                return ref

    def cancel(self) -> None:
        """Cancel now: abort pending checkpoints and every open or pre-committed (not durable)
        transaction, keep (RETAIN) or delete (DELETE) completed checkpoints; CANCELED.

        Safe to call from another thread while an action runs or hangs: retries stop at once and
        the action raises :class:`JobCanceledError`; the cleanup runs when it has returned.

        Raises:
            IllegalTransitionError: the job is already FINISHED, SUSPENDED, CANCELED or FAILED.
            JobError: canceled, but a cleanup step failed (logged; the job is CANCELED anyway).
        """
        self.lifecycle.transition(JobTransition.CANCEL)
        self._cancel_requested.set()
        self._committer.cancel()
        with self._op_lock:
            errors: list[BaseException] = []
            self._fault("during_cancel")
            coord = self._coord
            if coord is not None:
                try:
                    coord.close_subtasks("canceled")
                except Exception as e:
                    log.exception("cancel: closing subtasks failed job=%s", self.job_id)
                    errors.append(e)
            self._committer.shutdown(wait=False)
            try:
                if self.config.cancel_cleanup is CleanupMode.DELETE:
                    self._delete_checkpoints_on_cancel()
                elif coord is not None:
                    for name in coord.live_sinks():
                        self._abort_lingering(self.sinks[name], ALL_CHECKPOINTS)
            except Exception as e:
                log.exception("cancel: cleanup failed job=%s", self.job_id)
                errors.append(e)
            self.lifecycle.transition(JobTransition.CANCELED)
            if errors:
                raise JobError(f"job {self.job_id} canceled, but cleanup failed: {errors!r}") from errors[0]

    def _delete_checkpoints_on_cancel(self) -> None:
        coord = self._coord
        # a published checkpoint promised its transactions: commit them before deleting it
        if coord is not None:
            committer = self._new_committer()
            done: list[CommitRequest] = []
            try:
                committer.commit_all(
                    commit_requests(self.sinks, coord.uncommitted_transactions()),
                    cancellable=False,
                    on_done=done.append,
                )
            finally:  # confirmed here, on one thread: a subtask's pending list is not thread-safe
                for request in done:
                    for t in request.txns:
                        coord.subtasks[(t.sink_name, t.partition)].commit_confirmed(t)
            self._past_committer_metrics.append(committer.metrics)
        # in-progress state may continue across checkpoints (one upload, growing): state that a
        # savepoint may still resume is identified by (sink, partition), never aborted here
        kept = {
            (name, p) for m in self._retained_metadata(savepoints_only=True)
            for name, snap in m.sinks.items() for p in snap.in_progress
        }  # fmt: skip
        doomed = [r for r in self.storage.list_checkpoints() if r.kind is not CheckpointKind.SAVEPOINT]
        abandoned: dict[str, dict[str, JsonObject]] = {}
        for ref in doomed:
            meta = self._meta_cache.get(ref.location) or self.storage.load(ref)
            for name, snap in meta.sinks.items():
                for p, state in snap.in_progress.items():
                    if (name, p) not in kept:
                        abandoned.setdefault(name, {})[_canonical(state)] = state
        for ref in doomed:
            self.storage.delete(ref)
            self._meta_cache.pop(ref.location, None)
        for name, states in abandoned.items():
            sink = self.sinks.get(name)
            if isinstance(sink, InProgressSink):
                for state in states.values():
                    sink.abort_in_progress(state)
        for name in self.sinks:
            if coord is None or name in coord.live_sinks():
                n = self.sinks[name].abort_lingering(
                    self._lingering_scope(self.sinks[name], ALL_CHECKPOINTS, savepoints_only=True)
                )
                log.info("cancel: lingering aborted job=%s sink=%s count=%d", self.job_id, name, n)
        log.info(
            "cancel: checkpoints deleted job=%s count=%d in_progress_aborted=%d",
            self.job_id, len(doomed), sum(len(v) for v in abandoned.values()), extra={"job": self.job_id},
        )  # fmt: skip

    # -- failure / restart ------------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Report a failure of the execution (e.g. a failed task or query): the job goes FAILING,
        pending checkpoints are aborted and subtasks closed. Checkpoints are kept."""
        with self._op_lock:
            self._fail(error)

    def failover(self, error: BaseException) -> RestoreResult:
        """Fail (if not failing yet), then restart per the restart strategy: wait, restore, RUNNING.

        Raises:
            JobError: the restart strategy is exhausted; the job is FAILED.
            JobCanceledError: the job was canceled.
            plus the errors of :meth:`restore` (the job is FAILING again: call ``failover`` again).
        """
        with self._op_lock:
            self._check_canceled()
            self._fail(error)
            self.lifecycle.require(JobState.FAILING, action="failover")
            delay = self.restarts.try_restart()
            if delay is None:
                self.lifecycle.transition(JobTransition.GIVE_UP)
                raise JobError(
                    f"job {self.job_id} failed: restart strategy exhausted after "
                    f"{len(self.restarts.restarts)} restarts; last error: {error!r}"
                ) from error
            self.lifecycle.transition(JobTransition.RESTART)
            log.warning(
                "job restarting job=%s delay_s=%.3f restarts=%d",
                self.job_id, delay, len(self.restarts.restarts),
                extra={"job": self.job_id},
            )  # fmt: skip
            self._sleep(delay)
            return self.restore()

    def run_with_restarts(self, body: Callable[[JobRuntime], R], savepoint_location: str | None = None) -> R:
        """Run ``body(self)`` (which drives epochs, then finishes or stops) under the restart
        strategy (tenacity): restore first; on a failure, fail the job, wait, restore and run
        ``body`` again, until it returns or the strategy is exhausted (then FAILED).

        Raises:
            JobCanceledError: canceled. The last error: the strategy is exhausted (job FAILED), or
            an ``IllegalTransitionError`` (a protocol mistake in ``body``; the job is FAILED).
        """
        retrying = Retrying(
            stop=self.restarts.as_stop(),
            wait=self.restarts.as_wait(),
            sleep=self._sleep,
            retry=retry_if_exception(lambda e: not isinstance(e, (JobCanceledError, IllegalTransitionError))),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self._check_canceled()
                    if self.state is JobState.FAILING:
                        self.lifecycle.transition(JobTransition.RESTART)
                        self.restore()
                    elif self.state is JobState.CREATED:
                        self.restore(savepoint_location)
                    try:
                        return body(self)
                    except JobCanceledError:
                        raise
                    except Exception as e:
                        with self._op_lock:
                            self._fail(e)
                        raise
        except BaseException:
            if self.lifecycle.can(JobTransition.GIVE_UP):
                self.lifecycle.transition(JobTransition.GIVE_UP)
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def abandon(self) -> None:
        """Test hook: simulate the driver process dying. Nothing is closed, aborted or committed;
        this runtime refuses further use. Restore in a new runtime from the same storage."""
        self._abandoned = True
        self._committer.shutdown(wait=False)

    def close(self) -> None:
        """Release driver-side resources: the committer thread and the sinks' clients."""
        self._committer.shutdown(wait=True)
        for s in self.sinks.values():
            try:
                s.close()
            except Exception:
                log.exception("sink close failed job=%s sink=%s", self.job_id, s.name)
