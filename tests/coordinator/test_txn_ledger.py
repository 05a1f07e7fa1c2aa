"""The sink's ledger of pending transactions as columns (issue #42): the common path's
transitions per block, and a subtask leaving it for its FLIP-147 lifecycle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from twophase.coordinator.checkpoint.checkpoint_state import pending_columns
from twophase.coordinator.state.subtask_lifecycle import (
    _COMMIT,
    _COMMITTING,
    _GONE,
    _PERSIST,
    _PERSISTED,
    _PRE,
    BlockRows,
    LedgerBlock,
    PendingTransaction,
    RowStatus,
    SinkLedger,
    SubtaskLifecycle,
    SubtaskState,
    TxnStatus,
    confirm_calls,
    confirm_rows,
)
from twophase.sinks.errors import IllegalTransitionError


def block(ledger: SinkLedger, checkpoint_id: int, partitions: list[int]) -> list[PendingTransaction[str]]:
    txns = [
        PendingTransaction(ledger.sink_name, p, 0, checkpoint_id, f"t{checkpoint_id}p{p}") for p in partitions
    ]
    ledger.append(LedgerBlock.of_transactions(checkpoint_id, txns, list(partitions)))
    return txns


def rows(ledger: SinkLedger) -> list[PendingTransaction[Any]]:
    """The transactions still rows of ``ledger``, ascending by (checkpoint id, partition)."""
    return sorted((t for b in ledger.blocks for t in b.live()), key=lambda t: (t.checkpoint_id, t.partition))


def names(txns: Sequence[PendingTransaction[str]]) -> list[str]:
    return [t.committable for t in txns]


def test_a_checkpoint_is_persisted_notified_and_confirmed_per_block() -> None:
    ledger = SinkLedger("s")
    one = block(ledger, 1, [0, 1, 2])
    block(ledger, 2, [0, 1, 2])
    with pytest.raises(IllegalTransitionError, match="not durable"):
        ledger.notify_checkpoint_complete(1)
    ledger.checkpoint_persisted(1)
    assert [t.status for t in one] == [TxnStatus.PERSISTED] * 3
    assert not ledger.all_committing(1)
    due = ledger.notify_checkpoint_complete(1)
    assert [(c, names(txns)) for c, txns in due] == [(1, ["t1p0", "t1p1", "t1p2"])]
    assert ledger.all_committing(1) and not ledger.all_committing(2)
    assert ledger.notify_checkpoint_complete(1) == []  # a late notification finds nothing left
    assert confirm_rows(one) == []
    assert [t.status for t in one] == [TxnStatus.COMMITTING] * 3 and not any(t.in_ledger for t in one)
    ledger.compact()
    assert names(rows(ledger)) == ["t2p0", "t2p1", "t2p2"] and len(ledger.blocks) == 1


def test_an_aborted_checkpoint_leaves_and_a_durable_one_is_never_aborted() -> None:
    ledger = SinkLedger("s")
    block(ledger, 1, [0, 1])
    two = block(ledger, 2, [0, 1])
    ledger.checkpoint_persisted(1)
    with pytest.raises(IllegalTransitionError, match="already durable"):
        ledger.notify_checkpoint_aborted(1)
    assert names(ledger.notify_checkpoint_aborted(2)) == ["t2p0", "t2p1"]
    assert not any(t.in_ledger for t in two) and names(rows(ledger)) == ["t1p0", "t1p1"]


def test_in_doubt_rows_are_released_only_if_their_checkpoint_did_not_land() -> None:
    ledger = SinkLedger("s")
    block(ledger, 1, [0])
    block(ledger, 2, [0])
    ledger.checkpoint_in_doubt(2)  # both rows ≤ 2 pre-committed: both in doubt
    assert names(ledger.release_in_doubt({1, 2})) == []  # both checkpoints landed: kept
    assert names(ledger.release_in_doubt({1})) == ["t2p0"]
    assert names(rows(ledger)) == ["t1p0"] and rows(ledger)[0].status is TxnStatus.IN_DOUBT


def test_a_subtask_leaving_running_takes_its_rows_into_its_lifecycle() -> None:
    ledger = SinkLedger("s")
    lcs = {p: SubtaskLifecycle[str]("s", p, ledger=ledger) for p in (0, 1)}
    block(ledger, 1, [0, 1])
    ledger.checkpoint_persisted(1)
    block(ledger, 2, [0, 1])
    assert names(list(lcs[0].pending)) == ["t1p0", "t2p0"]  # a view of its rows
    lcs[0].finish(2)
    assert lcs[0].ledger is None and ledger.exceptional == {0: lcs[0]}
    assert names(rows(ledger)) == ["t1p1", "t2p1"]
    assert names(list(lcs[0].own_pending)) == ["t1p0", "t2p0"]
    assert [t.status for t in lcs[0].own_pending] == [TxnStatus.PERSISTED, TxnStatus.PRE_COMMITTED]
    actions = lcs[1].close()  # close: the pre-committed row is aborted, the durable one kept
    assert lcs[1].state is SubtaskState.CLOSED
    assert names(list(actions.abort)) == ["t2p1"] and names(list(lcs[1].pending)) == ["t1p1"]
    assert rows(ledger) == []


def column_block(ledger: SinkLedger, checkpoint_id: int, partitions: list[int]) -> LedgerBlock:
    """A block as an intake makes it: columns only, no transaction made."""
    decoded: list[bytes] = []

    def decode(raw: bytes) -> Any:
        decoded.append(raw)
        return raw.decode()

    b = LedgerBlock(
        ledger.sink_name,
        checkpoint_id,
        pa.array(partitions, pa.int32()),
        pa.array([0] * len(partitions), pa.int32()),
        pa.array([f"t{checkpoint_id}p{p}".encode() for p in partitions], pa.binary()),
        7,
        decode,
    )
    ledger.append(b)
    return b


def test_the_transitions_of_every_row_are_the_status_columns_own_and_keep_their_checks() -> None:
    """#42: a block's status column (:class:`RowStatus`) makes the transitions of all its rows
    (the ledger hands it no payload), in place: the block keeps one status object, which the
    committer thread reads; the ledger's transitions keep their names and checks."""
    ledger = SinkLedger("s")
    b = column_block(ledger, 1, [0, 3, 5])
    status = b.status
    assert isinstance(status, RowStatus) and list(status) == [_PRE] * 3
    with pytest.raises(IllegalTransitionError, match="not durable"):
        ledger.notify_checkpoint_complete(1)
    ledger.checkpoint_persisted(1)
    assert b.status is status and list(status) == [_PERSISTED] * 3
    ((checkpoint, call),) = ledger.notify_checkpoint_complete(1)
    assert (checkpoint, call.rows, call.block) == (1, range(3), b)
    assert b.status is status and list(status) == [_COMMITTING] * 3 and len(b.made) == 0
    column = RowStatus(bytes((_PERSISTED, _GONE, _PRE, _PERSISTED)))
    assert column.commit_persisted() == [0, 3] and list(column) == [_COMMITTING, _GONE, _PRE, _COMMITTING]
    assert column.commit_persisted() == range(0)
    column.recode(_PERSIST)
    assert list(column) == [_COMMITTING, _GONE, _PERSISTED, _COMMITTING]
    column.recode(_COMMIT)
    assert column.commit_persisted() == range(0) and list(column) == [
        _COMMITTING,
        _GONE,
        _COMMITTING,
        _COMMITTING,
    ]


