"""The driver-side lifecycle of one subtask: one sink writing one partition, across epochs.

It follows the FLIP-147 operator lifecycle ("Final Checkpoint and Stopping Job With Savepoint")::

    RUNNING ──finish──► WAITING_FOR_FINAL_CHECKPOINT
            (end_input(); finish(): flush into the current transaction, open no new one)
    WAITING_FOR_FINAL_CHECKPOINT ──final_checkpoint_complete──► FINISHED
            (the FIRST notify_checkpoint_complete(c) with c triggered AFTER finish: commit every
             pending transaction ≤ c, then close(): abort whatever was pre-committed for later,
             not yet durable checkpoints — checkpoint 44 in FLIP-147's 42/43/44 example)
    RUNNING | WAITING_FOR_FINAL_CHECKPOINT ──close──► CLOSED
            (failure, cancel or suspend: abort what no durable checkpoint holds; nothing is
             committed; a restore takes over from checkpoint storage)

``snapshot`` (a checkpoint acknowledgement), ``notify_checkpoint_complete`` and
``notify_checkpoint_aborted`` are self-loops of RUNNING and WAITING_FOR_FINAL_CHECKPOINT. Every
other call raises :class:`~twophase.sinks.errors.IllegalTransitionError`.

The lifecycle does no I/O. It keeps the subtask's pending transactions (committables pre-committed
for a checkpoint and not yet committed) and returns :class:`LifecycleActions` saying what to
commit and what to abort; the checkpoint coordinator hands them to the committer and reports back
with :meth:`SubtaskLifecycle.commit_confirmed`. Like Flink's ``TwoPhaseCommitSinkFunction``, a
pending transaction stays in every later checkpoint until its commit is confirmed, so the latest
checkpoint alone is enough to recover (whatever retention deleted).

Pending transaction states::

    PRE_COMMITTED ──checkpoint persisted──► PERSISTED ──notify──► COMMITTING ──confirmed──► (gone)
    PRE_COMMITTED ──checkpoint aborted / close──► (aborted, gone)
    PRE_COMMITTED ──publish outcome unknown──► IN_DOUBT   (kept; the restore decides)

A PERSISTED transaction is never aborted: once its checkpoint is durable it must eventually be
committed (re-committed on recovery). An IN_DOUBT one is never aborted or committed by this run
either: its checkpoint may be durable; the job fails and the restore reads storage to know.
"""

from __future__ import annotations

import bisect
import enum
import logging
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

import pyarrow as pa
import pyarrow.compute as pc

from twophase.coordinator.state.metadata import COMMITTABLE_COLUMNS, CommittableRows
from twophase.coordinator.state.payload import decode_payloads
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import IllegalTransitionError

log = logging.getLogger(__name__)

COMM = TypeVar("COMM")
_T = TypeVar("_T")


class SubtaskState(enum.Enum):
    """Where one subtask is in the FLIP-147 lifecycle."""

    # members are singletons compared by identity: hash them so too (Enum's hash is a Python call,
    # made per subtask at every step of an epoch; issue #42)
    __hash__ = object.__hash__

    RUNNING = "RUNNING"
    WAITING_FOR_FINAL_CHECKPOINT = "WAITING_FOR_FINAL_CHECKPOINT"
    FINISHED = "FINISHED"
    CLOSED = "CLOSED"

    @property
    def is_live(self) -> bool:
        """True while the subtask takes part in checkpoints (RUNNING or WAITING_FOR_FINAL_CHECKPOINT)."""
        return self is SubtaskState.RUNNING or self is SubtaskState.WAITING_FOR_FINAL_CHECKPOINT


class SubtaskTransition(enum.Enum):
    """The named transitions of :class:`SubtaskState`."""

    # members are singletons compared by identity: hash them so too (Enum's hash is a Python call,
    # made per subtask at every step of an epoch; issue #42)
    __hash__ = object.__hash__

    SNAPSHOT = "snapshot"
    FINISH = "finish"
    NOTIFY_CHECKPOINT_COMPLETE = "notify_checkpoint_complete"
    NOTIFY_CHECKPOINT_ABORTED = "notify_checkpoint_aborted"
    FINAL_CHECKPOINT_COMPLETE = "final_checkpoint_complete"
    CLOSE = "close"


_R, _W = SubtaskState.RUNNING, SubtaskState.WAITING_FOR_FINAL_CHECKPOINT
T = SubtaskTransition

TRANSITIONS: dict[tuple[SubtaskState, SubtaskTransition], SubtaskState] = {
    (_R, T.SNAPSHOT): _R,
    (_W, T.SNAPSHOT): _W,  # FLIP-147: a sink may still pre-commit (empty) transactions after finish()
    (_R, T.NOTIFY_CHECKPOINT_COMPLETE): _R,
    (_W, T.NOTIFY_CHECKPOINT_COMPLETE): _W,
    (_R, T.NOTIFY_CHECKPOINT_ABORTED): _R,
    (_W, T.NOTIFY_CHECKPOINT_ABORTED): _W,
    (_R, T.FINISH): _W,
    (_W, T.FINAL_CHECKPOINT_COMPLETE): SubtaskState.FINISHED,
    (_R, T.CLOSE): SubtaskState.CLOSED,
    (_W, T.CLOSE): SubtaskState.CLOSED,
}
"""The complete transition table; anything absent is illegal."""


class TxnStatus(enum.Enum):
    """Where one pending transaction is (see the module docstring)."""

    # members are singletons compared by identity: hash them so too (Enum's hash is a Python call,
    # made per subtask at every step of an epoch; issue #42)
    __hash__ = object.__hash__

    PRE_COMMITTED = "pre_committed"
    PERSISTED = "persisted"
    COMMITTING = "committing"
    IN_DOUBT = "in_doubt"

    @property
    def is_durable(self) -> bool:
        """True once the transaction's checkpoint is known to be published (it must be committed)."""
        return self in (TxnStatus.PERSISTED, TxnStatus.COMMITTING)


_GONE, _PRE, _PERSISTED, _COMMITTING, _IN_DOUBT, _CONFIRMED = range(6)
"""A ledger row's status byte (:class:`LedgerBlock`): GONE is a row whose transaction left the
ledger (aborted, or moved to its lifecycle); CONFIRMED one whose commit the committer confirmed
(it left the ledger COMMITTING, by a range of rows at once: issue #42)."""
_STATUS_OF: list[Any] = [
    None, TxnStatus.PRE_COMMITTED, TxnStatus.PERSISTED, TxnStatus.COMMITTING, TxnStatus.IN_DOUBT,
    TxnStatus.COMMITTING,
]  # fmt: skip
_CODE_OF: dict[TxnStatus, int] = {st: code for code, st in enumerate(_STATUS_OF[:5]) if st is not None}


