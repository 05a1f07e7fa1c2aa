"""An in-memory model of PostgreSQL's prepared transactions, for model-based tests of the PostgreSQL sink.

The real :class:`~twophase.connectors.postgres.sink.PostgresSink` runs against it through
:class:`ModelConnection`, which answers the calls and statements the sink makes on a psycopg 3
connection (its ``connector``). It behaves like the server where exactly-once depends on it
(PostgreSQL docs, "PREPARE TRANSACTION", "COMMIT PREPARED", "ROLLBACK PREPARED",
"pg_prepared_xacts"):

- a transaction begun with ``tpc_begin(gid)`` collects rows (binary COPY) and its commit record
  (the row it inserts into ``twophase_commits``), invisible to everyone else;
- ``tpc_prepare`` makes it a prepared transaction: listed in ``pg_prepared_xacts``, owned by the
  server, no longer by the session; a gid already prepared is refused (42710);
- ``COMMIT PREPARED`` makes its rows and its commit record visible at once, ``ROLLBACK PREPARED``
  discards both; either on a gid that is not prepared answers 42704 (``UndefinedObject``); both
  must run outside a transaction block (25001);
- closing a session, or losing it, rolls back its transaction if it was not prepared;
- :meth:`PostgresModel.restart`: the server restarts. Every session breaks (its next call raises
  ``OperationalError``) and its unprepared transaction is gone; prepared transactions, committed
  rows and commit records survive (they are in the WAL). The server may refuse the next few
  connection attempts while it starts;
- :attr:`PostgresModel.restart_at` restarts the server at the next operation of a kind, before it
  takes effect or after it did (the client then hears a broken connection: the outcome is
  unknown to it);
- the seal table (:mod:`~twophase.connectors.postgres.internal.seal`): rows inserted with autocommit,
  visible at once, durable;
- the committer's pruning horizon: a row of the commit-record table (gid ``<prefix>pruned``), raised
  and read as the committer does.

What it leaves out: locks, advisory ones included, which are always granted (the protocol test
writes each key once and runs one session at a time), MVCC snapshots, the catalog (the sink's
write plan is given, not read), privileges, other databases.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from twophase.connectors.postgres.internal.seal import SEAL_SUFFIX

RESTART_POINTS = (
    "before:copy",
    "before:prepare",
    "after:prepare",
    "before:commit",
    "after:commit",
    "before:rollback",
    "after:rollback",
)
"""Where an armed restart hits: before or after a COPY, a PREPARE TRANSACTION, a COMMIT PREPARED or
a ROLLBACK PREPARED."""


@dataclass(frozen=True)
class CommitRecord:
    """A row of the commit-record table (only the columns the sink reads back)."""

    gid: str
    job_token: str
    sink: str
    checkpoint_id: int


@dataclass
class Transaction:
    """A transaction's writes: rows (the first written column's values) and commit records."""

    gid: str
    rows: list[str] = field(default_factory=list)
    records: list[CommitRecord] = field(default_factory=list)
    prepared_ms: int = 0


class PostgresModel:
    """The server's durable state and its sessions' generation (see the module docstring).

    Args:
        clock: ms clock (shared with the runtime under test); ``pg_prepared_xacts.prepared``.

    Attributes:
        prepared: gid → prepared transaction (``pg_prepared_xacts``).
        table: committed rows of the target table.
        commit_records: gid → visible commit record.
        sealed: gid → its seal (the seal table's row: job token, sink, checkpoint).
        restart_at: one of :data:`RESTART_POINTS` or ``None``: restart at that point, once.
        refuse_connects: connection attempts to refuse (the server is starting).
        busy: the next COMMIT PREPARED statements to answer 55006 (``ObjectInUse``: another session
            is finishing the gid) without effect; each answer takes one.
        events: what happened, in order (``prepared <gid>``, ``restarted``…).
    """

    def __init__(self, clock: Callable[[], int] = lambda: 0) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.prepared: dict[str, Transaction] = {}
        self.table: list[str] = []
        self.commit_records: dict[str, CommitRecord] = {}
        self.sealed: dict[str, CommitRecord] = {}
        self.generation = 0
        self.restart_at: str | None = None
        self.refuse_connects = 0
        self.busy = 0
        self.events: list[str] = []
        self.committed_gids: set[str] = set()  # gids ended by COMMIT PREPARED

    # --- the server's life ------------------------------------------------------------------------

    def restart(self, refuse_connects: int = 0) -> None:
        """Restart: every session breaks; prepared transactions survive, unprepared ones do not."""
        with self.lock:
            self.generation += 1
            self.refuse_connects = refuse_connects
            self.events.append("restarted")

    def maybe_restart(self, when: str, op: str) -> None:
        """Restart now if :attr:`restart_at` is ``when:op``, and break the caller's session.

        Raises:
            psycopg.OperationalError: the restart happened.
        """
        if self.restart_at == f"{when}:{op}":
            self.restart_at = None
            self.restart()
            self.events.append(f"restarted {when} {op}")
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    def connect(self, *, autocommit: bool, **kwargs: Any) -> ModelConnection:
        """The sink's connector: a session (``kwargs`` are ``PostgresSinkConfig.connect_kwargs``).

        Raises:
            psycopg.OperationalError: the server is starting and refuses this attempt.
        """
        with self.lock:
            if self.refuse_connects > 0:
                self.refuse_connects -= 1
                raise psycopg.OperationalError("the database system is starting up")
            return ModelConnection(self, autocommit)

    # --- readers ----------------------------------------------------------------------------------

    def committed_rows(self) -> Counter[str]:
        """The target table's rows (the key column), as a multiset."""
        with self.lock:
            return Counter(self.table)

    def prepared_gids(self, prefix: str = "") -> list[str]:
        """Prepared transactions whose gid starts with ``prefix``, sorted."""
        with self.lock:
            return sorted(g for g in self.prepared if g.startswith(prefix))

    # --- statements -------------------------------------------------------------------------------

    def _commit_prepared(self, gid: str) -> None:
        txn = self.prepared.pop(gid, None)
        if txn is None:
            raise psycopg.errors.UndefinedObject(
                f'prepared transaction with identifier "{gid}" does not exist'
            )
        self.table += txn.rows
        self.commit_records.update((r.gid, r) for r in txn.records)
        self.committed_gids.add(gid)
        self.events.append(f"committed {gid}")

    def _rollback_prepared(self, gid: str) -> None:
        if self.prepared.pop(gid, None) is None:
            raise psycopg.errors.UndefinedObject(
                f'prepared transaction with identifier "{gid}" does not exist'
            )
        self.events.append(f"rolled back {gid}")

    def _prepared_at(self, txn: Transaction) -> dt.datetime:
        return dt.datetime.fromtimestamp(txn.prepared_ms / 1000, tz=dt.timezone.utc)


class _Result:
    def __init__(self, rows: Sequence[tuple[Any, ...]] = ()) -> None:
        self.rows = list(rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


_LITERAL_GID = re.compile(r"^(COMMIT|ROLLBACK) PREPARED '([^']*)'$")


class ModelConnection:
    """One session, answering what the sink calls on a ``psycopg.Connection`` (see the module docstring).

    Raises ``AssertionError`` for a statement the model does not know: the sink changed, and the
    model must learn the new statement.
    """

    def __init__(self, model: PostgresModel, autocommit: bool) -> None:
        self.model = model
        self.generation = model.generation
        self.autocommit = autocommit
        self.closed = False
        self.txn: Transaction | None = None

    def __enter__(self) -> ModelConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _alive(self) -> None:
        if self.closed:
            raise psycopg.OperationalError("the connection is closed")
        if self.generation != self.model.generation:
            self.closed, self.txn = True, None
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    def close(self) -> None:
        """Close; an unprepared transaction is rolled back."""
        with self.model.lock:
            self.closed, self.txn = True, None

    def rollback(self) -> None:
        """Roll back the unprepared transaction."""
        with self.model.lock:
            self._alive()
            self.txn = None

    def tpc_begin(self, gid: str) -> None:
        """Begin a transaction to be prepared as ``gid`` (not in autocommit mode)."""
        with self.model.lock:
            self._alive()
            assert not self.autocommit and self.txn is None, "tpc_begin needs a fresh non-autocommit session"
            self.txn = Transaction(gid)

    def tpc_prepare(self) -> None:
        """PREPARE TRANSACTION: the transaction becomes the server's.

        Raises:
            psycopg.OperationalError: the session broke (maybe after the prepare took effect).
            psycopg.errors.DuplicateObject: the gid is already prepared.
        """
        model = self.model
        with model.lock:
            self._alive()
            assert self.txn is not None, "tpc_prepare without tpc_begin"
            model.maybe_restart("before", "prepare")
            if self.txn.gid in model.prepared:
                raise psycopg.errors.DuplicateObject(
                    f'transaction identifier "{self.txn.gid}" is already in use'
                )
            self.txn.prepared_ms = model.clock()
            model.prepared[self.txn.gid] = self.txn
            model.events.append(f"prepared {self.txn.gid}")
            self.txn = None
            model.maybe_restart("after", "prepare")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction block on an autocommit session (the committer's pruning). Statements apply
        one at a time under the model's lock; the block's statements never fail halfway here."""
        assert self.autocommit, "transaction() on a session already in a transaction"
        yield

    def cursor(self) -> _Cursor:
        """A cursor, for COPY."""
        return _Cursor(self)

    def execute(self, query: sql.Composable | str, params: Sequence[Any] = ()) -> _Result:
        """Answer one of the sink's statements (see the class docstring)."""
        text = query.as_string(None) if isinstance(query, sql.Composable) else query
        model = self.model
        with model.lock:
            self._alive()
            m = _LITERAL_GID.match(text)
            if m is not None:
                if not self.autocommit:
                    raise psycopg.errors.ActiveSqlTransaction(
                        f"{m[1]} PREPARED cannot run inside a transaction block"
                    )
                op = m[1].lower()
                if op == "commit" and model.busy > 0:
                    model.busy -= 1
                    model.events.append(f"busy {m[2]}")
                    raise psycopg.errors.ObjectInUse(f'prepared transaction with identifier "{m[2]}" is busy')
                model.maybe_restart("before", op)
                (model._commit_prepared if op == "commit" else model._rollback_prepared)(m[2])
                model.maybe_restart("after", op)
                return _Result()
            if text.startswith("SELECT gid, prepared, extract(epoch FROM now() - prepared)"):
                now = model.clock()
                listed = sorted(
                    (t for g, t in model.prepared.items() if g.startswith(str(params[0]))),
                    key=lambda t: (t.prepared_ms, t.gid),
                )
                return _Result(
                    [(t.gid, model._prepared_at(t), float(now - t.prepared_ms), "twophase") for t in listed]
                )
            if text.startswith(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid = ANY"
            ):
                return _Result([(g,) for g in params[0] if g in model.prepared])
            if text == "SELECT 1 FROM pg_prepared_xacts WHERE gid = %s":
                return _Result([(1,)] if params[0] in model.prepared else [])
            if text.startswith("SET LOCAL lock_timeout"):
                return _Result()
            if text in ("SELECT pg_advisory_lock(%s)", "SELECT pg_advisory_unlock(%s)"):
                return _Result([(True,)])
            if f'{SEAL_SUFFIX}"' in text:
                return self._seal_statement(text, params)
            if text.startswith("INSERT INTO ") and text.endswith("ON CONFLICT (gid) DO NOTHING"):
                # the committer's pruning horizon, raised with autocommit (see _horizon_statement)
                gid, token, sink, below = params
                model.commit_records.setdefault(gid, CommitRecord(gid, token, sink, int(below)))
                return _Result()
            if text.startswith("INSERT INTO ") and "(gid, job_token, sink, checkpoint_id" in text:
                assert self.txn is not None, "the commit record is inserted inside the transaction"
                gid, token, sink, checkpoint = params[:4]
                self.txn.records.append(CommitRecord(gid, token, sink, int(checkpoint)))
                return _Result()
            if text.startswith("SELECT 1 FROM ") and text.endswith(" WHERE gid = %s"):
                return _Result([(1,)] if params[0] in model.commit_records else [])
            if text.startswith("SELECT max(checkpoint_id) FROM "):
                ids = [
                    r.checkpoint_id
                    for r in model.commit_records.values()
                    if (r.job_token, r.sink) == tuple(params)
                ]
                return _Result([(max(ids) if ids else None,)])
            if text.startswith(
                "SELECT max(CASE WHEN gid = %s THEN checkpoint_id ELSE checkpoint_id - %s END)"
            ):
                horizon_gid, retention, token, sink = params
                ids = [
                    r.checkpoint_id if r.gid == horizon_gid else r.checkpoint_id - int(retention)
                    for r in model.commit_records.values()
                    if (r.job_token, r.sink) == (token, sink)
                ]
                return _Result([(max(ids) if ids else None,)])
            if text.startswith("DELETE FROM ") and text.endswith("WHERE gid = %s AND checkpoint_id < %s"):
                record = model.commit_records.get(params[0])
                if record is not None and record.checkpoint_id < params[1]:
                    del model.commit_records[params[0]]
                return _Result()
            if text.startswith("DELETE FROM ") and "LEAST(%s, (SELECT checkpoint_id FROM " in text:
                token, sink, horizon_gid, below, _ = params
                held = model.commit_records.get(horizon_gid)
                bound = below if held is None else min(below, held.checkpoint_id)
                for gid, r in list(model.commit_records.items()):
                    if (
                        gid != horizon_gid
                        and (r.job_token, r.sink) == (token, sink)
                        and r.checkpoint_id < bound
                    ):
                        del model.commit_records[gid]
                return _Result()
            raise AssertionError(f"the PostgreSQL model does not know the statement {text!r}")

    def _seal_statement(self, text: str, params: Sequence[Any]) -> _Result:
        model = self.model
        assert self.autocommit, "the seal table is written and read with autocommit"
        if text.startswith("INSERT INTO "):
            gids, token, sink, checkpoint = params
            for gid in gids:
                model.sealed.setdefault(gid, CommitRecord(gid, token, sink, int(checkpoint)))
            return _Result()
        if text.startswith("SELECT gid FROM "):
            return _Result([(g,) for g in params[0] if g in model.sealed])
        if text.startswith("DELETE FROM "):
            _prune(model.sealed, *params)
            return _Result()
        raise AssertionError(f"the PostgreSQL model does not know the statement {text!r}")


def _prune(rows: dict[str, CommitRecord], token: str, sink: str, below: int) -> None:
    """``DELETE … WHERE job_token = %s AND sink = %s AND checkpoint_id < %s`` on ``rows``."""
    for gid, r in list(rows.items()):
        if (r.job_token, r.sink) == (token, sink) and r.checkpoint_id < below:
            del rows[gid]


class _Cursor:
    def __init__(self, conn: ModelConnection) -> None:
        self.conn = conn

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def copy(self, statement: sql.Composable) -> _Copy:
        text = statement.as_string(None)
        assert text.startswith("COPY ") and text.endswith("FROM STDIN (FORMAT BINARY)"), text
        model = self.conn.model
        with model.lock:
            self.conn._alive()
            assert self.conn.txn is not None, "COPY outside the transaction"
            model.maybe_restart("before", "copy")
        return _Copy(self.conn)


_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def copy_first_fields(data: bytes) -> list[str]:
    """The first field of every tuple of binary COPY data, read as text as the server would read a
    ``text`` column (PostgreSQL docs, "COPY", "Binary Format": signature, flags, header extension,
    then per tuple a field count and per field a length, -1 for null, and the bytes)."""
    assert data.startswith(_COPY_SIGNATURE), data[:19]
    (extension,) = struct.unpack_from("!I", data, 15)
    position = 19 + extension
    firsts: list[str] = []
    while True:
        (count,) = struct.unpack_from("!h", data, position)
        position += 2
        if count == -1:
            assert position == len(data), "bytes after the trailer"
            return firsts
        for i in range(count):
            (size,) = struct.unpack_from("!i", data, position)
            position += 4
            if i == 0:
                firsts.append(str(None) if size < 0 else data[position : position + size].decode())
            position += max(size, 0)


class _Copy:
    def __init__(self, conn: ModelConnection) -> None:
        self.conn = conn
        self.rows: list[str] = []
        self.data = bytearray()

    def __enter__(self) -> _Copy:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            if self.data:
                self.rows += copy_first_fields(bytes(self.data))
            with self.conn.model.lock:
                self.conn._alive()
                assert self.conn.txn is not None
                self.conn.txn.rows += self.rows

    def set_types(self, types: Sequence[str]) -> None:
        return None

    def write_row(self, row: Sequence[Any]) -> None:
        self.rows.append(str(row[0]))

    def write(self, data: bytes) -> None:
        self.data += data
