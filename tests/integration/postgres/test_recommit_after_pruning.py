"""A restore re-commits a checkpoint whose ``_committed`` marker is missing, long after it committed
(#43 item 1), on a real PostgreSQL.

The marker is best effort: storage may refuse it, or the driver may die between the commit and the
marker. A restore then re-commits every committable of the checkpoint, possibly after later
checkpoints committed and the committer pruned old commit records. The gid is no longer prepared,
so only the sink's own durable evidence (the commit records, and the pruning horizon recorded with
them) may decide: ALREADY_COMMITTED, never a second copy, never a false LOST. The committables are
re-decoded from their JSON as a restore does, and every row is read back with plain psycopg.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from twophase.connectors.postgres import PostgresCommittable, PostgresSink
from twophase.sinks.context import WriterContext
from twophase.sinks.outcome import CommitOutcome

JOB = "pg-recommit"
PARTITIONS = 2
RETENTION = 10
MakeSink = Callable[..., PostgresSink]
Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def people(reader: Conn, table: str) -> str:
    reader.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, name text)").format(sql.Identifier(table))
    )
    return table


def _ids(checkpoint: int, partition: int) -> list[int]:
    return [checkpoint * 100 + partition * 10 + i for i in range(3)]


def _prepare(sink: PostgresSink, checkpoint: int) -> list[PostgresCommittable]:
    """One prepared transaction per partition: three rows each, ids unique per checkpoint."""
    out = []
    for partition in range(PARTITIONS):
        ctx = WriterContext(JOB, sink.name, checkpoint, partition, 0, num_partitions=PARTITIONS)
        txn = sink.begin_transaction(ctx)
        ids = _ids(checkpoint, partition)
        sink.write(txn, pa.record_batch({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}))
        committable = sink.pre_commit(txn)
        assert committable is not None
        out.append(committable)
    return out


def _commit_checkpoints(sink: PostgresSink, checkpoints: range) -> dict[int, list[dict[str, Any]]]:
    """Prepare and commit each checkpoint in order; return each one's committables as checkpoint JSON."""
    stored = {}
    for checkpoint in checkpoints:
        committables = _prepare(sink, checkpoint)
        for c in committables:
            assert sink.commit(c) is CommitOutcome.COMMITTED
        stored[checkpoint] = [json.loads(json.dumps(sink.encode(c))) for c in committables]
    return stored


def _restore(make_sink: MakeSink, stored: list[dict[str, Any]], **overrides: Any) -> list[CommitOutcome]:
    """What a restore of an unmarked checkpoint does: a new driver's sink decodes the checkpoint's
    committables and re-commits each."""
    sink = make_sink(commit_record_retention=overrides.pop("commit_record_retention", RETENTION), **overrides)
    return [sink.recover_and_commit(sink.decode(c)) for c in stored]


def _counts(conn: Conn, table: str) -> dict[int, int]:
    rows = conn.execute(sql.SQL("SELECT id, count(*) FROM {} GROUP BY id").format(sql.Identifier(table)))
    return {int(i): int(n) for i, n in rows.fetchall()}


def _expected(checkpoints: range) -> dict[int, int]:
    return {i: 1 for c in checkpoints for p in range(PARTITIONS) for i in _ids(c, p)}


def _records(conn: Conn, checkpoint: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM twophase_commits WHERE checkpoint_id = %s AND partition >= 0 AND gid LIKE %s",
        (checkpoint, f"twophase.{JOB}.%"),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _sink(make_sink: MakeSink, **overrides: Any) -> PostgresSink:
    sink = make_sink(commit_record_retention=overrides.pop("commit_record_retention", RETENTION), **overrides)
    sink.validate(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    return sink


def test_an_unmarked_checkpoint_within_the_retention_is_already_committed(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _sink(make_sink)
    stored = _commit_checkpoints(sink, range(1, 16))  # the commit of 15 prunes below 5
    assert _records(reader, 4) == 0 and _records(reader, 8) == PARTITIONS
    assert _restore(make_sink, stored[8]) == [CommitOutcome.ALREADY_COMMITTED] * PARTITIONS
    assert _counts(reader, people) == _expected(range(1, 16))


def test_an_unmarked_checkpoint_whose_commit_records_were_pruned_is_already_committed(
    make_sink: MakeSink, reader: Conn, people: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = _sink(make_sink)
    stored = _commit_checkpoints(sink, range(1, 16))  # checkpoint 2's marker refused; 3..15 commit
    assert _records(reader, 2) == 0, "the commit of 15 pruned checkpoint 2's commit records"
    with caplog.at_level(logging.INFO):
        outcomes = _restore(make_sink, stored[2])
    assert outcomes == [CommitOutcome.ALREADY_COMMITTED] * PARTITIONS
    assert _counts(reader, people) == _expected(range(1, 16))
    assert any("pruning horizon" in r.getMessage() for r in caplog.records)


def test_the_horizon_holds_when_the_retention_is_raised_after_pruning(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _sink(make_sink)
    stored = _commit_checkpoints(sink, range(1, 16))  # pruned below 5 with a retention of 10
    # a new driver with a larger retention: the records below 5 are gone all the same
    assert (
        _restore(make_sink, stored[3], commit_record_retention=50)
        == [CommitOutcome.ALREADY_COMMITTED] * PARTITIONS
    )
    assert _counts(reader, people) == _expected(range(1, 16))


def test_a_rolled_back_checkpoint_above_the_horizon_is_still_lost(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _sink(make_sink)
    _commit_checkpoints(sink, range(1, 16))
    rolled_back = _prepare(sink, 16)
    for c in rolled_back:
        sink.abort(c)
    stored = [sink.encode(c) for c in rolled_back]
    assert _restore(make_sink, stored) == [CommitOutcome.LOST] * PARTITIONS
    assert _counts(reader, people) == _expected(range(1, 16))
