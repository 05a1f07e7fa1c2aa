"""What a checkpoint is while the coordinator handles it: settings, states, pending and completed
checkpoints, and the result of a notification (see
:mod:`twophase.coordinator.checkpoint.checkpoint_coordinator`).

Checkpoint states: ``PENDING ──complete──► COMPLETED``, ``PENDING ──abort──► ABORTED`` and
``PENDING ──in_doubt──► IN_DOUBT`` (publish outcome unknown); :class:`PendingCheckpoint` names and
checks each transition, and only it changes its status.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twophase.coordinator.state.ack_table import KEY, key_table, records_per_sink
from twophase.coordinator.state.acknowledgement import (
    ACK_SCHEMA,
    Acknowledgement,
    acknowledgement_table,
    acknowledgements_in,
)
from twophase.coordinator.state.metadata import (
    COMMITTABLE_COLUMNS,
    CheckpointKind,
    CheckpointMetadata,
    CommittableRows,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.state.subtask_lifecycle import (
    CommittablesOf,
    LedgerBlock,
    PendingTransaction,
    SinkLedger,
    SubtaskLifecycle,
    TxnRows,
)
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError, IllegalTransitionError

SubtaskKey = tuple[str, int]
"""(sink name, partition)."""


class CheckpointLimitError(IllegalTransitionError):
    """A trigger while ``max_concurrent_checkpoints`` checkpoints are pending."""


class DuplicateAcknowledgementError(IllegalTransitionError):
    """A second acknowledgement of one (sink, partition) in one checkpoint; its committables are not
    kept — abort them (``Epoch.discard``) or leave them to ``abort_lingering``."""


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpointing settings.

    Attributes:
        max_concurrent_checkpoints: pending checkpoints allowed at once (≥ 1).
        checkpoint_timeout_ms: a pending checkpoint older than this is aborted by
            :meth:`CheckpointCoordinator.check_timeouts`; ``None``: never.
        retained_checkpoints: completed checkpoints kept (≥ 1); savepoints are never deleted.

    Raises:
        ConfigError: an out-of-range value.
    """

    max_concurrent_checkpoints: int = 1
    checkpoint_timeout_ms: int | None = 600_000
    retained_checkpoints: int = 1

    def __post_init__(self) -> None:
        if self.max_concurrent_checkpoints < 1:
            raise ConfigError(
                f"max_concurrent_checkpoints must be >= 1, got {self.max_concurrent_checkpoints}"
            )
        if self.checkpoint_timeout_ms is not None and self.checkpoint_timeout_ms <= 0:
            raise ConfigError(f"checkpoint_timeout_ms must be > 0, got {self.checkpoint_timeout_ms}")
        if self.retained_checkpoints < 1:
            raise ConfigError(f"retained_checkpoints must be >= 1, got {self.retained_checkpoints}")