def _recode(frm: int, to: int) -> bytes:
    """A ``bytes.translate`` table turning status ``frm`` into ``to`` and keeping every other."""
    table = bytearray(range(256))
    table[frm] = to
    return bytes(table)


_PERSIST = _recode(_PRE, _PERSISTED)
_DOUBT = _recode(_PRE, _IN_DOUBT)
_COMMIT = _recode(_PERSISTED, _COMMITTING)
_CONFIRM = _recode(_COMMITTING, _CONFIRMED)
_LEFT = bytes((_GONE, _CONFIRMED))
"""The codes of rows no longer in the ledger."""
_COMMITTING_OR_GONE = bytes((_GONE, _COMMITTING, _CONFIRMED))

_UNDECODED: Any = object()
"""A pending transaction whose committable is not decoded yet."""


class RowStatus(bytearray):
    """A :class:`LedgerBlock`'s status column: one status byte per row (``_PRE`` … ``_IN_DOUBT``;
    ``_GONE`` or ``_CONFIRMED`` once the row left), owned by its block and read as the bytes it
    is. The transitions of every row at once are its own operations (issue #42): the ledger
    hands them the statuses, not the block with its payloads, and each is one C-level
    ``bytes.translate`` in place (the committer thread reading a row's status sees it before or
    after, never half written: one call under the GIL)."""

    __slots__ = ()

    def recode(self, table: bytes) -> None:
        """Every row's status through ``table`` (a ``bytes.translate`` table): one C-level pass."""
        self[:] = self.translate(table)

    def commit_persisted(self) -> range | list[int]:
        """Every PERSISTED row becomes COMMITTING; returns those rows, ascending (one count and
        one translate: the notification's step of a block)."""
        n = self.count(_PERSISTED)
        if not n:
            return range(0)
        rows = range(n) if n == len(self) else [i for i, c in enumerate(self) if c == _PERSISTED]
        self[:] = self.translate(_COMMIT)
        return rows

    def live_rows(self) -> range | list[int]:
        """The rows still in the ledger, ascending (``range`` of every row when none left)."""
        if not any(code in self for code in _LEFT):
            return range(len(self))
        return [i for i, code in enumerate(self) if code not in _LEFT]


class PendingTransaction(Generic[COMM]):
    """One pre-committed transaction of one subtask, until its commit is confirmed or it is aborted.

    Its committable travels as the executor's payload bytes (issue #42): the sink's object is made
    from them on first use of :attr:`committable` — by the committer (on its own thread when
    commit is asynchronous), an abort, verification or lingering cleanup — and kept; intake and
    the checkpoint's committable file use :attr:`payload` only.

    Attributes:
        sink_name: the sink.
        partition: the subtask index.
        attempt: the task attempt that pre-committed it.
        checkpoint_id: the checkpoint it was pre-committed for.
        pre_committed_ms: when the coordinator received it (ms since the epoch), for age warnings.
        status: see :class:`TxnStatus`.
        payload: the committable as the executor encoded it (canonical JSON bytes,
            :mod:`~twophase.coordinator.state.payload`), written to checkpoints as it is; ``None`` only
            where a test builds a transaction from its object (the metadata then encodes it).

    Args:
        committable: the sink's committable, if already made; else ``decode`` makes it from
            ``payload`` on first use.
        decode: payload bytes → the sink's committable (raises ``CommittableDecodeError``).
        block, row: the ledger block and row it is made for (:meth:`LedgerBlock.txn`), if any.

    Identity is the object (two transactions are never equal): the lifecycle forgets the very one
    the committer confirmed. Decoding is not locked: two threads decoding at once make equal
    objects and one is kept.
    """

    __slots__ = (
        "__weakref__",  # the transaction age monitor keeps weak references
        "_block",
        "_committable",
        "_decode",
        "_row",
        "_status",
        "attempt",
        "checkpoint_id",
        "partition",
        "payload",
        "pre_committed_ms",
        "sink_name",
    )

    def __init__(
        self,
        sink_name: str,
        partition: int,
        attempt: int,
        checkpoint_id: int,
        committable: COMM = _UNDECODED,
        pre_committed_ms: int = 0,
        status: TxnStatus = TxnStatus.PRE_COMMITTED,
        payload: bytes | None = None,
        *,
        decode: Callable[[bytes], COMM] | None = None,
        block: LedgerBlock | None = None,
        row: int = 0,
    ) -> None:
        if committable is _UNDECODED and (payload is None or decode is None):
            raise ValueError("a pending transaction needs its committable, or its payload and a decoder")
        self.sink_name = sink_name
        self.partition = partition
        self.attempt = attempt
        self.checkpoint_id = checkpoint_id
        self.pre_committed_ms = pre_committed_ms
        self._status = status
        self._block = block  # a row of ``block`` (its status is the row's) if given
        self._row = row
        self.payload = payload
        self._committable = committable
        self._decode = decode

    @property
    def status(self) -> TxnStatus:
        """Where the transaction is: its row's status in its sink's ledger while it is a row
        there (:class:`LedgerBlock`), else its own."""
        block = self._block
        return self._status if block is None else _STATUS_OF[block.status[self._row]]

    @status.setter
    def status(self, status: TxnStatus) -> None:
        block = self._block
        if block is None:
            self._status = status
        else:
            block.recode_row(self._row, _CODE_OF[status])

    def attach(self, block: LedgerBlock, row: int) -> None:
        """Become row ``row`` of ``block`` (its status is the row's from now on)."""
        self._block = block
        self._row = row

    def detach(self) -> None:
        """Leave the ledger (its row is GONE): the status becomes the transaction's own."""
        block = self._block
        if block is not None:
            code = block.leave(self._row)
            if code != _GONE:
                self._status = _STATUS_OF[code]
            self._block = None

    @property
    def committable(self) -> COMM:
        """The sink's committable, decoded from :attr:`payload` on first use.

        Raises:
            CommittableDecodeError: the payload does not decode (every use raises it again).
        """
        c = self._committable
        if c is _UNDECODED:
            assert self._decode is not None and self.payload is not None
            c = self._committable = self._decode(self.payload)
        return c

    @property
    def in_ledger(self) -> bool:
        """Whether it is a row of its sink's ledger (:class:`LedgerBlock`): attached to a block
        whose row for it has not left (a row confirmed by range keeps its transaction attached,
        COMMITTING, until it is forgotten with its block)."""
        block = self._block
        return block is not None and block.status[self._row] not in _LEFT

    @property
    def decoded(self) -> bool:
        """Whether :attr:`committable` was made already."""
        return self._committable is not _UNDECODED

    def __repr__(self) -> str:
        what = repr(self._committable) if self.decoded else f"payload={self.payload!r:.80}"
        return (
            f"PendingTransaction({self.sink_name}[{self.partition}] attempt {self.attempt} "
            f"checkpoint {self.checkpoint_id} {self.status.value} {what})"
        )


