"""The sink's ledger of pending transactions as columns (issue #42): the common path's
transitions per block, and a subtask leaving it for its FLIP-147 lifecycle."""

from __future__ import annotations

import pytest

from twophase.coordinator.subtask_lifecycle import (
    LedgerBlock,
    PendingTransaction,
    SinkLedger,
    SubtaskLifecycle,
    SubtaskState,
    TxnStatus,
    confirm_rows,
)
from twophase.sinks.errors import IllegalTransitionError


def block(ledger: SinkLedger, checkpoint_id: int, partitions: list[int]) -> list[PendingTransaction[str]]:
    txns = [
        PendingTransaction(ledger.sink_name, p, 0, checkpoint_id, f"t{checkpoint_id}p{p}") for p in partitions
    ]
    ledger.append(LedgerBlock(checkpoint_id, txns, list(partitions)))
    return txns


def names(txns: list[PendingTransaction[str]]) -> list[str]:
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
    assert names(ledger.rows()) == ["t2p0", "t2p1", "t2p2"] and len(ledger.blocks) == 1


def test_an_aborted_checkpoint_leaves_and_a_durable_one_is_never_aborted() -> None:
    ledger = SinkLedger("s")
    block(ledger, 1, [0, 1])
    two = block(ledger, 2, [0, 1])
    ledger.checkpoint_persisted(1)
    with pytest.raises(IllegalTransitionError, match="already durable"):
        ledger.notify_checkpoint_aborted(1)
    assert names(ledger.notify_checkpoint_aborted(2)) == ["t2p0", "t2p1"]
    assert not any(t.in_ledger for t in two) and names(ledger.rows()) == ["t1p0", "t1p1"]


def test_in_doubt_rows_are_released_only_if_their_checkpoint_did_not_land() -> None:
    ledger = SinkLedger("s")
    block(ledger, 1, [0])
    block(ledger, 2, [0])
    ledger.checkpoint_in_doubt(2)  # both rows ≤ 2 pre-committed: both in doubt
    assert names(ledger.release_in_doubt({1, 2})) == []  # both checkpoints landed: kept
    assert names(ledger.release_in_doubt({1})) == ["t2p0"]
    assert names(ledger.rows()) == ["t1p0"] and ledger.rows()[0].status is TxnStatus.IN_DOUBT


def test_a_subtask_leaving_running_takes_its_rows_into_its_lifecycle() -> None:
    ledger = SinkLedger("s")
    lcs = {p: SubtaskLifecycle[str]("s", p, ledger=ledger) for p in (0, 1)}
    block(ledger, 1, [0, 1])
    ledger.checkpoint_persisted(1)
    block(ledger, 2, [0, 1])
    assert names(list(lcs[0].pending)) == ["t1p0", "t2p0"]  # a view of its rows
    lcs[0].finish(2)
    assert lcs[0].ledger is None and ledger.exceptional == {0: lcs[0]}
    assert names(ledger.rows()) == ["t1p1", "t2p1"]
    assert names(list(lcs[0].own_pending)) == ["t1p0", "t2p0"]
    assert [t.status for t in lcs[0].own_pending] == [TxnStatus.PERSISTED, TxnStatus.PRE_COMMITTED]
    actions = lcs[1].close()  # close: the pre-committed row is aborted, the durable one kept
    assert lcs[1].state is SubtaskState.CLOSED
    assert names(list(actions.abort)) == ["t2p1"] and names(list(lcs[1].pending)) == ["t1p1"]
    assert ledger.rows() == []
