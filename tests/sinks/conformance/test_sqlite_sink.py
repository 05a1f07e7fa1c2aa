"""A SQLite sink written from the guide (docs/guide/write-a-sink.md), as a new user would (issue #43
item 6): pre-commit stages rows under the transaction's name; commit moves them into the table and
records ``(job, sink, checkpoint, partition)`` in a commit table in the same SQLite transaction, and
decides a repeated commit from that record. The kit passes it; with ``last_committed_checkpoint``
forced to ``None``, checkpoint ids start again after the checkpoint storage is lost, the commit
record answers ALREADY_COMMITTED for a new checkpoint under an old id and its rows are dropped,
silently: the kit must fail it, naming ``last_committed_checkpoint``.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twophase.sinks import (
    CommitOutcome,
    CommittableCodec,
    LingeringScope,
    TwoPhaseCommitSink,
    WriterContext,
)
from twophase.sinks.conformance import ContractViolation, SinkContract, check_sink

SCHEMA = """
CREATE TABLE IF NOT EXISTS staged (txn TEXT, job TEXT, sink TEXT, checkpoint INTEGER, key TEXT, value TEXT);
CREATE TABLE IF NOT EXISTS rows (key TEXT, value TEXT);
CREATE TABLE IF NOT EXISTS commits (
    job TEXT, sink TEXT, checkpoint INTEGER, partition INTEGER,
    PRIMARY KEY (job, sink, checkpoint, partition)
);
"""


@dataclass(frozen=True)
class StagedRows:
    """Rows staged under ``txn``, for one subtask of one checkpoint."""

    job: str
    sink: str
    checkpoint: int
    partition: int
    txn: str


@dataclass
class OpenRows:
    """A subtask's open transaction: its rows, in memory until pre-commit."""

    ctx: WriterContext
    txn: str
    rows: list[tuple[str, str]] = field(default_factory=list)


class SqliteSink(TwoPhaseCommitSink[OpenRows, StagedRows]):
    """Rows into table ``rows`` of a SQLite file, visible once committed."""

    codec = CommittableCodec(StagedRows, kind="example.sqlite_rows")

    def __init__(self, name: str, path: str) -> None:
        self.name = name
        self.path = path

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            conn.executescript(SCHEMA)
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def begin_transaction(self, ctx: WriterContext) -> OpenRows:
        # attempt numbers repeat across stage retries and drivers: the token keeps names apart
        return OpenRows(
            ctx, f"{ctx.job_id}.{self.name}.c{ctx.checkpoint_id}.p{ctx.partition}.{uuid.uuid4().hex}"
        )

    def write(self, txn: OpenRows, batch: pa.RecordBatch) -> None:
        txn.rows.extend((row["key"], row["value"]) for row in batch.to_pylist())

    def pre_commit(self, txn: OpenRows) -> StagedRows | None:
        if not txn.rows:
            return None
        c = txn.ctx
        with self._db() as db:
            db.executemany(
                "INSERT INTO staged VALUES (?, ?, ?, ?, ?, ?)",
                [(txn.txn, c.job_id, self.name, c.checkpoint_id, k, v) for k, v in txn.rows],
            )
        return StagedRows(c.job_id, self.name, c.checkpoint_id, c.partition, txn.txn)

    def commit(self, committable: StagedRows) -> CommitOutcome:
        c = committable
        key = (c.job, c.sink, c.checkpoint, c.partition)
        with self._db() as db:
            if db.execute(
                "SELECT 1 FROM commits WHERE job=? AND sink=? AND checkpoint=? AND partition=?", key
            ).fetchone():
                return CommitOutcome.ALREADY_COMMITTED  # decided from the sink's own record
            moved = db.execute(
                "INSERT INTO rows SELECT key, value FROM staged WHERE txn=?", (c.txn,)
            ).rowcount
            if moved <= 0:
                return CommitOutcome.LOST
            db.execute("DELETE FROM staged WHERE txn=?", (c.txn,))
            db.execute("INSERT INTO commits VALUES (?, ?, ?, ?)", key)
        return CommitOutcome.COMMITTED

    def abort(self, committable: StagedRows) -> None:
        with self._db() as db:
            db.execute("DELETE FROM staged WHERE txn=?", (committable.txn,))

    def abort_lingering(self, scope: LingeringScope[StagedRows]) -> int:
        held = {c.txn for c in scope.held}
        with self._db() as db:
            found = db.execute(
                "SELECT DISTINCT txn FROM staged WHERE job=? AND sink=? AND checkpoint<=?",
                (scope.job_id, scope.sink_name, scope.up_to_checkpoint),
            ).fetchall()
            gone = [t for (t,) in found if t not in held]
            db.executemany("DELETE FROM staged WHERE txn=?", [(t,) for t in gone])
        return len(gone)

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        with self._db() as db:
            (highest,) = db.execute(
                "SELECT max(checkpoint) FROM commits WHERE job=? AND sink=?", (job_id, self.name)
            ).fetchone()
        return None if highest is None else int(highest)


class TestSqliteSink(SinkContract[Path]):
    """The kit's random lives over :class:`SqliteSink`, each on a fresh database file."""

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.root, self.lives = tmp_path, 0

    def new_system(self) -> Path:
        self.lives += 1
        return self.root / f"life-{self.lives}.db"

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return SqliteSink("rows", str(system))

    def _select(self, system: Path, query: str) -> list[str]:
        with closing(sqlite3.connect(system)) as db:
            db.executescript(SCHEMA)
            return [str(key) for (key,) in db.execute(query)]

    def read_committed(self, system: Path) -> list[str]:
        return self._select(system, "SELECT key FROM rows")

    def lingering(self, system: Path) -> list[str]:
        return self._select(system, "SELECT DISTINCT txn FROM staged")

    def lose(self, system: Path, committables: Sequence[Any]) -> bool:
        with closing(sqlite3.connect(system)) as db, db:
            db.executemany("DELETE FROM staged WHERE txn=?", [(c.txn,) for c in committables])
        return True


class NoFloorSqliteSink(SqliteSink):
    """:class:`SqliteSink` with ``last_committed_checkpoint`` forced to ``None``."""

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        return None


class NoFloorSqliteContract(TestSqliteSink):
    """Not collected (no ``Test`` prefix): run by the test below."""

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return NoFloorSqliteSink("rows", str(system))


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_a_commit_record_without_its_floor_drops_data_and_fails_the_kit(tmp_path: Path) -> None:
    contract = NoFloorSqliteContract()
    contract.root, contract.lives = tmp_path, 0
    with pytest.raises(ContractViolation) as failed:
        check_sink(contract)
    message = str(failed.value)
    assert failed.value.check == "checkpoint ids never repeat a committed one"
    assert "last_committed_checkpoint('conformance') and got None" in message
