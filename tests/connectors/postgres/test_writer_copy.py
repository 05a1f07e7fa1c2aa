"""The writer's one COPY per transaction against a real PostgreSQL: every batch's rows land, and a
row the server refuses only when the COPY ends fails the pre-commit by name, preparing nothing.
Read back with plain psycopg, never the sink."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.integration.services.postgres import PostgresServer, postgres_server
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import RecordError
from twophase.sinks.outcome import CommitOutcome

Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server(max_prepared_transactions=8) as s:
        yield s


@pytest.fixture
def reader(server: PostgresServer) -> Iterator[Conn]:
    with psycopg.connect(autocommit=True, **server.endpoint.connect_kwargs()) as conn:
        yield conn


def _sink(server: PostgresServer, reader: Conn, table: str, columns: str) -> PostgresSink:
    reader.execute(f"CREATE TABLE {table} ({columns})")
    sink = PostgresSink("pg", PostgresSinkConfig(table=table, **server.endpoint.sink_fields()))
    sink.validate(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    return sink


def _batch(ids: range, names: list[str | None] | None = None) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(list(ids), pa.int64()),
            "name": pa.array(names if names is not None else [f"n{i}" for i in ids], pa.string()),
        }
    )


def _context(sink: PostgresSink, partition: int = 0) -> WriterContext:
    return WriterContext("copy-job", sink.name, 3, partition, 0, num_partitions=2)


def test_batches_of_a_transaction_share_one_copy_and_every_row_lands(
    server: PostgresServer, reader: Conn
) -> None:
    sink = _sink(server, reader, "many_batches", "id bigint, name text")
    txn = sink.begin_transaction(_context(sink))
    sink.write(txn, _batch(range(0, 5000)))
    first_copy = txn._copy
    sink.write(txn, _batch(range(5000, 5000)))  # empty: nothing to do
    sink.write(txn, _batch(range(5000, 12000)))
    assert first_copy is not None and txn._copy is first_copy
    committable = sink.pre_commit(txn)
    assert committable is not None and committable.record_count == 12000
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    rows = reader.execute("SELECT id, name FROM many_batches ORDER BY id").fetchall()
    assert rows == [(i, f"n{i}") for i in range(12000)]


def test_a_row_refused_when_the_copy_ends_fails_the_pre_commit_by_name(
    server: PostgresServer, reader: Conn
) -> None:
    sink = _sink(server, reader, "not_null", "id bigint, name text NOT NULL")
    txn = sink.begin_transaction(_context(sink, partition=1))
    sink.write(txn, _batch(range(3)))
    sink.write(txn, _batch(range(3, 5), ["ok", None]))
    with pytest.raises(RecordError, match=r"refused a row of checkpoint 3, partition 1 \(5 rows written\)"):
        sink.pre_commit(txn)
    sink.abort_open(txn)
    assert reader.execute("SELECT count(*) FROM not_null").fetchone() == (0,)
    assert reader.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