class LedgerBlock:
    """The transactions one table intake recorded for one sink and one checkpoint (issue #42), as
    columns: its committable file's table (``partition``, ``attempt``, ``checkpoint_id``,
    ``payload``: :data:`~twophase.coordinator.state.metadata.COMMITTABLE_COLUMNS`, rows ascending
    by distinct partition), made once with the block as the metadata's
    :class:`~twophase.coordinator.state.metadata.CommittableRows`, which a publish of a block whose
    rows are all live hands on as it is; the sink and the intake's time are the block's; and the
    rows' statuses as a column of one byte per row, so that a transition of every row (persisted,
    committing, in doubt, confirmed) is one C-level ``bytes.translate`` of the column, not a
    Python call per transaction.

    A row's :class:`PendingTransaction` is made only when something asks for it (:meth:`txn`:
    an exception such as an eviction into a lifecycle or an abort, a one-by-one path, or the
    committer, on its own thread when commit is asynchronous), once: every later ask gets the
    same object (made under the GIL with ``dict.setdefault``, so two threads asking at once get
    one object).

    Attributes:
        checkpoint_id: the checkpoint every row was pre-committed for.
        sink_name: the sink.
        committable_rows: every row, as the metadata's committables (its ``table``'s columns
            are the arrays below: the payloads are held once).
        partition: int32, ascending, distinct.
        attempt: int32, the task attempt of each row.
        payload: binary, each row's committable as the executor encoded it (null only in a block
            made from transactions that have no payload: tests).
        pre_committed_ms: when the intake received them (ms since the epoch).
        status: one status byte per row (``_PRE`` … ``_IN_DOUBT``; ``_GONE`` or ``_CONFIRMED``
            once it left), a :class:`RowStatus`, whose own operations are the transitions of
            every row at once (the ledger hands them the statuses only).
        made: row → its transaction, for the rows whose transaction was made (:meth:`txn`):
            the committer commits a call none of whose rows is made as columns (issue #42).
        decoded: row → its committable, for the rows the committer decoded in bulk
            (:meth:`committables`): a transaction made of such a row later takes it (each
            committable decoded once).
    """

    __slots__ = (
        "_decode",
        "_partitions",
        "attempt",
        "checkpoint_id",
        "committable_rows",
        "decoded",
        "made",
        "partition",
        "payload",
        "pre_committed_ms",
        "sink_name",
        "status",
    )
    _partitions: list[int] | None

    def __init__(
        self,
        sink_name: str,
        checkpoint_id: int,
        partition: pa.Array | pa.ChunkedArray,
        attempt: pa.Array | pa.ChunkedArray,
        payload: pa.Array | pa.ChunkedArray,
        pre_committed_ms: int,
        decode: Callable[[bytes], Any] | None,
    ) -> None:
        """A block of an intake's rows, kept as the columns they came in (no object per row,
        nothing copied): ``partition`` int32 ascending distinct, ``attempt`` int32, ``payload``
        binary without nulls, with the checkpoint id as the committable file's table;
        ``decode``: payload bytes → the sink's committable, for the transactions made later
        (``None`` only for :meth:`of_transactions`, whose rows are all made).

        Raises:
            ValueError: the columns differ in length or type, or a payload is null.
        """
        n = len(partition)
        if len(attempt) != n or len(payload) != n:
            raise ValueError(f"ledger block columns of {n}, {len(attempt)} and {len(payload)} rows")
        if decode is not None and payload.null_count:
            raise ValueError("a ledger block row without a payload")
        ids = pa.repeat(pa.scalar(checkpoint_id, pa.int64()), n)
        # the committable file's table, built once; the block's columns are its columns (views)
        table = pa.table([partition, attempt, ids, payload], names=COMMITTABLE_COLUMNS.names)
        self.committable_rows = CommittableRows(table)
        self.checkpoint_id = checkpoint_id
        self.sink_name = sink_name
        self.partition = table["partition"]
        self.attempt = table["attempt"]
        self.payload = table["payload"]
        self.pre_committed_ms = pre_committed_ms
        self._decode = decode
        self._partitions = None
        self.status = RowStatus(bytes((_PRE,)) * n)
        self.made: dict[int, PendingTransaction[Any]] = {}
        self.decoded: dict[int, Any] = {}

    @classmethod
    def of_transactions(
        cls, checkpoint_id: int, txns: Sequence[PendingTransaction[Any]], partitions: list[int]
    ) -> LedgerBlock:
        """A block of transactions already made (tests of the ledger): their columns are read
        from them, and each is its row's transaction.

        Raises:
            ValueError: ``txns`` and ``partitions`` differ in length.
        """
        txns = tuple(txns)
        if len(txns) != len(partitions):
            raise ValueError(f"{len(txns)} transactions but {len(partitions)} partitions")
        block = cls(
            txns[0].sink_name if txns else "",
            checkpoint_id,
            pa.array(partitions, pa.int32()),
            pa.array([t.attempt for t in txns], pa.int32()),
            pa.array([t.payload for t in txns], pa.binary()),
            txns[0].pre_committed_ms if txns else 0,
            None,
        )
        block._adopt(txns, partitions)
        return block

    def _adopt(self, txns: Sequence[PendingTransaction[Any]], partitions: list[int]) -> None:
        """Make each of ``txns`` its row's transaction (:meth:`of_transactions`)."""
        self._partitions = list(partitions)
        for i, t in enumerate(txns):
            t.attach(self, i)
            self.made[i] = t

    def __len__(self) -> int:
        return len(self.status)

    def __repr__(self) -> str:
        return f"LedgerBlock({self.sink_name!r} checkpoint {self.checkpoint_id}, {len(self)} rows)"

    def txn(self, row: int) -> PendingTransaction[Any]:
        """Row ``row``'s transaction, made on first ask (any thread) and the same object after."""
        t = self.made.get(row)
        if t is None:
            assert self._decode is not None  # a block made from transactions holds every one
            t = PendingTransaction(
                self.sink_name,
                self.partition[row].as_py(),
                self.attempt[row].as_py(),
                self.checkpoint_id,
                self.decoded.get(row, _UNDECODED),
                pre_committed_ms=self.pre_committed_ms,
                payload=self.payload[row].as_py(),
                decode=self._decode,
                block=self,
                row=row,
            )
            t = self.made.setdefault(row, t)  # atomic: a racing thread's object is dropped
        return t

    def transactions(
        self, rows: range | Sequence[int], committables: Sequence[Any] | None = None
    ) -> tuple[PendingTransaction[Any], ...]:
        """The transactions of ``rows`` (ascending), as :meth:`txn` makes them one by one but the
        columns read once for all of them (one ``to_pylist`` each, not a scalar per row and
        column): what the committer makes of a commit call of this block's rows when some row
        is an exception (a retry, a loss, a failure: issue #42). ``committables``: the rows'
        committables, in their order, if the committer decoded them already (each is decoded
        once), else those kept in :attr:`decoded` or decoded on first use.

        Raises:
            ValueError: ``committables`` and ``rows`` differ in length.
        """
        if committables is not None and len(committables) != len(rows):
            raise ValueError(f"{len(committables)} committables for {len(rows)} rows")
        made = self.made
        todo = [r for r in rows if r not in made] if made else rows
        if todo:
            assert self._decode is not None  # a block made from transactions holds every one
            whole = isinstance(todo, range) and len(todo) == len(self.status)
            take = None if whole else pa.array(todo, pa.int64())
            parts, attempts, payloads = (
                (c if take is None else c.take(take)).to_pylist()
                for c in (self.partition, self.attempt, self.payload)
            )
            sink, cid, ms, decode = self.sink_name, self.checkpoint_id, self.pre_committed_ms, self._decode
            got = self.decoded.get if committables is None else dict(zip(rows, committables, strict=True)).get
            objs = [got(r, _UNDECODED) for r in todo]
            for r, p, a, payload, c in zip(todo, parts, attempts, payloads, objs, strict=True):
                t = PendingTransaction(
                    sink, p, a, cid, c, ms, payload=payload, decode=decode, block=self, row=r
                )
                made.setdefault(r, t)  # atomic: a racing thread's object is dropped
        return tuple(made[r] for r in rows)

    def committable(self, row: int) -> Any:
        """Row ``row``'s committable, decoded on first ask and kept (:attr:`decoded`; its
        transaction's if that was made): what verification and the lingering cleanup read a
        block's rows through, making no transaction (issue #42), so that the committer still
        commits the rows as columns, with the committables decoded here.

        Raises:
            CommittableDecodeError: the payload does not decode (every ask raises it again).
        """
        c = self.decoded.get(row, _UNDECODED)
        if c is _UNDECODED:
            t = self.made.get(row)
            if t is not None:
                return t.committable
            assert self._decode is not None  # a block made from transactions holds every one
            c = self.decoded.setdefault(row, self._decode(self.payload[row].as_py()))
        return c

    def committables(
        self,
        rows: range | Sequence[int],
        payload: pa.Array | pa.ChunkedArray,
        sink: TwoPhaseCommitSink[Any, Any],
    ) -> list[Any]:
        """The committables of ``rows`` (ascending), decoded in bulk by ``sink`` from ``payload``,
        their rows' payload column (:attr:`BlockRows.payload`), and kept (:attr:`decoded`): what
        the committer commits a call of this block's rows with when some of them were decoded
        already (verification, the lingering cleanup's held committables: the others are decoded
        here, each once); a call none of whose rows was decoded decodes its payload column as a
        whole (:func:`~twophase.coordinator.state.payload.decode_payloads`) and keeps nothing
        (issue #42). Called from the committer's thread: each row is kept with one dict store
        (two threads decoding one row at once keep one).

        Raises:
            CommittableDecodeError: as :func:`~twophase.coordinator.state.payload.decode_payloads`.
        """
        decoded = self.decoded
        if not decoded:
            objs = decode_payloads(sink, payload)
            decoded.update(zip(rows, objs, strict=True))
            return objs
        todo = [i for i, r in enumerate(rows) if r not in decoded]  # verification decoded the others
        if todo:
            objs = decode_payloads(sink, payload.take(pa.array(todo, pa.int64())))
            decoded.update(zip((rows[i] for i in todo), objs, strict=True))
        return [decoded[r] for r in rows]

    def forget_decoded(self, rows: range | Sequence[int]) -> None:
        """Let the committables decoded for ``rows`` go, once their commit is confirmed (issue
        #42: the latest checkpoint's decoded committables were ~330 MB of a 10⁵ × 3 driver's
        memory). A reader after that (the metadata cache, a lingering cleanup that reads
        ``scope.held``, a restore in the same process) decodes the row's payload again on access;
        the sinks read ``scope.held`` only when a listing found something that could be aborted."""
        decoded = self.decoded
        if not decoded:
            return
        if isinstance(rows, range) and len(rows) == len(self.status):
            decoded.clear()
        else:
            for r in rows:
                decoded.pop(r, None)

    @property
    def txns(self) -> tuple[PendingTransaction[Any], ...]:
        """Every row's transaction (made now where not yet: a rare path, or tests)."""
        return self.transactions(range(len(self.status)))

    @property
    def partitions(self) -> list[int]:
        """The rows' partitions, ascending (a Python list made once, for lookups by partition)."""
        if self._partitions is None:
            self._partitions = self.partition.to_pylist()
        return self._partitions

    def recode_row(self, row: int, code: int) -> None:
        """Row ``row``'s status is ``code``."""
        self.status[row] = code

    def leave(self, row: int) -> int:
        """Row ``row`` leaves (GONE); returns the status it had."""
        code = self.status[row]
        self.status[row] = _GONE
        return code

    @property
    def empty(self) -> bool:
        """Whether every row left the ledger."""
        return not self.status.translate(None, _LEFT)

    def live_rows(self) -> range | list[int]:
        """The rows still in the ledger, ascending (:meth:`RowStatus.live_rows`)."""
        return self.status.live_rows()

    def live(self) -> list[PendingTransaction[Any]]:
        """The transactions still rows here, ascending by partition (each made if not yet)."""
        return [self.txn(i) for i in self.live_rows()]

    def rows_with(self, code: int) -> range | list[int]:
        """The rows whose status is ``code``, ascending."""
        n = self.status.count(code)
        if n == len(self.status):
            return range(n)
        if n == 0:
            return range(0)
        return [i for i, c in enumerate(self.status) if c == code]

    def with_status(self, code: int) -> list[PendingTransaction[Any]]:
        """The transactions whose row has status ``code``, ascending by partition."""
        return [self.txn(i) for i in self.rows_with(code)]

    def row_of(self, partition: int) -> int | None:
        """The live row of ``partition``, if any."""
        parts = self.partitions
        i = bisect.bisect_left(parts, partition)
        if i < len(parts) and parts[i] == partition and self.status[i] not in _LEFT:
            return i
        return None

    def confirm(self, rows: range | Sequence[int]) -> list[PendingTransaction[Any]]:
        """The committer confirmed the commit of ``rows`` (COMMITTING when handed over): they
        leave the ledger CONFIRMED, one status recode for the range. Returns the transactions of
        those rows that had left already (evicted into their lifecycle meanwhile, which holds and
        now forgets them: :meth:`SubtaskLifecycle.commit_confirmed`)."""
        if isinstance(rows, range) and rows.step == 1:
            lo, hi = rows.start, rows.stop
            seg = self.status[lo:hi]
            self.status[lo:hi] = seg.translate(_CONFIRM)
            if _GONE not in seg:
                return []
            return [self.made[lo + i] for i, c in enumerate(seg) if c == _GONE and lo + i in self.made]
        left: list[PendingTransaction[Any]] = []
        for r in rows:
            if self.status[r] == _GONE:
                if r in self.made:
                    left.append(self.made[r])
            elif self.status[r] == _COMMITTING:
                self.status[r] = _CONFIRMED
        return left

    def live_columns(self) -> pa.Table:
        """The committable file's table of the live rows, when some left (when none did it is
        :attr:`committable_rows`' as it is, which the publish takes without a call): the table
        filtered by the status column in Arrow, no object per row."""
        status = self.status
        left = pc.is_in(
            pa.Array.from_buffers(pa.uint8(), len(status), [None, pa.py_buffer(bytes(status))]),
            value_set=pa.array(list(_LEFT), pa.uint8()),
        )
        return self.committable_rows.table.filter(pc.invert(left))


