"""In-memory two-phase-commit sinks for protocol tests (with :mod:`support.harness`).

They record the exact sets of committed, aborted and lingering transactions in a
:class:`FakeExternalSystem` that outlives runtimes (like a broker outlives a driver), with
injectable commit outcomes.

Transaction ids are deterministic: ``<sink>-c<checkpoint>-p<partition>-a<attempt>`` (plus
``-<n>`` for the n-th further transaction of one subtask, and ``~<n>`` when a name is used again
because a checkpoint id was reused after a crash before persist), so tests can assert exact sets.
Protocol violations (abort after commit, commit of an unknown transaction, resume of a finished
file) are recorded in ``FakeExternalSystem.violations``; tests assert it stays empty.

:class:`FakeCheckpointSink` is a :class:`~twophase.sinks.api.CheckpointCommitSink`: like Delta, it commits
all transactions of one checkpoint at once and is idempotent through a per-(job, sink) "last
committed checkpoint" version; each call is recorded in ``FakeExternalSystem.checkpoint_calls``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from twophase.sinks.api import CheckpointCommitSink, InProgressSink, TwoPhaseCommitSink
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome, CommittableSize


@dataclass(frozen=True)
class FakeCommittable:
    """A pre-committed fake transaction."""

    txn_id: str
    checkpoint_id: int
    partition: int
    records: int


CODEC: CommittableCodec[FakeCommittable] = CommittableCodec(FakeCommittable, "test.fake", version=1)


@dataclass(frozen=True)
class CheckpointCommitCall:
    """One recorded ``commit_checkpoint`` / ``recover_and_commit_checkpoint`` call.

    Attributes:
        sink: the sink's name.
        checkpoint_id: the checkpoint committed.
        txn_ids: the committables' transaction ids, in the order given.
        recovery: True for ``recover_and_commit_checkpoint``.
    """

    sink: str
    checkpoint_id: int
    txn_ids: tuple[str, ...]
    recovery: bool


@dataclass
class FakeExternalSystem:
    """The "external system" shared by the fake sinks of a test."""

    open: dict[str, list[str]] = field(default_factory=dict)
    prepared: dict[str, list[str]] = field(default_factory=dict)
    committed: dict[str, list[str]] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)
    owner: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    commit_calls: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    scripted: dict[str, list[CommitOutcome]] = field(default_factory=lambda: defaultdict(list))
    outcome_hook: Callable[[str], CommitOutcome | None] | None = None
    abort_hook: Callable[[str], None] | None = None
    checkpoint_calls: list[CheckpointCommitCall] = field(default_factory=list)
    checkpoint_versions: dict[tuple[str, str], int] = field(default_factory=dict)
    scripted_checkpoints: dict[tuple[str, int], list[CommitOutcome]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def begin(self, txn_id: str, job: str, sink: str, checkpoint: int) -> str:
        """Open ``txn_id``; if that name was used before (a checkpoint id reused after a crash
        before persist), the transaction is named ``<txn_id>~<n>``. Returns the name."""
        n = 0
        name = txn_id
        while name in self.owner:
            n += 1
            name = f"{txn_id}~{n}"
        self.open[name] = []
        self.owner[name] = (job, sink, checkpoint)
        return name

    def committed_records(self) -> list[str]:
        """Every committed record, sorted (a multiset: duplicates show)."""
        return sorted(r for recs in self.committed.values() for r in recs)

    def lingering(self) -> set[str]:
        """Transactions open or pre-committed: neither committed nor aborted."""
        return set(self.open) | set(self.prepared)

    def script(self, txn_id: str, *outcomes: CommitOutcome) -> None:
        """The next commits of ``txn_id`` answer ``outcomes`` (before the real behaviour)."""
        self.scripted[txn_id].extend(outcomes)

    def do_commit(self, txn_id: str) -> CommitOutcome:
        self.commit_calls.append(txn_id)
        if self.scripted.get(txn_id):
            outcome = self.scripted[txn_id].pop(0)
            if outcome is CommitOutcome.LOST and txn_id in self.prepared:
                del self.prepared[txn_id]  # the system timed it out
                self.aborted.add(txn_id)
            return outcome
        if self.outcome_hook is not None and (o := self.outcome_hook(txn_id)) is not None:
            return o
        if txn_id in self.committed:
            return CommitOutcome.ALREADY_COMMITTED
        if txn_id in self.aborted:
            return CommitOutcome.LOST
        if txn_id in self.prepared:
            self.committed[txn_id] = self.prepared.pop(txn_id)
            return CommitOutcome.COMMITTED
        self.violations.append(f"commit of unknown transaction {txn_id}")
        return CommitOutcome.FATAL

    def script_checkpoint(self, sink: str, checkpoint_id: int, *outcomes: CommitOutcome) -> None:
        """The next checkpoint commits of (``sink``, ``checkpoint_id``) answer ``outcomes`` first."""
        self.scripted_checkpoints[(sink, checkpoint_id)].extend(outcomes)

    def do_commit_checkpoint(
        self, sink: str, checkpoint_id: int, txn_ids: Sequence[str], recovery: bool
    ) -> CommitOutcome:
        """Commit ``txn_ids`` of (``sink``, ``checkpoint_id``) atomically, like one Delta commit
        with ``txn(appId=<job>:<sink>, version=checkpoint_id)``: ``ALREADY_COMMITTED`` once the
        (job, sink) version is ≥ ``checkpoint_id``; ``LOST`` if any transaction was aborted (then
        nothing is committed). A call after a newer checkpoint committed while some of its
        transactions are still uncommitted (out-of-order commits drop data) is a violation."""
        self.checkpoint_calls.append(CheckpointCommitCall(sink, checkpoint_id, tuple(txn_ids), recovery))
        if self.scripted_checkpoints.get((sink, checkpoint_id)):
            outcome = self.scripted_checkpoints[(sink, checkpoint_id)].pop(0)
            if outcome is CommitOutcome.LOST:
                for t in txn_ids:  # the system timed them out
                    if t in self.prepared:
                        del self.prepared[t]
                        self.aborted.add(t)
            return outcome
        unknown = [t for t in txn_ids if t not in self.owner]
        if not txn_ids or unknown:
            self.violations.append(f"checkpoint commit of unknown transactions {unknown} ({sink})")
            return CommitOutcome.FATAL
        key = (self.owner[txn_ids[0]][0], sink)
        version = self.checkpoint_versions.get(key)
        if version is not None and version >= checkpoint_id:
            dropped = [t for t in txn_ids if t not in self.committed]
            if dropped:
                self.violations.append(
                    f"{sink} checkpoint {checkpoint_id} committed after {version}: {dropped} dropped"
                )
            return CommitOutcome.ALREADY_COMMITTED
        if any(t in self.aborted for t in txn_ids):
            return CommitOutcome.LOST
        if any(t not in self.prepared for t in txn_ids):
            self.violations.append(f"{sink} checkpoint {checkpoint_id} partially committed before: {txn_ids}")
            return CommitOutcome.FATAL
        for t in txn_ids:
            self.committed[t] = self.prepared.pop(t)
        self.checkpoint_versions[key] = checkpoint_id
        return CommitOutcome.COMMITTED

    def do_abort(self, txn_id: str) -> None:
        if self.abort_hook is not None:
            self.abort_hook(txn_id)  # may raise: the external system refused or did not answer
        if txn_id in self.committed:
            self.violations.append(f"abort of committed transaction {txn_id}")
            return
        self.prepared.pop(txn_id, None)
        self.open.pop(txn_id, None)
        if txn_id in self.owner:
            self.aborted.add(txn_id)

    def abort_lingering(self, scope: LingeringScope[FakeCommittable]) -> int:
        """Abort every transaction of the scope's job and sink not held; each is tried (a failed
        one does not stop the others), then one ``ConnectionError`` names every failure, caused by
        the first (as the connectors' ``LingeringCleanupError``). What is held is read only when
        something of the scope's is open, as the connectors read it (issue #42: reading it decodes
        the committables the committer let go)."""
        candidates = []
        for txn_id in sorted(self.lingering()):
            job, sink, checkpoint = self.owner[txn_id]
            if job == scope.job_id and sink == scope.sink_name and checkpoint <= scope.up_to_checkpoint:
                candidates.append(txn_id)
        if not candidates:
            return 0
        held = {c.txn_id for c in scope.held} | {str(s["txn_id"]) for s in scope.held_in_progress}
        n = 0
        failed: list[str] = []
        first: Exception | None = None
        for txn_id in candidates:
            if txn_id not in held:
                try:
                    self.do_abort(txn_id)
                except Exception as e:
                    failed.append(f"{txn_id}: {e}")
                    first = first or e
                    continue
                n += 1
        if failed:
            raise ConnectionError(f"lingering transactions not aborted: {'; '.join(failed)}") from first
        return n


@dataclass
class FakeTxn:
    ctx: WriterContext
    txn_id: str
    seq: int = 0


def _txn_id(ctx: WriterContext, seq: int) -> str:
    base = f"{ctx.sink_name}-c{ctx.checkpoint_id}-p{ctx.partition}-a{ctx.attempt}"
    return base if seq == 0 else f"{base}-{seq}"


class FakeSink(TwoPhaseCommitSink[FakeTxn, FakeCommittable]):
    """A fake two-phase-commit sink writing the ``key`` column's strings.

    Args:
        name: sink name.
        system: the shared external system.
        emit_empty: pre-commit empty transactions too (a committable with 0 records), as a sink
            that opens transactions after finish() does (FLIP-147's 42/43/44 example).
    """

    codec = CODEC

    def __init__(self, name: str, system: FakeExternalSystem, *, emit_empty: bool = False) -> None:
        self.name = name
        self.system = system
        self.emit_empty = emit_empty

    def begin_transaction(self, ctx: WriterContext) -> FakeTxn:
        return FakeTxn(ctx, self.system.begin(_txn_id(ctx, 0), ctx.job_id, self.name, ctx.checkpoint_id))

    def write(self, txn: FakeTxn, batch: pa.RecordBatch) -> None:
        if txn.txn_id not in self.system.open:
            self.system.violations.append(f"write to a transaction that is not open: {txn.txn_id}")
            return
        self.system.open[txn.txn_id].extend(str(k) for k in batch.column("key").to_pylist())

    def pre_commit(self, txn: FakeTxn) -> FakeCommittable | None:
        records = self.system.open.pop(txn.txn_id)
        if not records and not self.emit_empty:
            self.system.released.add(txn.txn_id)
            return None
        self.system.prepared[txn.txn_id] = records
        return FakeCommittable(txn.txn_id, txn.ctx.checkpoint_id, txn.ctx.partition, len(records))

    def abort_open(self, txn: FakeTxn) -> None:
        if txn.txn_id in self.system.open:
            self.system.do_abort(txn.txn_id)

    def commit(self, committable: FakeCommittable) -> CommitOutcome:
        return self.system.do_commit(committable.txn_id)

    def abort(self, committable: FakeCommittable) -> None:
        self.system.do_abort(committable.txn_id)

    def abort_lingering(self, scope: LingeringScope[FakeCommittable]) -> int:
        return self.system.abort_lingering(scope)

    def measure(self, committable: FakeCommittable) -> CommittableSize:
        return CommittableSize(records=committable.records)


class FakeInProgressSink(InProgressSink[FakeTxn, FakeCommittable]):
    """A fake sink whose "files" span epochs and roll once they hold ``roll_records`` records.

    In-progress state is ``{"txn_id": ..., "size": n}``; resuming truncates the file to ``n``
    records (what a failed attempt wrote after the snapshot is discarded, as with S3's recoverable
    multipart uploads).
    """

    codec = CODEC

    def __init__(self, name: str, system: FakeExternalSystem, *, roll_records: int = 1_000_000) -> None:
        self.name = name
        self.system = system
        self.roll_records = roll_records
        self.resumed: list[str] = []

    def begin_transaction(self, ctx: WriterContext) -> FakeTxn:
        state = ctx.restored_state
        if state is not None:
            txn_id, size = str(state["txn_id"]), int(state["size"])
            if txn_id in self.system.prepared:
                # rolled by an attempt whose checkpoint never completed: like an S3 multipart
                # upload, it is still open until committed, and resumable
                self.system.open[txn_id] = self.system.prepared.pop(txn_id)
            if txn_id not in self.system.open:
                self.system.violations.append(f"resume of a file that is not open: {txn_id}")
                self.system.open[txn_id] = []
            del self.system.open[txn_id][size:]
            self.resumed.append(txn_id)
            return FakeTxn(ctx, txn_id)
        return FakeTxn(ctx, self.system.begin(_txn_id(ctx, 0), ctx.job_id, self.name, ctx.checkpoint_id))

    def write(self, txn: FakeTxn, batch: pa.RecordBatch) -> None:
        self.system.open[txn.txn_id].extend(str(k) for k in batch.column("key").to_pylist())

    def _prepare(self, txn: FakeTxn) -> FakeCommittable:
        records = self.system.open.pop(txn.txn_id)
        self.system.prepared[txn.txn_id] = records
        return FakeCommittable(txn.txn_id, txn.ctx.checkpoint_id, txn.ctx.partition, len(records))

    def pre_commit(self, txn: FakeTxn) -> FakeCommittable | None:
        if len(self.system.open[txn.txn_id]) < self.roll_records:
            return None
        committable = self._prepare(txn)
        txn.seq += 1
        txn.txn_id = self.system.begin(
            _txn_id(txn.ctx, txn.seq), txn.ctx.job_id, self.name, txn.ctx.checkpoint_id
        )
        return committable

    def snapshot_in_progress(self, txn: FakeTxn) -> JsonObject | None:
        records = self.system.open.get(txn.txn_id)
        if not records:
            self.system.open.pop(txn.txn_id, None)
            self.system.released.add(txn.txn_id)
            return None
        return {"txn_id": txn.txn_id, "size": len(records)}

    def finish(self, txn: FakeTxn) -> FakeCommittable | None:
        if not self.system.open.get(txn.txn_id):
            self.system.open.pop(txn.txn_id, None)
            self.system.released.add(txn.txn_id)
            return None
        return self._prepare(txn)

    def abort_in_progress(self, state: JsonObject) -> None:
        self.system.do_abort(str(state["txn_id"]))

    def abort_open(self, txn: FakeTxn) -> None:
        # an in-progress file may be held by a checkpoint: never abort it here; lingering cleanup
        # aborts it if no checkpoint holds it
        pass

    def commit(self, committable: FakeCommittable) -> CommitOutcome:
        return self.system.do_commit(committable.txn_id)

    def abort(self, committable: FakeCommittable) -> None:
        self.system.do_abort(committable.txn_id)

    def abort_lingering(self, scope: LingeringScope[FakeCommittable]) -> int:
        return self.system.abort_lingering(scope)


class FakeCheckpointSink(FakeSink, CheckpointCommitSink[FakeTxn, FakeCommittable]):
    """A fake sink committed per checkpoint (like Delta): :meth:`commit_checkpoint` commits every
    transaction of one checkpoint at once (see :meth:`FakeExternalSystem.do_commit_checkpoint`).
    The per-committable :meth:`commit` is a protocol violation (the runtime must group) and
    answers ``FATAL``.
    """

    def commit(self, committable: FakeCommittable) -> CommitOutcome:
        self.system.violations.append(
            f"per-committable commit of {committable.txn_id} on checkpoint-commit sink {self.name}"
        )
        return CommitOutcome.FATAL

    def commit_checkpoint(self, checkpoint_id: int, committables: Sequence[FakeCommittable]) -> CommitOutcome:
        return self.system.do_commit_checkpoint(
            self.name, checkpoint_id, [c.txn_id for c in committables], recovery=False
        )

    def recover_and_commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[FakeCommittable]
    ) -> CommitOutcome:
        return self.system.do_commit_checkpoint(
            self.name, checkpoint_id, [c.txn_id for c in committables], recovery=True
        )


def keys(*ks: str) -> list[str]:
    """Sorted keys, for comparisons with ``committed_records``."""
    return sorted(ks)