class CheckpointStatus(enum.Enum):
    """Where one checkpoint is."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"
    IN_DOUBT = "IN_DOUBT"
    """Publishing failed with an unknown outcome: it may be durable; the restore decides."""


class AckLedger:
    """A pending checkpoint's acknowledgements as Arrow columns (issue #42): one table of
    :data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA` rows per intake (a whole epoch's
    first attempts, or one driver-side acknowledgement), never a Python object per row. Every row
    names a distinct expected (sink, partition) (the coordinator checks before it appends), so the
    checkpoint is fully acknowledged when the rows number the expected subtasks; the keys, the
    records and the objects are read from the columns only where a rare path needs them (a missing
    subtask's name, a duplicate's, a test).
    """

    __slots__ = ("_chunks", "rows")

    def __init__(self) -> None:
        self._chunks: list[pa.Table] = []
        self.rows = 0
        """Acknowledgements recorded."""

    def append(self, table: pa.Table) -> None:
        """Keep ``table``'s rows (of distinct expected subtasks not yet in the ledger)."""
        if table.num_rows:
            self._chunks.append(table)
            self.rows += table.num_rows

    def table(self) -> pa.Table:
        """Every recorded row, in the order recorded."""
        if len(self._chunks) == 1:
            return self._chunks[0]
        if not self._chunks:
            return ACK_SCHEMA.empty_table()
        return pa.concat_tables(self._chunks)

    def keys(self) -> set[SubtaskKey]:
        """The recorded (sink, partition) pairs (a Python pass: for the rare paths only)."""
        t = self.table()
        return set(zip(t["sink"].to_pylist(), t["partition"].to_pylist(), strict=True))

    def recorded_in(self, keys: pa.Table) -> pa.Array:
        """Per row of ``keys`` (``sink``, ``partition`` columns): whether the ledger holds it."""
        if not self.rows:
            return pa.array([False] * keys.num_rows, pa.bool_())
        mine = self.table().select(KEY)
        return pc.is_in(_key_strings(keys), value_set=_key_strings(mine))

    def objects(self) -> dict[SubtaskKey, Acknowledgement]:
        """(sink, partition) → its acknowledgement as an object (tests, error messages)."""
        return {(a.sink, a.partition): a for a in acknowledgements_in(self.table())}

    def records(self) -> int | None:
        """Records of the epoch if every row says: the largest per-sink sum (every sink of an
        epoch takes the same input), else ``None``."""
        t = self.table()
        if t.num_rows == 0:
            return 0
        if t["records"].null_count:
            return None
        return max(records_per_sink(t).values())

    def in_progress(self, sink: str) -> list[JsonObject]:
        """The in-progress states ``sink``'s rows carry, in partition order (parsed here: the rows
        that carry one are the exceptions)."""
        t = self.table()
        if t.num_rows == 0 or t["in_progress"].null_count == t.num_rows:
            return []
        mine = t.filter(
            pc.and_(pc.equal(t["sink"], pa.scalar(sink, pa.string())), pc.is_valid(t["in_progress"]))
        )
        mine = mine.sort_by("partition")
        return [json.loads(raw) for raw in mine["in_progress"].to_pylist()]


def _key_strings(keys: pa.Table) -> pa.Array:
    """``sink`` and ``partition`` joined into one string per row (a key Arrow's set lookups take)."""
    joined = pc.binary_join_element_wise(
        keys["sink"], pc.cast(keys["partition"], pa.string()), pa.scalar("\x00", pa.string())
    )
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


@dataclass
class PendingCheckpoint:
    """A triggered checkpoint and its acknowledgements (see the module docstring).

    Attributes:
        checkpoint_id: its id.
        kind: checkpoint, savepoint or final.
        triggered_ms: trigger time, ms since the epoch.
        expected: the (sink, partition) acknowledgements it needs.
        num_partitions: sink → the epoch's parallelism.
        source_position: the engine position it covers, stored in the metadata.
        end_of_input: the job reached end of input.
        expected_keys: :attr:`expected` as a (sink, partition) table, if the trigger has it already
            (the coordinator keeps it per set of participants: issue #42); else built on first use.
        ledger: the acknowledgements recorded, as columns (:class:`AckLedger`).
    """

    checkpoint_id: int
    kind: CheckpointKind
    triggered_ms: int
    expected: Set[SubtaskKey]
    num_partitions: Mapping[str, int]
    source_position: JsonObject | None = None
    end_of_input: bool = False
    status: CheckpointStatus = CheckpointStatus.PENDING
    abort_reason: str | None = None
    expected_keys: pa.Table | None = field(default=None, repr=False, compare=False)
    ledger: AckLedger = field(default_factory=AckLedger, repr=False, compare=False)
    _txns: dict[str, dict[int, tuple[PendingTransaction[Any], ...]]] = field(
        default_factory=dict, init=False, repr=False
    )
    """sink → partition → the pending transactions its acknowledgement made, for the subtasks
    acknowledged through their lifecycles (the exceptions, the one-by-one path): the same objects
    its lifecycle holds, so verification decodes each at most once, and the committer reuses it."""
    _blocks: dict[str, list[LedgerBlock]] = field(default_factory=dict, init=False, repr=False)
    """sink → the ledger blocks its common-path acknowledgements made (their rows' transactions,
    made on first read, are the ledger's: issue #42)."""
    _acked: set[str] = field(default_factory=set, init=False, repr=False)
    """The sinks some subtask of which acknowledged."""

    def expected_table(self) -> pa.Table:
        """:attr:`expected` as a (sink, partition) table
        (:func:`~twophase.coordinator.state.ack_table.key_table`),
        built once: what a table of acknowledgements is checked against."""
        if self.expected_keys is None:
            self.expected_keys = key_table(self.expected)
        return self.expected_keys

    @property
    def acks(self) -> dict[SubtaskKey, Acknowledgement]:
        """(sink, partition) → its acknowledgement, made from the ledger's columns on each read,
        its committable the payload its ledger block row or transaction holds (tests and
        messages; the coordinator reads :attr:`ledger`)."""
        payloads: dict[SubtaskKey, bytes | None] = {}
        for sink, blocks in self._blocks.items():
            for b in blocks:
                payloads.update(zip(((sink, p) for p in b.partitions), b.payload.to_pylist(), strict=True))
        for sink, by_partition in self._txns.items():
            payloads.update(
                ((sink, p), txns[0].payload if txns else None) for p, txns in by_partition.items()
            )
        return {k: replace(a, committable=payloads.get(k)) for k, a in self.ledger.objects().items()}

    def record_table(
        self,
        table: pa.Table,
        transactions: Mapping[str, Mapping[int, Sequence[PendingTransaction[Any]]]],
        blocks: Mapping[str, LedgerBlock] | None = None,
    ) -> None:
        """Keep ``table``'s rows (:data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA`, each
        of a distinct expected subtask not acknowledged yet: the coordinator checked) as those
        subtasks' acknowledgements, with the pending ``transactions`` the exceptions among them
        made (sink → partition → transactions) and the ledger ``blocks`` the others' rows make
        (sink → its block). The payloads are held once, by those blocks and transactions (issue
        #42): ``table``'s ``committable`` column is not read (the coordinator hands it null).

        Raises:
            IllegalTransitionError: the checkpoint is no longer pending.
        """
        self._require_pending(f"acknowledge {table.num_rows} subtasks")
        self.ledger.append(table)
        if table.num_rows:
            self._acked.update(table["sink"].unique().to_pylist())
        for sink, by_partition in transactions.items():
            if by_partition:
                mine = self._txns.setdefault(sink, {})
                for p, txns in by_partition.items():
                    mine[p] = tuple(txns)
        for sink, block in (blocks or {}).items():
            self._blocks.setdefault(sink, []).append(block)

    def record(
        self, key: SubtaskKey, ack: Acknowledgement, transactions: Sequence[PendingTransaction[Any]]
    ) -> None:
        """Keep ``ack`` as subtask ``key``'s acknowledgement, with the pending ``transactions`` it
        made (the coordinator checked both first): :meth:`record_table` of one row.

        Raises:
            IllegalTransitionError: the checkpoint is no longer pending.
        """
        self.record_table(
            acknowledgement_table([replace(ack, committable=None)]), {key[0]: {key[1]: transactions}}
        )

    def is_acknowledged(self, key: SubtaskKey) -> bool:
        """Whether subtask ``key`` acknowledged already (a column lookup: the one-by-one path)."""
        if not self.ledger.rows:
            return False
        probe = pa.table(
            {"sink": pa.array([key[0]], pa.string()), "partition": pa.array([key[1]], pa.int32())}
        )
        return bool(self.ledger.recorded_in(probe)[0].as_py())

    def acknowledged(self, sink: str) -> tuple[Sequence[Any], list[JsonObject]] | None:
        """What ``sink``'s subtasks acknowledged, in partition order: their committables (each
        decoded on first access, once: :class:`~twophase.coordinator.state.subtask_lifecycle.CommittablesOf`)
        and their in-progress states; ``None`` if none acknowledged."""
        if sink not in self._acked:
            return None
        mine = self._txns.get(sink, {})
        own = [t for p in sorted(mine) for t in mine[p]]
        blocks = self._blocks.get(sink, [])
        if not blocks:
            committables: Sequence[Any] = CommittablesOf(own)
        else:
            committables = _by_partition(blocks, own)
        return committables, self.ledger.in_progress(sink)

    def complete(self) -> None:
        """PENDING → COMPLETED: its metadata is published.

        Raises:
            IllegalTransitionError: not pending.
        """
        self._require_pending("complete")
        self.status = CheckpointStatus.COMPLETED

    def mark_in_doubt(self) -> None:
        """PENDING → IN_DOUBT: its publish may or may not have landed.

        Raises:
            IllegalTransitionError: not pending.
        """
        self._require_pending("in_doubt")
        self.status = CheckpointStatus.IN_DOUBT

    def abort(self, reason: str) -> None:
        """PENDING → ABORTED, for ``reason``.

        Raises:
            IllegalTransitionError: not pending.
        """
        self._require_pending("abort")
        self.status = CheckpointStatus.ABORTED
        self.abort_reason = reason

    def _require_pending(self, transition: str) -> None:
        if self.status is not CheckpointStatus.PENDING:
            raise IllegalTransitionError(f"checkpoint {self.checkpoint_id}", self.status.value, transition)

    @property
    def missing(self) -> frozenset[SubtaskKey]:
        """Expected acknowledgements not yet received (read from the ledger's columns)."""
        if self.ledger.rows == len(self.expected):
            return frozenset()
        return frozenset(self.expected - self.ledger.keys())

    @property
    def is_fully_acknowledged(self) -> bool:
        """True once every expected acknowledgement arrived: the ledger holds a row per expected
        subtask (each row names a distinct expected one)."""
        return self.ledger.rows == len(self.expected)

    @property
    def acknowledgements(self) -> int:
        """Acknowledgements recorded."""
        return self.ledger.rows

    @property
    def records(self) -> int | None:
        """Records written in the epoch, if every acknowledgement said: the largest per-sink sum
        (every sink of an epoch takes the same input, so this is the epoch's record count)."""
        return self.ledger.records()


@dataclass(frozen=True)
class CompletedCheckpoint:
    """A checkpoint published to storage.

    Attributes:
        metadata: what was published.
        ref: where.
        persist_ms: time to build and publish, ms.
        records: records written in its epoch, if known.
        acknowledgements: acknowledgements it received.
        committables: sink → the committables ``metadata`` holds for it (the coordinator's pending
            transactions', each decoded on first access, once), in the order of its
            ``committables``: handed to the metadata cache so that nothing decodes the published
            payloads again.
        retired: checkpoints retention deleted after this one was published.
    """

    metadata: CheckpointMetadata
    ref: CheckpointRef
    persist_ms: float
    records: int | None
    acknowledgements: int
    committables: Mapping[str, Sequence[Any]] = field(default_factory=dict, repr=False, compare=False)
    retired: tuple[CheckpointRef, ...] = ()


@dataclass(frozen=True)
class NotifyResult:
    """What one ``notify_checkpoint_complete`` did.

    Attributes:
        checkpoint_id: the notified checkpoint.
        committed: transactions committed now (synchronous commit); with asynchronous commit,
            those handed to the committer thread.
        aborted: transactions aborted (pre-committed for later checkpoints by subtasks that closed).
        finished: subtasks that reached FINISHED with this notification.
        commit_ms: time spent, ms (submission time only when asynchronous).
        already_committed: transactions found committed earlier (synchronous commit).
    """

    checkpoint_id: int
    committed: int
    aborted: int
    finished: int
    commit_ms: float
    already_committed: int = 0


def _committable_of(txns: Sequence[PendingTransaction[Any]]) -> Callable[[int], Any]:
    """Index → the committable of ``txns[index]`` (decoded on first read)."""
    return lambda i: txns[i].committable


def _by_partition(blocks: Sequence[LedgerBlock], own: Sequence[PendingTransaction[Any]]) -> TxnRows[Any]:
    """The committables of the rows of ``blocks`` (all of them, as acknowledged) and of ``own``,
    ascending by partition (stable), each decoded on access: a block's row by the block
    (:meth:`LedgerBlock.committable`, no transaction made)."""
    parts: list[pa.Array | pa.ChunkedArray] = []
    source_cols: list[pa.Array] = []
    row_cols: list[pa.Array] = []
    for i, b in enumerate(blocks):
        parts.append(b.partition)
        source_cols.append(pa.repeat(pa.scalar(i, pa.int32()), len(b)))
        row_cols.append(pa.array(range(len(b)), pa.int32()))
    sources: list[Any] = [b.committable for b in blocks]
    if own:
        parts.append(pa.array([t.partition for t in own], pa.int32()))
        sources.append(_committable_of(own))
        source_cols.append(pa.repeat(pa.scalar(len(blocks), pa.int32()), len(own)))
        row_cols.append(pa.array(range(len(own)), pa.int32()))
    chunks = [c for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    partition = pa.chunked_array(chunks, pa.int32())
    source = pa.chunked_array(source_cols, pa.int32())
    row = pa.chunked_array(row_cols, pa.int32())
    if len(parts) > 1:
        order = pc.sort_indices(partition)
        source, row = source.take(order), row.take(order)
    return TxnRows(sources, source, row)


def pending_columns(
    blocks: Sequence[LedgerBlock], own: Sequence[PendingTransaction[Any]]
) -> tuple[CommittableRows, TxnRows[Any]]:
    """The live rows of ``blocks`` and the transactions ``own`` (exceptions, held by their
    lifecycles) as the metadata's committables (a committable file's columns,
    :data:`~twophase.coordinator.state.metadata.COMMITTABLE_COLUMNS`), ascending by (checkpoint id,
    partition), and the same rows' committables in the same order, each decoded on access (a
    block's row by the block: no transaction made): the blocks' rows go through Arrow only
    (concatenated, and sorted only when ``own`` or two blocks of one checkpoint need it, issue
    #42); ``own`` through Python (the exceptions are few). One block all of whose rows are live
    and nothing else (the common path) is handed on as the block holds it
    (:attr:`LedgerBlock.committable_rows`: nothing filtered, built or copied)."""
    tables: list[pa.Table] = []
    sources: list[Any] = []
    source_cols: list[pa.Array] = []
    row_cols: list[pa.Array] = []
    for i, b in enumerate(blocks):
        rows = b.status.live_rows()  # the statuses alone: a block whose rows all live is taken whole
        tables.append(b.committable_rows.table if len(rows) == len(b.status) else b.live_columns())
        sources.append(b.committable)
        source_cols.append(pa.repeat(pa.scalar(i, pa.int32()), len(rows)))
        row_cols.append(pa.array(rows, pa.int32()))
    if own:
        tables.append(
            pa.table(
                [
                    pa.array([t.partition for t in own], pa.int32()),
                    pa.array([t.attempt for t in own], pa.int32()),
                    pa.array([t.checkpoint_id for t in own], pa.int64()),
                    pa.array([t.payload for t in own], pa.binary()),
                ],
                names=COMMITTABLE_COLUMNS.names,
            )
        )
        sources.append(_committable_of(own))
        source_cols.append(pa.repeat(pa.scalar(len(blocks), pa.int32()), len(own)))
        row_cols.append(pa.array(range(len(own)), pa.int32()))
    if not tables:
        empty = pa.array([], pa.int32())
        return CommittableRows(COMMITTABLE_COLUMNS.empty_table()), TxnRows([], empty, empty)
    source = pa.chunked_array(source_cols, pa.int32())
    row = pa.chunked_array(row_cols, pa.int32())
    if len(tables) == 1 and not own and tables[0] is blocks[0].committable_rows.table:
        return blocks[0].committable_rows, TxnRows(sources, source, row)
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    ids = [b.checkpoint_id for b in blocks]
    if own or ids != sorted(set(ids)):  # else ascending already: blocks by id, rows by partition
        order = pc.sort_indices(table, sort_keys=[("checkpoint_id", "ascending"), ("partition", "ascending")])
        table, source, row = table.take(order), source.take(order), row.take(order)
    return CommittableRows(table), TxnRows(sources, source, row)


def metadata_of(
    job_id: str,
    pc: PendingCheckpoint,
    sinks: Mapping[str, TwoPhaseCommitSink[Any, Any]],
    ledgers: Mapping[str, SinkLedger],
    stateful: Mapping[str, Mapping[int, SubtaskLifecycle[Any]]],
    fully_finished: Set[str],
    parallelism: Mapping[str, int],
    now_ms: int,
) -> tuple[CheckpointMetadata, dict[str, Sequence[Any]]]:
    """What checkpoint ``pc`` publishes: per sink not fully finished, every transaction not yet
    confirmed committed with a checkpoint id ≤ ``pc``'s (its own and older pending ones, so the
    latest checkpoint alone is enough to recover), payload bytes as received (nothing decoded or
    encoded), and the in-progress state of live subtasks. A pure function of the coordinator's state
    (``ledgers``: sink → its ledger, whose rows and exceptional lifecycles hold every pending
    transaction; ``stateful``: sink → partition → lifecycle of the subtasks that ever held
    in-progress state, the only ones whose state is read).

    Returns:
        the metadata, and per sink the same transactions' committables (decoded on first access)
        in the order of its ``committables`` (what :attr:`CompletedCheckpoint.committables` hands on).
    """
    c = pc.checkpoint_id
    snaps: dict[str, SinkSnapshot] = {}
    decoded: dict[str, Sequence[Any]] = {}
    for name, sink in sinks.items():
        if name in fully_finished:
            continue
        ledger = ledgers.get(name)
        blocks = [] if ledger is None else [b for b in ledger.blocks if b.checkpoint_id <= c]
        own: list[PendingTransaction[Any]] = []
        if ledger is not None and ledger.exceptional:
            own = [t for lc in ledger.exceptional.values() for t in lc.uncommitted(c)]
        rows, committables = pending_columns(blocks, own)
        if rows.table["payload"].null_count:  # transactions a test made from objects: encode them
            payloads = rows.table["payload"].to_pylist()
            for i, raw in enumerate(payloads):
                if raw is None:
                    payloads[i] = payload_bytes(sink.encode(committables[i]))
            rows = CommittableRows(rows.table.set_column(3, "payload", pa.array(payloads, pa.binary())))
        with_state = stateful.get(name, {})
        in_progress = {
            p: st
            for p in sorted(with_state)
            if (lc := with_state[p]).state.is_live and (st := lc.in_progress_for(c)) is not None
        }
        snaps[name] = SinkSnapshot(
            num_partitions=pc.num_partitions.get(name, parallelism.get(name, 0)),
            committables=rows,
            in_progress=in_progress,
        )
        decoded[name] = committables
    metadata = CheckpointMetadata(
        job_id=job_id,
        checkpoint_id=c,
        kind=pc.kind,
        timestamp_ms=now_ms,
        sinks=snaps,
        source_position=pc.source_position,
        fully_finished=tuple(sorted(fully_finished)),
        end_of_input=pc.end_of_input,
    )
    return metadata, decoded