class BlockRows(Sequence["PendingTransaction[Any]"]):
    """Rows of one :class:`LedgerBlock` as a sequence of their transactions, each made on access
    (:meth:`LedgerBlock.txn`): what the ledger hands the committer as one commit call (issue #42),
    so that the objects are made where the call runs (the committer thread when asynchronous),
    and what the committer hands back when it confirmed the whole call (one status recode).

    Attributes:
        block: the block.
        rows: its rows, ascending.
        sink_name, checkpoint_id: the block's (plain attributes: what the committer groups and
            logs the call by, read without a call).
        payload: the rows' payloads, a binary column (the block's own when the call is all its
            rows): what the committer decodes in bulk (issue #42).
    """

    __slots__ = ("block", "checkpoint_id", "payload", "rows", "sink_name")

    def __init__(self, block: LedgerBlock, rows: range | Sequence[int]) -> None:
        self.block = block
        self.rows = rows
        self.sink_name = block.sink_name
        self.checkpoint_id = block.checkpoint_id
        payload = block.payload
        whole = isinstance(rows, range) and rows.step == 1 and rows.start == 0 and len(rows) == len(payload)
        self.payload = payload if whole else payload.take(pa.array(rows, pa.int64()))

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> PendingTransaction[Any]: ...

    @overload
    def __getitem__(self, index: slice) -> BlockRows: ...

    def __getitem__(self, index: int | slice) -> PendingTransaction[Any] | BlockRows:
        if isinstance(index, slice):
            return BlockRows(self.block, self.rows[index])
        return self.block.txn(self.rows[index])

    def __iter__(self) -> Iterator[PendingTransaction[Any]]:
        txn = self.block.txn
        return (txn(r) for r in self.rows)

    def confirm(self) -> list[PendingTransaction[Any]]:
        """:meth:`LedgerBlock.confirm` of these rows."""
        return self.block.confirm(self.rows)

    def __repr__(self) -> str:
        return f"BlockRows({self.block!r}, {len(self.rows)} rows)"