def test_a_column_block_makes_a_rows_transaction_once_and_only_when_asked() -> None:
    ledger = SinkLedger("s")
    b = column_block(ledger, 1, [0, 3, 5])
    assert len(b.made) == 0 and b.partitions == [0, 3, 5]
    t = b.txn(1)
    assert b.txn(1) is t and dict(b.made) == {1: t}
    assert (t.sink_name, t.partition, t.attempt, t.checkpoint_id, t.payload) == ("s", 3, 0, 1, b"t1p3")
    assert t.pre_committed_ms == 7 and t.in_ledger and t.status is TxnStatus.PRE_COMMITTED
    assert not t.decoded and t.committable == "t1p3"
    table = b.committable_rows.table
    assert b.live_rows() == range(3) and table["payload"].to_pylist() == [b"t1p0", b"t1p3", b"t1p5"]
    assert table["checkpoint_id"].to_pylist() == [1, 1, 1] and len(b.made) == 1  # read in Arrow


def test_mismatched_columns_are_refused() -> None:
    with pytest.raises(ValueError, match="columns of 2, 1 and 2 rows"):
        LedgerBlock(
            "s", 1, pa.array([0, 1], pa.int32()), pa.array([0], pa.int32()),
            pa.array([b"a", b"b"]), 0, bytes.decode,
        )  # fmt: skip
    with pytest.raises(ValueError, match="without a payload"):
        LedgerBlock(
            "s", 1, pa.array([0], pa.int32()), pa.array([0], pa.int32()), pa.array([None], pa.binary()),
            0, bytes.decode,
        )  # fmt: skip


