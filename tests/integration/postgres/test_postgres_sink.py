"""The PostgreSQL sink against a real PostgreSQL: prepared transactions, commit outcomes, lingering,
a server restart, refusals. Everything is read back with plain psycopg SELECTs, never the sink."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from twophase.connectors.postgres import PostgresCommittable, PostgresSink, PostgresSinkConfig
from twophase.integration.services.postgres import PostgresServer, postgres_server
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConcurrentAttemptError, ConfigError, SchemaError, ServiceUnavailableError
from twophase.sinks.outcome import CommitOutcome

JOB = "pg-job"
MakeSink = Callable[..., PostgresSink]
Conn = psycopg.Connection[tuple[Any, ...]]


def _create(conn: Conn, table: str, columns: str) -> None:
    conn.execute(sql.SQL("CREATE TABLE {} (" + columns + ")").format(sql.Identifier(table)))


def _batch(ids: list[int], names: list[str] | None = None) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(ids, pa.int64()), "name": pa.array(names or [f"n{i}" for i in ids], pa.string())}
    )


def _context(
    sink: PostgresSink, checkpoint: int = 1, partition: int = 0, attempt: int = 0, job: str = JOB
) -> WriterContext:
    return WriterContext(job, sink.name, checkpoint, partition, attempt, num_partitions=4)


def _prepare(
    sink: PostgresSink,
    batch: pa.RecordBatch,
    checkpoint: int = 1,
    partition: int = 0,
    attempt: int = 0,
    job: str = JOB,
) -> PostgresCommittable:
    txn = sink.begin_transaction(_context(sink, checkpoint, partition, attempt, job))
    sink.write(txn, batch)
    committable = sink.pre_commit(txn)
    assert committable is not None
    return committable


def _rows(conn: Conn, table: str) -> list[tuple[Any, ...]]:
    return list(
        conn.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(sql.Identifier(table))).fetchall()
    )


def _prepared(conn: Conn) -> list[str]:
    return [str(r[0]) for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


def _validated(make_sink: MakeSink, schema: pa.Schema | None = None, **overrides: Any) -> PostgresSink:
    sink = make_sink(**overrides)
    sink.validate(schema or _batch([0]).schema)
    return sink


@pytest.fixture
def people(reader: Conn, table: str) -> str:
    _create(reader, table, "id bigint PRIMARY KEY, name text NOT NULL")
    return table


def test_prepared_rows_are_invisible_until_commit_prepared(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _validated(make_sink)
    committable = _prepare(sink, _batch([1, 2, 3]))
    assert committable.record_count == 3
    assert _rows(reader, people) == []
    assert _prepared(reader) == [committable.gid]
    assert len(committable.gid.encode()) < 200

    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert _rows(reader, people) == [(1, "n1"), (2, "n2"), (3, "n3")]
    assert _prepared(reader) == []


def test_commit_twice_is_already_committed(make_sink: MakeSink, reader: Conn, people: str) -> None:
    sink = _validated(make_sink)
    committable = _prepare(sink, _batch([1, 2]))
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert sink.commit(committable) is CommitOutcome.ALREADY_COMMITTED
    assert sink.recover_and_commit(committable) is CommitOutcome.ALREADY_COMMITTED
    assert _rows(reader, people) == [(1, "n1"), (2, "n2")]
    assert _prepared(reader) == []


def test_recover_and_commit_from_the_checkpoint_json_alone(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    writer_side = _validated(make_sink)
    stored = json.dumps(writer_side.encode(_prepare(writer_side, _batch([7, 8]))))
    del writer_side  # the driver lost its in-memory state: a new process restores from JSON

    restored_sink = make_sink()
    committable = restored_sink.decode(json.loads(stored))
    assert restored_sink.recover_and_commit(committable) is CommitOutcome.COMMITTED
    assert _rows(reader, people) == [(7, "n7"), (8, "n8")]
    assert _prepared(reader) == []
    assert "password" not in stored and restored_sink.config.password not in stored  # type: ignore[operator]


def test_abort_rolls_back_and_a_later_commit_is_lost(make_sink: MakeSink, reader: Conn, people: str) -> None:
    sink = _validated(make_sink)
    committable = _prepare(sink, _batch([1]))
    sink.abort(committable)
    sink.abort(committable)  # idempotent
    assert _rows(reader, people) == []
    assert _prepared(reader) == []
    # gone and no commit record: rolled back, so LOST (decided from evidence, not absence alone)
    assert sink.commit(committable) is CommitOutcome.LOST


def test_lingering_prepared_transaction_of_a_dead_attempt_is_rolled_back(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _validated(make_sink)
    held = _prepare(sink, _batch([1, 2]), partition=0)  # the checkpoint holds it
    dead = _prepare(sink, _batch([3, 4]), partition=1)  # prepared, then the epoch failed over
    newer = _prepare(sink, _batch([9]), checkpoint=2)  # a later epoch's, maybe still running
    other_job = make_sink(name="other")
    other_txn = other_job.begin_transaction(WriterContext("another-job", "other", 1, 0, 0, 1))
    other_job.write(other_txn, _batch([100]))
    foreign = other_job.pre_commit(other_txn)
    assert foreign is not None

    scope = LingeringScope(JOB, sink.name, held=(held,), up_to_checkpoint=1)
    assert sink.abort_lingering(scope) == 1
    assert sorted(_prepared(reader)) == sorted([held.gid, newer.gid, foreign.gid])
    assert sink.commit(held) is CommitOutcome.COMMITTED
    assert sink.commit(dead) is CommitOutcome.LOST
    assert _rows(reader, people) == [(1, "n1"), (2, "n2")]

    sink.abort(newer)
    other_job.abort(foreign)
    assert sink.abort_lingering(LingeringScope(JOB, sink.name)) == 0
    assert _prepared(reader) == []
    assert _rows(reader, people) == [(1, "n1"), (2, "n2")]


def test_a_task_retry_rolls_back_the_earlier_attempts_prepared_transaction(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _validated(make_sink, lock_timeout_ms=5_000)
    first = _prepare(sink, _batch([1, 2]), attempt=0)  # the task died after PREPARE
    retry = _prepare(sink, _batch([1, 2]), attempt=1)  # same keys: no wait on the first's row locks
    assert _prepared(reader) == [retry.gid]
    with pytest.raises(ConcurrentAttemptError, match=first.gid):
        sink.verify_pre_committed([first], [])
    sink.verify_pre_committed([retry], [])
    assert sink.commit(retry) is CommitOutcome.COMMITTED
    assert sink.commit(first) is CommitOutcome.LOST
    assert _rows(reader, people) == [(1, "n1"), (2, "n2")]
    assert _prepared(reader) == []


def test_an_attempt_after_the_seal_is_a_zombie_and_rolls_nothing_back(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    """#26 item 4: once the driver sealed a checkpoint's prepared transactions (before publishing
    it), another attempt of the subtask refuses to begin instead of rolling the acknowledged one
    back; after the commit, a late one begins and is lingering."""
    sink = _validated(make_sink, lock_timeout_ms=5_000)
    acknowledged = _prepare(sink, _batch([1, 2]), attempt=0)
    sink.verify_pre_committed([acknowledged], [])
    with pytest.raises(ConcurrentAttemptError, match="zombie"):
        _prepare(sink, _batch([1, 2]), attempt=1)
    assert _prepared(reader) == [acknowledged.gid]
    assert sink.commit(acknowledged) is CommitOutcome.COMMITTED
    _prepare(sink, _batch([3]), attempt=2)
    assert sink.abort_lingering(LingeringScope(JOB, sink.name)) == 1
    assert _prepared(reader) == []
    assert _rows(reader, people) == [(1, "n1"), (2, "n2")]


def test_prepared_transactions_survive_a_server_restart(
    postgres: PostgresServer, make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _validated(make_sink)
    first = _prepare(sink, _batch([1, 2]), partition=0)
    second = _prepare(sink, _batch([3]), partition=1)
    reader.close()
    postgres.restart(mode="immediate")  # a crash: recovery replays the WAL, prepared ones come back
    with psycopg.connect(autocommit=True, **postgres.endpoint.connect_kwargs()) as conn:
        assert sorted(_prepared(conn)) == sorted([first.gid, second.gid])
        ages = sink.prepared_transactions(JOB)
        assert [p.gid for p in ages] == [first.gid, second.gid] and all(p.age_ms >= 0 for p in ages)
        assert sink.commit(first) is CommitOutcome.COMMITTED
        postgres.restart(mode="fast")
    with psycopg.connect(autocommit=True, **postgres.endpoint.connect_kwargs()) as conn:
        assert sink.commit(second) is CommitOutcome.COMMITTED
        assert sink.commit(first) is CommitOutcome.ALREADY_COMMITTED
        assert _rows(conn, people) == [(1, "n1"), (2, "n2"), (3, "n3")]
        assert _prepared(conn) == []


def test_commit_while_the_server_is_down_asks_for_retry(
    postgres: PostgresServer, make_sink: MakeSink, reader: Conn, people: str
) -> None:
    sink = _validated(make_sink, connect_attempts=1)
    committable = _prepare(sink, _batch([5]))
    reader.close()
    postgres.stop()
    try:
        assert sink.commit(committable) is CommitOutcome.RETRY
    finally:
        postgres.start()
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    with psycopg.connect(autocommit=True, **postgres.endpoint.connect_kwargs()) as conn:
        assert _rows(conn, people) == [(5, "n5")]


def test_upsert_last_row_of_a_key_wins(make_sink: MakeSink, reader: Conn, people: str) -> None:
    reader.execute(sql.SQL("INSERT INTO {} VALUES (1, 'old'), (2, 'kept')").format(sql.Identifier(people)))
    sink = _validated(make_sink, mode="upsert")
    txn = sink.begin_transaction(_context(sink))
    sink.write(txn, _batch([1, 3], ["first", "x"]))
    sink.write(txn, _batch([1], ["second"]))
    committable = sink.pre_commit(txn)
    assert committable is not None and committable.record_count == 3
    assert _rows(reader, people) == [(1, "old"), (2, "kept")]
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert _rows(reader, people) == [(1, "second"), (2, "kept"), (3, "x")]
    assert _prepared(reader) == []
    staging = reader.execute(
        "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'twophase_stage_%'"
    ).fetchone()
    assert staging == (0,)


def test_types_round_trip(make_sink: MakeSink, reader: Conn, table: str) -> None:
    _create(
        reader,
        table,
        "id integer, ok boolean, f float8, d date, ts timestamptz, ntz timestamp, n numeric(10,2), b bytea",
    )
    when = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.timezone.utc)
    batch = pa.record_batch(
        {
            "id": pa.array([1, 2], pa.int32()),
            "ok": pa.array([True, None]),
            "f": pa.array([1.5, -2.25]),
            "d": pa.array([dt.date(2024, 1, 2), None], pa.date32()),
            "ts": pa.array([when, None], pa.timestamp("us", "UTC")),
            "ntz": pa.array([when.replace(tzinfo=None), None], pa.timestamp("us")),
            "n": pa.array([Decimal("12.34"), None], pa.decimal128(10, 2)),
            "b": pa.array([b"\x00\x01", None], pa.binary()),
        }
    )
    sink = _validated(make_sink, batch.schema)
    txn = sink.begin_transaction(_context(sink))
    sink.write(txn, batch)
    committable = sink.pre_commit(txn)
    assert committable is not None
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    assert _rows(reader, table) == [
        (1, True, 1.5, dt.date(2024, 1, 2), when, when.replace(tzinfo=None), Decimal("12.34"), b"\x00\x01"),
        (2, None, -2.25, None, None, None, None, None),
    ]


def test_an_empty_transaction_yields_no_committable(make_sink: MakeSink, reader: Conn, people: str) -> None:
    sink = _validated(make_sink)
    txn = sink.begin_transaction(_context(sink))
    sink.write(txn, _batch([]))
    assert sink.pre_commit(txn) is None
    assert _prepared(reader) == []


def test_bad_config_fails_before_anything_is_written(make_sink: MakeSink, reader: Conn, table: str) -> None:
    schema = _batch([1]).schema
    with pytest.raises(ConfigError, match="does not exist"):
        make_sink().validate(schema)
    _create(reader, table, "id bigint, name text")
    with pytest.raises(ConfigError, match="upsert mode needs a key"):
        make_sink(mode="upsert").validate(schema)
    with pytest.raises(ConfigError, match="not covered by a unique index"):
        make_sink(mode="upsert", key_columns=("id",)).validate(schema)
    with pytest.raises(SchemaError, match=r"type mismatch .* name: data int64 vs table text"):
        make_sink().validate(pa.schema({"id": pa.int64(), "name": pa.int64()}))
    with pytest.raises(SchemaError, match=r"has no column\(s\) \['extra'\]"):
        make_sink().validate(pa.schema({"id": pa.int64(), "extra": pa.string()}))
    assert _rows(reader, table) == []
    assert _prepared(reader) == []


def test_wrong_password_error_does_not_show_it(make_sink: MakeSink, people: str) -> None:
    secret = "not-the-password-0123456789"
    sink = make_sink(password=secret, connect_attempts=1)
    with pytest.raises(ServiceUnavailableError) as caught:
        sink.validate(_batch([1]).schema)
    assert secret not in str(caught.value)
    assert secret not in repr(sink) and "***" in repr(sink.config)


def test_old_prepared_transactions_are_warned_about(
    make_sink: MakeSink, reader: Conn, people: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = _validated(make_sink, prepared_age_warning_ms=1)
    held = _prepare(sink, _batch([1]))
    assert sink.transaction_timeout_ms == 1  # the runtime's age monitor warns at 80% of it
    with caplog.at_level(logging.WARNING):
        assert sink.abort_lingering(LingeringScope(JOB, sink.name, held=(held,))) == 0
    assert any(
        "prepared transaction is old" in r.getMessage() and held.gid in r.getMessage() for r in caplog.records
    )
    assert sink.commit(held) is CommitOutcome.COMMITTED
    assert _prepared(reader) == []


def test_last_committed_checkpoint_comes_from_the_commit_records(make_sink: MakeSink, people: str) -> None:
    sink = _validated(make_sink)
    job = f"floor-{people}"
    assert sink.last_committed_checkpoint(job) is None
    sink.commit(_prepare(sink, _batch([1]), checkpoint=3, job=job))
    uncommitted = _prepare(sink, _batch([2]), checkpoint=4, job=job)
    assert sink.last_committed_checkpoint(job) == 3
    assert sink.last_committed_checkpoint(JOB + "-never") is None
    sink.abort(uncommitted)


def test_max_prepared_transactions_zero_is_refused_naming_the_setting(table: str) -> None:
    with postgres_server(max_prepared_transactions=0) as server:
        with psycopg.connect(autocommit=True, **server.endpoint.connect_kwargs()) as conn:
            _create(conn, table, "id bigint, name text")
        sink = PostgresSink("pg", PostgresSinkConfig(table=table, **server.endpoint.sink_fields()))
        with pytest.raises(ConfigError, match="max_prepared_transactions=0") as caught:
            sink.validate(_batch([1]).schema)
        assert "max_prepared_transactions" in str(caught.value) and "\n" not in str(caught.value)


def test_prepared_transaction_ages_as_prometheus_gauges(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from twophase.connectors.postgres.metrics import PreparedTransactionCollector

    sink = _validated(make_sink)
    registry = CollectorRegistry()
    registry.register(PreparedTransactionCollector(sink, JOB))
    committable = _prepare(sink, _batch([1]))
    text = generate_latest(registry).decode()
    assert f'twophase_postgres_prepared_transactions{{job="{JOB}",sink="pg"}} 1.0' in text
    assert "twophase_postgres_oldest_prepared_transaction_age_seconds" in text
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    text = generate_latest(registry).decode()
    assert f'twophase_postgres_prepared_transactions{{job="{JOB}",sink="pg"}} 0.0' in text
    assert _prepared(reader) == []


def test_a_restart_validates_beside_its_own_prepared_transactions(
    make_sink: MakeSink, reader: Conn, people: str
) -> None:
    # a job killed after PREPARE TRANSACTION restarts: its prepared transactions (rows in the
    # commit-record table) hold locks until recovery commits them, and validation runs first
    held = _prepare(_validated(make_sink), _batch([1, 2]))
    restarted = make_sink()
    validating = threading.Thread(target=restarted.validate, args=(_batch([0]).schema,), daemon=True)
    validating.start()
    validating.join(timeout=30)
    assert not validating.is_alive(), "validation waits for the job's own prepared transaction"
    assert restarted.commit(held) is CommitOutcome.COMMITTED
    assert _rows(reader, people) == [(1, "n1"), (2, "n2")]
    assert _prepared(reader) == []