class TxnRows(Sequence[_T]):
    """Rows named by (source, row) columns, each made on access: ``sources[s](r)`` for row ``i``
    with ``s = source[i]``, ``r = row[i]`` (a block's :meth:`LedgerBlock.committable` or
    :meth:`LedgerBlock.txn`, or a function of a list's index). What the metadata's and
    verification's per-sink committables are read through, without a Python object per row
    until one is read, and without a transaction object for a block's row (issue #42)."""

    __slots__ = ("_row", "_rows", "_source", "_sources")

    def __init__(
        self,
        sources: Sequence[Callable[[int], _T]],
        source: pa.Array | pa.ChunkedArray,
        row: pa.Array | pa.ChunkedArray,
    ) -> None:
        self._sources = sources
        self._source = source
        self._row = row
        self._rows: list[tuple[int, int]] | None = None

    def __len__(self) -> int:
        return len(self._row)

    def _pairs(self) -> list[tuple[int, int]]:
        if self._rows is None:
            self._rows = list(zip(self._source.to_pylist(), self._row.to_pylist(), strict=True))
        return self._rows

    @overload
    def __getitem__(self, index: int) -> _T: ...

    @overload
    def __getitem__(self, index: slice) -> list[_T]: ...

    def __getitem__(self, index: int | slice) -> _T | list[_T]:
        if isinstance(index, slice):
            return [self._sources[s](r) for s, r in self._pairs()[index]]
        if self._rows is not None:
            s, r = self._rows[index]
        else:
            if index < 0:
                index += len(self)
            if not 0 <= index < len(self):
                raise IndexError(index)
            s, r = self._source[index].as_py(), self._row[index].as_py()
        return self._sources[s](r)

    def __iter__(self) -> Iterator[_T]:
        sources = self._sources
        return (sources[s](r) for s, r in self._pairs())

    def __repr__(self) -> str:
        return f"TxnRows({len(self)} rows)"


