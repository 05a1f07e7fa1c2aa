"""The model's watch over the coordinator's ledger of pending transactions (issue #42).

Each sink's :class:`~twophase.coordinator.state.subtask_lifecycle.SinkLedger` holds the transactions of
its RUNNING subtasks as blocks with a status column; a subtask that leaves RUNNING (or is
acknowledged one by one) has its rows moved to its lifecycle for good. :class:`LedgerWatch` checks,
after every step of the model, that the columns and the FLIP-147 per-subtask view agree, and that
no row's status goes back:

- every row is live (not GONE) only in one place: a ledger row is not also a lifecycle's own
  transaction, and the rows of an exceptional subtask (one its lifecycle decides) are gone;
- a subtask whose transactions are ledger rows is RUNNING (only RUNNING subtasks are on the
  common path), and a block's rows are its checkpoint's, ascending by distinct partition;
- a row's status only moves forward: PRE_COMMITTED → PERSISTED → COMMITTING, or
  PRE_COMMITTED → IN_DOUBT (a COMMITTING row never returns to PERSISTED, a durable one never to
  PRE_COMMITTED), watched across steps within one coordinator;
- a block's columns (partition, attempt, payload) and its status bytes agree in length, and a
  transaction made lazily for a row (:meth:`LedgerBlock.txn`) is that row's (its partition,
  attempt, payload and checkpoint; attached to that very row while it is in the ledger), asking
  again gives the same object, a row that left (GONE) left as its made object, and one that left
  into its lifecycle left as that object: the lifecycle does not hold another transaction of the
  same row (which the committer's confirmation, of the made one, would never remove).
"""

from __future__ import annotations

from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.state.subtask_lifecycle import _GONE, LedgerBlock, SubtaskState, TxnStatus

_NEXT: dict[TxnStatus, frozenset[TxnStatus]] = {
    TxnStatus.PRE_COMMITTED: frozenset(TxnStatus),
    TxnStatus.PERSISTED: frozenset({TxnStatus.PERSISTED, TxnStatus.COMMITTING}),
    TxnStatus.COMMITTING: frozenset({TxnStatus.COMMITTING}),
    TxnStatus.IN_DOUBT: frozenset({TxnStatus.IN_DOUBT}),
}
"""A row's status → the statuses it may have at a later step (leaving the ledger aside)."""


class LedgerWatch:
    """Checks a coordinator's ledgers against its lifecycles, step after step (see the module)."""

    def __init__(self) -> None:
        self._coord: CheckpointCoordinator | None = None
        self._last: dict[int, tuple[Any, TxnStatus]] = {}
        """id(transaction) → (the transaction, kept alive so its id is not reused; its status)."""

    def problems(self, coord: CheckpointCoordinator) -> list[str]:
        """What is wrong now with ``coord``'s ledgers (empty when nothing is)."""
        if coord is not self._coord:  # a new run: statuses are watched per coordinator
            self._coord = coord
            self._last = {}
        out: list[str] = []
        seen: dict[int, Any] = {}
        for name, ledger in coord.ledgers.items():
            for block in ledger.blocks:
                out += _block_problems(name, block, coord)
                if block.partitions != sorted(set(block.partitions)):
                    out.append(
                        f"sink {name} checkpoint {block.checkpoint_id}: partitions not distinct ascending"
                    )
                for t in block.live():
                    seen[id(t)] = t
                    where = f"sink {name}[{t.partition}] checkpoint {t.checkpoint_id}"
                    if t.checkpoint_id != block.checkpoint_id or t.sink_name != name or not t.in_ledger:
                        out.append(f"{where}: a row of another block, sink or none")
                    lc = coord.subtasks.get((name, t.partition))
                    if lc is None:  # no lifecycle made (issue #42): a known subtask, RUNNING
                        if t.partition not in coord.known_partitions(name):
                            out.append(f"{where}: a ledger row of a subtask the run does not know")
                    elif lc.ledger is not ledger:
                        out.append(f"{where}: a ledger row of a subtask its lifecycle decides")
                    elif lc.state is not SubtaskState.RUNNING:
                        out.append(f"{where}: a ledger row of a {lc.state.value} subtask")
                    before = self._last.get(id(t))
                    if before is not None and t.status not in _NEXT[before[1]]:
                        out.append(f"{where}: row went back from {before[1].value} to {t.status.value}")
                    self._last[id(t)] = (t, t.status)
            for p, lc in ledger.exceptional.items():
                if lc.ledger is not None:
                    out.append(f"sink {name}[{p}]: exceptional yet on the ledger")
                if ledger.rows_of(p):
                    out.append(f"sink {name}[{p}]: exceptional with rows left in the ledger")
                for t in lc.own_pending:
                    if t.in_ledger or id(t) in seen:
                        out.append(
                            f"sink {name}[{p}] checkpoint {t.checkpoint_id}: both a row and its lifecycle's"
                        )
        for key in [k for k in self._last if k not in seen]:  # rows gone: forget them
            del self._last[key]
        return out


def _block_problems(name: str, block: LedgerBlock, coord: CheckpointCoordinator) -> list[str]:
    """What is wrong with one block's columns and its lazily made transactions."""
    out: list[str] = []
    where = f"sink {name} checkpoint {block.checkpoint_id}"
    lengths = {len(block.status), len(block.partition), len(block.attempt), len(block.payload)}
    if len(lengths) != 1:
        return [f"{where}: status and columns differ in length {sorted(lengths)}"]
    made = block.made
    lost = [row for row, code in enumerate(block.status) if code == _GONE and row not in made]
    if lost:  # every way out as GONE (evict, abort, release) goes through the row's object
        out.append(f"{where} rows {lost[:5]}: left the ledger as no transaction the block knows")
    partitions, attempts, payloads = (
        block.partition.to_pylist(),
        block.attempt.to_pylist(),
        block.payload.to_pylist(),
    )
    for row, t in list(block.made.items()):
        if (t.partition, t.attempt, t.checkpoint_id, t.sink_name) != (
            partitions[row],
            attempts[row],
            block.checkpoint_id,
            name,
        ) or (payloads[row] is not None and t.payload != payloads[row]):
            out.append(f"{where} row {row}: its transaction is another row's ({t!r})")
        if block.txn(row) is not t:
            out.append(f"{where} row {row}: asked again, another transaction")
        code = block.status[row]
        if code == _GONE:
            lc = coord.subtasks.get((name, partitions[row]))
            if lc is not None:
                same = (t.checkpoint_id, t.attempt, t.payload)
                twins = [
                    x
                    for x in lc.own_pending
                    if x is not t and (x.checkpoint_id, x.attempt, x.payload) == same
                ]
                if twins:
                    out.append(f"{where} row {row}: its lifecycle holds another transaction of the row")
        elif t.in_ledger and (t._row != row or t._block is not block):
            out.append(f"{where} row {row}: its transaction is attached elsewhere")
    return out