def test_a_commit_call_of_a_blocks_rows_is_confirmed_by_one_recode() -> None:
    ledger = SinkLedger("s")
    lcs = {p: SubtaskLifecycle[str]("s", p, ledger=ledger) for p in (0, 1, 2)}
    b = column_block(ledger, 1, [0, 1, 2])
    ledger.checkpoint_persisted(1)
    ((cid, call),) = ledger.notify_checkpoint_complete(1)
    assert cid == 1 and isinstance(call, BlockRows) and len(call) == 3 and len(b.made) == 0
    assert ledger.all_committing(1)
    committed = list(call)  # the committer makes them (its own thread when asynchronous)
    assert [b.txn(i) for i in range(3)] == committed and all(
        x is y for x, y in zip(call, committed, strict=True)
    )
    for p in (0, 1):  # they leave RUNNING meanwhile: each row's very object goes with it
        lcs[p].finish(1)
        assert lcs[p].own_pending == (committed[p],) and not committed[p].in_ledger
    assert confirm_calls([call]) == committed[:2]  # their lifecycles forget them; the rest by range
    assert [t.status for t in committed] == [TxnStatus.COMMITTING] * 3
    assert not any(t.in_ledger for t in committed)
    assert rows(ledger) == [] and ledger.all_committing(1)
    ledger.compact()
    assert ledger.blocks == ()


def test_the_metadata_columns_leave_out_rows_that_left() -> None:
    ledger = SinkLedger("s")
    lc = SubtaskLifecycle[str]("s", 1, ledger=ledger)
    b = column_block(ledger, 4, [0, 1, 2])
    lc.finish(3)  # its row leaves the block
    table = b.live_columns()
    assert b.live_rows() == [0, 2] and table["partition"].to_pylist() == [0, 2]
    assert table["payload"].to_pylist() == [b"t4p0", b"t4p2"]


def test_a_block_all_of_whose_rows_are_live_is_published_as_it_holds_its_committables() -> None:
    """#42: a block keeps its committable file's table, built once with it as the metadata's
    ``CommittableRows`` whose columns are the block's own (the payloads held once); the publish
    hands one block all of whose rows are live on as it is, and filters one whose rows left."""
    ledger = SinkLedger("s")
    lc = SubtaskLifecycle[str]("s", 1, ledger=ledger)
    b = column_block(ledger, 4, [0, 1, 2])
    held = b.committable_rows
    for name in ("partition", "attempt", "payload"):  # the block's columns are the table's: one copy
        assert buffers(held.table[name]) == buffers(getattr(b, name)), name
    assert [(r.partition, r.checkpoint_id, r.payload) for r in held] == [
        (p, 4, f"t4p{p}".encode()) for p in range(3)
    ]
    rows, committables = pending_columns([b], [])
    assert rows is held and list(committables) == ["t4p0", "t4p1", "t4p2"]
    lc.finish(3)  # its row leaves the block
    rows, committables = pending_columns([b], [])
    assert rows is not held and [r.partition for r in rows] == [0, 2]
    assert list(committables) == ["t4p0", "t4p2"]
    assert b.committable_rows is held and len(held) == 3


def buffers(column: pa.ChunkedArray) -> list[int]:
    """The addresses of ``column``'s buffers (where its values are held)."""
    return [b.address for c in column.chunks for b in c.buffers() if b is not None]