class SinkLedger:
    """The pending transactions of one sink's RUNNING subtasks on the common path, as
    :class:`LedgerBlock` s ascending by checkpoint id (issue #42): the transitions every subtask
    makes every epoch are columnar steps here, checked and named as
    :class:`SubtaskLifecycle`'s (``checkpoint_persisted``, ``notify_checkpoint_complete``, …).

    A subtask leaves the ledger for good (its rows move to its lifecycle, which then holds and
    decides them itself) when it leaves RUNNING (finish, close) or is acknowledged one by one
    (:meth:`evict`): :attr:`exceptional` lists those, and only those get a Python call per
    transition. Not thread-safe: the checkpoint coordinator's thread only (the committer
    thread reads a row's status, never writes it).
    """

    def __init__(self, sink_name: str) -> None:
        self.sink_name = sink_name
        self._blocks: list[LedgerBlock] = []
        self.exceptional: dict[int, SubtaskLifecycle[Any]] = {}
        """Partition → the lifecycle of a subtask whose transactions its lifecycle holds."""

    def __repr__(self) -> str:
        blocks, exceptional = len(self._blocks), len(self.exceptional)
        return f"SinkLedger({self.sink_name!r}, {blocks} blocks, {exceptional} exceptional)"

    @property
    def blocks(self) -> tuple[LedgerBlock, ...]:
        """The blocks, ascending by checkpoint id."""
        return tuple(self._blocks)

    def append(self, block: LedgerBlock) -> None:
        """Record an intake's block (its subtasks RUNNING, not exceptional, each acknowledging its
        checkpoint once: the caller checked)."""
        blocks = self._blocks
        i = len(blocks)
        while i and blocks[i - 1].checkpoint_id > block.checkpoint_id:
            i -= 1
        blocks.insert(i, block)

    def _up_to(self, checkpoint_id: int) -> list[LedgerBlock]:
        return [b for b in self._blocks if b.checkpoint_id <= checkpoint_id]

    def compact(self) -> None:
        """Forget the blocks every row of which left."""
        if any(b.empty for b in self._blocks):
            self._blocks = [b for b in self._blocks if not b.empty]

    # -- the columnar transitions -----------------------------------------------------------------

    def checkpoint_persisted(self, checkpoint_id: int) -> None:
        """Every PRE_COMMITTED row ≤ ``checkpoint_id`` is PERSISTED."""
        for b in self._up_to(checkpoint_id):
            b.status.recode(_PERSIST)

    def checkpoint_in_doubt(self, checkpoint_id: int) -> None:
        """Every PRE_COMMITTED row ≤ ``checkpoint_id`` is IN_DOUBT (kept for the restore)."""
        for b in self._up_to(checkpoint_id):
            b.status.recode(_DOUBT)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> list[tuple[int, BlockRows]]:
        """Every PERSISTED row ≤ ``checkpoint_id`` becomes COMMITTING; returns them per block
        (checkpoint id, its rows ascending by partition, as :class:`BlockRows`: no transaction is
        made here), ascending by checkpoint id.

        Raises:
            IllegalTransitionError: a row ≤ ``checkpoint_id`` is PRE_COMMITTED (its checkpoint is
                not durable); nothing changed.
        """
        blocks = self._up_to(checkpoint_id)
        for b in blocks:
            if _PRE in b.status:
                p = b.partition[b.status.index(_PRE)].as_py()
                raise IllegalTransitionError(
                    f"subtask {self.sink_name}[{p}]",
                    SubtaskState.RUNNING.value,
                    f"notify_checkpoint_complete #{checkpoint_id} (not durable)",
                )
        out: list[tuple[int, BlockRows]] = []
        for b in blocks:
            rows = b.status.commit_persisted()  # the statuses' step: the block's payloads not handed
            if rows:
                out.append((b.checkpoint_id, BlockRows(b, rows)))
        return out

    def all_committing(self, up_to_checkpoint: int) -> bool:
        """Whether every row ≤ ``up_to_checkpoint`` is COMMITTING (or gone)."""
        return all(not b.status.translate(None, _COMMITTING_OR_GONE) for b in self._up_to(up_to_checkpoint))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> list[PendingTransaction[Any]]:
        """Checkpoint ``checkpoint_id`` will never complete: its rows leave, to be aborted.

        Raises:
            IllegalTransitionError: a row of it is not PRE_COMMITTED (already durable or in
                doubt); nothing changed.
        """
        blocks = [b for b in self._blocks if b.checkpoint_id == checkpoint_id]
        for b in blocks:
            if b.status.translate(None, bytes((*_LEFT, _PRE))):
                row = next(i for i, c in enumerate(b.status) if c not in (*_LEFT, _PRE))
                raise IllegalTransitionError(
                    f"subtask {self.sink_name}[{b.partition[row].as_py()}]",
                    SubtaskState.RUNNING.value,
                    f"notify_checkpoint_aborted #{checkpoint_id} (already durable)",
                )
        out = [t for b in blocks for t in b.live()]
        for t in out:
            t.detach()
        self._blocks = [b for b in self._blocks if b.checkpoint_id != checkpoint_id]
        return out

    def release_in_doubt(self, landed: Set[int]) -> list[PendingTransaction[Any]]:
        """The IN_DOUBT rows of checkpoints not in ``landed`` leave; returns them, to be aborted."""
        out = [t for b in self._blocks if b.checkpoint_id not in landed for t in b.with_status(_IN_DOUBT)]
        for t in out:
            t.detach()
        self.compact()
        return out

    # -- queries and the way out ------------------------------------------------------------------

    def rows_of(self, partition: int) -> list[PendingTransaction[Any]]:
        """The transactions of subtask ``partition`` still rows here, ascending by checkpoint id."""
        return [b.txn(i) for b in self._blocks if (i := b.row_of(partition)) is not None]

    def evict(self, lc: SubtaskLifecycle[Any]) -> None:
        """Move subtask ``lc``'s rows into its lifecycle, for good: from now on it holds and
        decides its transactions itself (an exception: finish, close, a one-by-one acknowledgement)."""
        if lc.ledger is not self:
            return
        rows = self.rows_of(lc.partition)
        for t in rows:
            t.detach()
        lc.take_over(rows)
        self.exceptional[lc.partition] = lc
        self.compact()


def confirm_rows(confirmed: Iterable[PendingTransaction[Any]]) -> list[PendingTransaction[Any]]:
    """The committer confirmed ``confirmed``: each that is a ledger row leaves its ledger (its row
    GONE; the ledger forgets emptied blocks on ``compact``). Returns the others, which their
    lifecycles hold (:meth:`SubtaskLifecycle.commit_confirmed`)."""
    rest: list[PendingTransaction[Any]] = []
    for t in confirmed:
        if t.in_ledger:
            t.detach()
        else:
            rest.append(t)
    return rest


def confirm_calls(calls: Iterable[Sequence[PendingTransaction[Any]]]) -> list[PendingTransaction[Any]]:
    """The committer confirmed every transaction of ``calls``: a call that is a ledger block's
    rows (:class:`BlockRows`) leaves at once (one recode of its status column); each other
    transaction as :func:`confirm_rows`. Returns the transactions their lifecycles hold
    (:meth:`SubtaskLifecycle.commit_confirmed`)."""
    rest: list[PendingTransaction[Any]] = []
    for call in calls:
        if isinstance(call, BlockRows):
            rest += call.confirm()
        else:
            rest += confirm_rows(call)
    return rest


class CommittablesOf(Sequence[COMM]):
    """The committables of ``transactions``, in their order, each made on first access
    (:attr:`PendingTransaction.committable`): what verification and lingering cleanup are handed,
    so that a sink that looks at none decodes none."""

    __slots__ = ("_txns",)

    def __init__(self, transactions: Sequence[PendingTransaction[COMM]]) -> None:
        # a lazy sequence stays lazy: its transactions are made as their committables are read
        self._txns = transactions if isinstance(transactions, (TxnRows, BlockRows)) else tuple(transactions)

    def __len__(self) -> int:
        return len(self._txns)

    @overload
    def __getitem__(self, index: int) -> COMM: ...

    @overload
    def __getitem__(self, index: slice) -> CommittablesOf[COMM]: ...

    def __getitem__(self, index: int | slice) -> COMM | CommittablesOf[COMM]:
        if isinstance(index, slice):
            return CommittablesOf(list(self._txns[index]))
        return self._txns[index].committable

    def __repr__(self) -> str:
        return f"CommittablesOf({len(self._txns)} transactions)"


@dataclass(frozen=True)
class LifecycleActions(Generic[COMM]):
    """What a lifecycle call asks the caller to do, in order.

    Attributes:
        commit: transactions to commit, ascending by checkpoint id (now COMMITTING; report back
            with :meth:`SubtaskLifecycle.commit_confirmed`).
        abort: pre-committed transactions to abort (already forgotten by the lifecycle).
    """

    commit: tuple[PendingTransaction[COMM], ...] = ()
    abort: tuple[PendingTransaction[COMM], ...] = ()


_NOTHING: LifecycleActions[Any] = LifecycleActions()
"""Nothing to commit or abort (immutable: shared by every call that asks for nothing)."""
_CHECKPOINT_ID = operator.attrgetter("checkpoint_id")


@dataclass
class SubtaskLifecycle(Generic[COMM]):
    """The lifecycle and pending transactions of one (sink, partition); see the module docstring.

    Args:
        sink_name: the sink.
        partition: the subtask index (≥ 0).
        restored_in_progress: in-progress state restored from a checkpoint, or ``None``.
        restored_checkpoint_id: the id of the checkpoint it was restored from (0 if none).

    Not thread-safe: the checkpoint coordinator calls it from one thread.
    """

    sink_name: str
    partition: int
    restored_in_progress: JsonObject | None = None
    restored_checkpoint_id: int = 0
    state: SubtaskState = SubtaskState.RUNNING
    finished_after: int | None = None
    """Set by :meth:`finish`: the last checkpoint id triggered before finish(); checkpoints with a
    greater id were triggered after it (FLIP-147)."""
    ledger: SinkLedger | None = field(default=None, repr=False, compare=False)
    """The sink's ledger while it holds this subtask's transactions (a RUNNING subtask on the
    common path, issue #42): the coordinator makes its common transitions there, columnar, and
    this lifecycle's queries read its rows. ``None`` once the subtask is an exception (its rows
    moved here on leaving RUNNING) or for a lifecycle without a coordinator."""
    _pending: list[PendingTransaction[COMM]] = field(default_factory=list)
    _in_progress: dict[int, JsonObject | None] = field(default_factory=dict)
    _snapshotted: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._in_progress[self.restored_checkpoint_id] = self.restored_in_progress

    def __str__(self) -> str:
        return f"subtask {self.sink_name}[{self.partition}]"

    # -- transitions ----------------------------------------------------------------------------

    def _apply(self, transition: SubtaskTransition) -> None:
        target = TRANSITIONS.get((self.state, transition))
        if target is None:
            raise IllegalTransitionError(str(self), self.state.value, transition.value)
        if target is not self.state and self.ledger is not None:
            self.ledger.evict(self)  # leaving RUNNING: an exception from now on, decided here
        if target is not self.state:
            log.info(
                "subtask transition sink=%s partition=%d %s -[%s]-> %s",
                self.sink_name, self.partition, self.state.value, transition.value, target.value,
                extra={"sink": self.sink_name, "partition": self.partition, "transition": transition.value},
            )  # fmt: skip
        self.state = target

    def snapshot(
        self,
        checkpoint_id: int,
        attempt: int,
        committables: Sequence[COMM],
        in_progress: JsonObject | None,
        now_ms: int,
        payloads: Sequence[bytes] | None = None,
    ) -> None:
        """Record the subtask's acknowledgement of ``checkpoint_id`` from committable objects
        (``payloads``: the same encoded, one per committable): :meth:`snapshot_transactions` of
        transactions made of them.

        Raises:
            IllegalTransitionError: as :meth:`snapshot_transactions`.
            ValueError: ``payloads`` and ``committables`` differ in length.
        """
        if payloads is not None and len(payloads) != len(committables):
            raise ValueError(f"{self}: {len(committables)} committables but {len(payloads)} payloads")
        txns = [
            PendingTransaction(
                self.sink_name,
                self.partition,
                attempt,
                checkpoint_id,
                c,
                now_ms,
                payload=None if payloads is None else payloads[i],
            )
            for i, c in enumerate(committables)
        ]
        self.snapshot_transactions(checkpoint_id, txns, in_progress)

    def snapshot_transactions(
        self,
        checkpoint_id: int,
        transactions: Sequence[PendingTransaction[COMM]],
        in_progress: JsonObject | None,
    ) -> None:
        """Record the subtask's acknowledgement of ``checkpoint_id``: its pre-committed
        ``transactions`` (this subtask's, of ``checkpoint_id``, PRE_COMMITTED; their committables
        may be undecoded payloads) and the in-progress state it carries into the next epoch.

        Raises:
            IllegalTransitionError: the subtask is FINISHED or CLOSED, or already acknowledged
                ``checkpoint_id``.
        """
        if checkpoint_id in self._snapshotted:
            raise IllegalTransitionError(str(self), self.state.value, f"snapshot #{checkpoint_id} twice")
        self._apply(SubtaskTransition.SNAPSHOT)
        self._snapshotted.add(checkpoint_id)
        self._pending.extend(transactions)
        self._in_progress[checkpoint_id] = in_progress

    def record_in_progress(self, checkpoint_id: int, in_progress: JsonObject | None) -> None:
        """The in-progress state a common-path acknowledgement of ``checkpoint_id`` carried (its
        transactions are rows of the sink's ledger; the coordinator checked the snapshot)."""
        self._in_progress[checkpoint_id] = in_progress

    def take_over(self, rows: Sequence[PendingTransaction[COMM]]) -> None:
        """The sink's ledger hands over this subtask's ``rows`` (already left the ledger): from
        now on this lifecycle holds and decides its transactions itself (an exception)."""
        self.ledger = None
        self._pending = sorted([*self._pending, *rows], key=_CHECKPOINT_ID)

    def finish(self, last_triggered_checkpoint: int) -> None:
        """End of input: the subtask flushed into its current transaction and opens no new one.

        Args:
            last_triggered_checkpoint: the newest checkpoint id triggered so far (0 if none); only a
                later checkpoint can be this subtask's final checkpoint.

        Raises:
            IllegalTransitionError: not RUNNING.
        """
        self._apply(SubtaskTransition.FINISH)
        self.finished_after = last_triggered_checkpoint

    def checkpoint_persisted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is durable: every transaction ≤ it is now held by storage."""
        for t in self._pending:
            if t.checkpoint_id <= checkpoint_id and t.status is TxnStatus.PRE_COMMITTED:
                t.status = TxnStatus.PERSISTED
        # states older than the one checkpoint_id holds are never asked for again (ordered completion)
        held = [c for c in self._in_progress if c <= checkpoint_id]
        if held:
            newest = max(held)
            for c in held:
                if c < newest:
                    del self._in_progress[c]

    def checkpoint_in_doubt(self, checkpoint_id: int) -> None:
        """Publishing checkpoint ``checkpoint_id`` had an unknown outcome: its transactions may be
        durable, so they are kept (IN_DOUBT) — ``close`` does not abort them — for the restore."""
        for t in self._pending:
            if t.checkpoint_id <= checkpoint_id and t.status is TxnStatus.PRE_COMMITTED:
                t.status = TxnStatus.IN_DOUBT

    def notify_checkpoint_complete(self, checkpoint_id: int) -> LifecycleActions[COMM]:
        """Commit every pending transaction ≤ ``checkpoint_id`` (Flink's rule: covers subsumed,
        skipped, late and out-of-order notifications; an older notification after a newer one finds
        nothing left and is a no-op).

        If the subtask is WAITING_FOR_FINAL_CHECKPOINT and ``checkpoint_id`` was triggered after
        finish(), this is its final checkpoint: it also closes (FINISHED). Transactions pre-committed
        for later checkpoints are then committed if their checkpoint is already durable, aborted
        otherwise (FLIP-147's 42/43/44 example).

        Raises:
            IllegalTransitionError: the subtask is FINISHED or CLOSED; or a transaction ≤
                ``checkpoint_id`` is not durable (a notification for a checkpoint that did not complete).
        """
        final = (
            self.state is SubtaskState.WAITING_FOR_FINAL_CHECKPOINT
            and self.finished_after is not None
            and checkpoint_id > self.finished_after
        )
        self._apply(SubtaskTransition.NOTIFY_CHECKPOINT_COMPLETE)
        commit: list[PendingTransaction[COMM]] = []
        for t in self._pending:
            if t.checkpoint_id <= checkpoint_id:
                if t.status is TxnStatus.PRE_COMMITTED:
                    raise IllegalTransitionError(
                        str(self),
                        self.state.value,
                        f"notify_checkpoint_complete #{checkpoint_id} (not durable)",
                    )
                if t.status is TxnStatus.PERSISTED:
                    commit.append(t)
        abort: list[PendingTransaction[COMM]] = []
        if final:
            for t in self._pending:
                if t.checkpoint_id > checkpoint_id:
                    if t.status is TxnStatus.PERSISTED:
                        commit.append(t)  # durable: must be committed, never aborted
                    elif t.status is TxnStatus.PRE_COMMITTED:
                        abort.append(t)
            self._pending = [t for t in self._pending if t not in abort]
            self._apply(SubtaskTransition.FINAL_CHECKPOINT_COMPLETE)
            self._in_progress = {checkpoint_id: None}
        if len(commit) > 1:
            commit.sort(key=_CHECKPOINT_ID)
        for t in commit:
            t.status = TxnStatus.COMMITTING
        # completed checkpoints are no longer pending: the coordinator refuses their
        # acknowledgements, so their ids need not be kept (they grew for the life of the job)
        if self._snapshotted:
            self._snapshotted = {c for c in self._snapshotted if c > checkpoint_id}
        if not commit and not abort:
            return _NOTHING
        return LifecycleActions(tuple(commit), tuple(abort))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> LifecycleActions[COMM]:
        """Checkpoint ``checkpoint_id`` will never complete: abort its pre-committed transactions.

        Raises:
            IllegalTransitionError: the subtask is FINISHED or CLOSED.
        """
        self._apply(SubtaskTransition.NOTIFY_CHECKPOINT_ABORTED)
        abort = [t for t in self._pending if t.checkpoint_id == checkpoint_id]
        if any(t.status is not TxnStatus.PRE_COMMITTED for t in abort):
            raise IllegalTransitionError(
                str(self), self.state.value, f"notify_checkpoint_aborted #{checkpoint_id} (already durable)"
            )
        self._pending = [t for t in self._pending if t.checkpoint_id != checkpoint_id]
        self._in_progress.pop(checkpoint_id, None)
        self._snapshotted.discard(checkpoint_id)
        return LifecycleActions((), tuple(abort))

    def close(self) -> LifecycleActions[COMM]:
        """Failure, cancel or suspend path (FLIP-147: close() only): abort what is pre-committed but
        not durable. Durable transactions are left to the restore that follows, which re-commits
        them from storage.

        Raises:
            IllegalTransitionError: already FINISHED or CLOSED.
        """
        self._apply(SubtaskTransition.CLOSE)
        abort = [t for t in self._pending if t.status is TxnStatus.PRE_COMMITTED]
        self._pending = [t for t in self._pending if t.status is not TxnStatus.PRE_COMMITTED]
        return LifecycleActions((), tuple(abort))

    def release_in_doubt(self, landed: Set[int]) -> tuple[PendingTransaction[COMM], ...]:
        """Forget the IN_DOUBT transactions whose checkpoint is not in ``landed`` (the ids storage
        shows): their publish did not land, so nothing holds them; returns them, to be aborted."""
        gone = tuple(
            t for t in self._pending if t.status is TxnStatus.IN_DOUBT and t.checkpoint_id not in landed
        )
        self._pending = [t for t in self._pending if all(t is not g for g in gone)]
        return gone

    def commit_confirmed(self, txn: PendingTransaction[COMM]) -> None:
        """The committer committed ``txn`` (COMMITTED or ALREADY_COMMITTED): forget it."""
        self._pending = [t for t in self._pending if t is not txn]

    # -- queries ----------------------------------------------------------------------------------

    def all_committing(self, up_to_checkpoint: int) -> bool:
        """Whether every pending transaction of a checkpoint ≤ ``up_to_checkpoint`` is COMMITTING
        (handed to the committer; none in doubt or still pre-committed)."""
        return all(
            t.status is TxnStatus.COMMITTING for t in self.pending if t.checkpoint_id <= up_to_checkpoint
        )

    def uncommitted(self, up_to_checkpoint: int) -> list[PendingTransaction[COMM]]:
        """Transactions pre-committed for checkpoints ≤ ``up_to_checkpoint`` whose commit is not
        confirmed, ascending by checkpoint id: what checkpoint ``up_to_checkpoint`` must hold."""
        return sorted(
            (t for t in self.pending if t.checkpoint_id <= up_to_checkpoint), key=lambda t: t.checkpoint_id
        )

    @property
    def pending(self) -> tuple[PendingTransaction[COMM], ...]:
        """Every transaction not yet confirmed committed nor aborted (its own, then its rows in
        the sink's ledger)."""
        if self.ledger is None:
            return tuple(self._pending)
        return (*self._pending, *self.ledger.rows_of(self.partition))

    @property
    def own_pending(self) -> tuple[PendingTransaction[COMM], ...]:
        """The transactions this lifecycle holds itself (none of its ledger rows)."""
        return tuple(self._pending)

    def in_progress_for(self, checkpoint_id: int) -> JsonObject | None:
        """The in-progress state as of checkpoint ``checkpoint_id``: the newest snapshot ≤ it."""
        older = [c for c in self._in_progress if c <= checkpoint_id]
        return self._in_progress[max(older)] if older else None

    @property
    def latest_in_progress(self) -> JsonObject | None:
        """The newest in-progress state snapshotted (or restored)."""
        return self._in_progress[max(self._in_progress)] if self._in_progress else None
