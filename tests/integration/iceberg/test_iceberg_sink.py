"""The Iceberg sink against real services: tables on MinIO, a SQLite catalog, one PostgreSQL catalog.

Read back with pyiceberg as a reader that is not the writer: a fresh catalog and table load, then
``scan().to_arrow()``. Lingering state is counted by listing the job's data prefix on MinIO.
"""

from __future__ import annotations

import datetime
import logging
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.table import Table, Transaction

from twophase.connectors.iceberg import IcebergCommittable, IcebergSink, IcebergSinkConfig
from twophase.connectors.iceberg.internal.catalog import catalog_properties
from twophase.connectors.iceberg.internal.committable import CODEC
from twophase.connectors.iceberg.internal.committer import SUMMARY_CHECKPOINT_ID, SUMMARY_JOB_ID
from twophase.integration.services.postgres import PostgresServer
from twophase.integration.services.s3 import S3Endpoint
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.outcome import CommitOutcome

from .conftest import BUCKET, MakeConfig

pytestmark = [pytest.mark.s3]

JOB = "orders-it"
UTC = datetime.timezone.utc


def rows(start: int, count: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [
            {
                "id": i,
                "region": "eu" if i % 2 else "us",
                "ts": datetime.datetime(2024, 3, 1 + i % 2, 8, tzinfo=UTC),
                "note": f"n-{i}",
            }
            for i in range(start, start + count)
        ]
    )


def fresh_table(config: IcebergSinkConfig) -> Table:
    """A reader that is not the writer: its own catalog object and table load."""
    return load_catalog(config.catalog_name, **catalog_properties(config)).load_table(config.identifier)


def read_ids(config: IcebergSinkConfig) -> list[int]:
    return sorted(fresh_table(config).scan().to_arrow().column("id").to_pylist())


def pre_commit(
    sink: IcebergSink, checkpoint: int, batches: Sequence[pa.RecordBatch], attempt: int = 0
) -> list[IcebergCommittable]:
    out = []
    for partition, batch in enumerate(batches):
        txn = sink.begin_transaction(
            WriterContext(JOB, sink.name, checkpoint, partition, attempt, len(batches))
        )
        sink.write(txn, batch)
        c = sink.pre_commit(txn)
        assert c is not None
        out.append(c)
    return out


def paths(committables: Sequence[IcebergCommittable]) -> set[str]:
    return {f.path for c in committables for f in c.files}


def objects(s3_endpoint: S3Endpoint, warehouse: str) -> set[str]:
    prefix = warehouse.removeprefix(f"s3://{BUCKET}/")
    pages = s3_endpoint.boto3_client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {f"s3://{BUCKET}/{o['Key']}" for page in pages for o in page.get("Contents", [])}


def data_objects(s3_endpoint: S3Endpoint, warehouse: str) -> set[str]:
    return {k for k in objects(s3_endpoint, warehouse) if "/data/twophase-" in k and k.endswith(".parquet")}


def test_files_on_minio_stay_invisible_until_the_commit_then_read_back_exactly(
    make_config: MakeConfig, s3_endpoint: S3Endpoint, warehouse: str
) -> None:
    sink = IcebergSink("lake", make_config())
    sink.validate(rows(0, 1).schema)
    committables = pre_commit(sink, 1, [rows(0, 50), rows(50, 50)])
    written = {f.path for c in committables for f in c.files}
    assert written and written <= data_objects(s3_endpoint, warehouse)
    assert read_ids(sink.config) == []
    assert sink.commit_checkpoint(1, committables) is CommitOutcome.COMMITTED
    table = fresh_table(sink.config)
    arrow = table.scan().to_arrow()
    assert sorted(arrow.column("id").to_pylist()) == list(range(100))
    assert sorted(arrow.column("note").to_pylist()) == sorted(f"n-{i}" for i in range(100))
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary[SUMMARY_JOB_ID] == JOB and summary[SUMMARY_CHECKPOINT_ID] == "1"
    assert sink.abort_lingering(LingeringScope(JOB, "lake", up_to_checkpoint=1)) == 0
    assert data_objects(s3_endpoint, warehouse) == written  # lingering zero


def test_commit_twice_and_recover_from_json_in_a_new_instance(make_config: MakeConfig) -> None:
    sink = IcebergSink("lake", make_config())
    sink.validate(rows(0, 1).schema)
    first = pre_commit(sink, 1, [rows(0, 10)])
    assert sink.commit_checkpoint(1, first) is CommitOutcome.COMMITTED
    assert sink.commit_checkpoint(1, first) is CommitOutcome.ALREADY_COMMITTED
    payloads = [CODEC.dumps(c) for c in pre_commit(sink, 2, [rows(10, 10), rows(20, 10)])]
    recovering = IcebergSink("lake", make_config())  # another process: only config and JSON
    decoded = [recovering.decode(CODEC.to_json(CODEC.loads(p))) for p in payloads]
    assert recovering.recover_and_commit_checkpoint(2, decoded) is CommitOutcome.COMMITTED
    assert recovering.recover_and_commit_checkpoint(2, decoded) is CommitOutcome.ALREADY_COMMITTED
    assert recovering.last_committed_checkpoint(JOB) == 2
    assert read_ids(sink.config) == list(range(30))


def test_abort_and_lingering_cleanup_on_minio(
    make_config: MakeConfig, s3_endpoint: S3Endpoint, warehouse: str
) -> None:
    sink = IcebergSink("lake", make_config())
    sink.validate(rows(0, 1).schema)
    committed = pre_commit(sink, 1, [rows(0, 6)], attempt=1)
    dead = pre_commit(sink, 1, [rows(0, 6)], attempt=0)  # a dead attempt of the same subtask
    assert sink.commit_checkpoint(1, committed) is CommitOutcome.COMMITTED
    aborted = pre_commit(sink, 2, [rows(6, 6)])
    sink.abort(aborted[0])
    sink.abort(committed[0])  # referenced by a snapshot: left alone
    assert not paths(aborted) & data_objects(s3_endpoint, warehouse)
    assert paths(dead) | paths(committed) == data_objects(s3_endpoint, warehouse)
    assert sink.abort_lingering(LingeringScope(JOB, "lake", up_to_checkpoint=2)) == len(paths(dead))
    assert data_objects(s3_endpoint, warehouse) == paths(committed)
    assert not [k for k in objects(s3_endpoint, warehouse) if k.endswith("/")]  # no folder markers
    assert read_ids(sink.config) == list(range(6))


def test_a_concurrent_foreign_append_between_pre_commit_and_commit(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sink = IcebergSink("lake", make_config())
    sink.validate(rows(0, 1).schema)
    ours = pre_commit(sink, 1, [rows(0, 8)])
    fresh_table(sink.config).append(pa.Table.from_batches([rows(1000, 2)]))  # before our commit
    original = Transaction.commit_transaction
    raced: list[bool] = []

    def race(self: Transaction) -> Any:
        if not raced:  # and one more between our table load and our catalog swap
            raced.append(True)
            fresh_table(sink.config).append(pa.Table.from_batches([rows(2000, 2)]))
        return original(self)

    monkeypatch.setattr(Transaction, "commit_transaction", race)
    with caplog.at_level(logging.INFO):
        assert sink.commit_checkpoint(1, ours) is CommitOutcome.COMMITTED
    assert "commit conflict, reloading" in caplog.text
    assert read_ids(sink.config) == [*range(8), 1000, 1001, 2000, 2001]


def test_secrets_stay_out_of_logs_reprs_errors_and_committables(
    make_config: MakeConfig, s3_endpoint: S3Endpoint, caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    secret = s3_endpoint.secret_key
    with caplog.at_level(logging.DEBUG):
        sink = IcebergSink("lake", make_config())
        sink.validate(rows(0, 1).schema)
        committables = pre_commit(sink, 1, [rows(0, 4)])
        assert sink.commit_checkpoint(1, committables) is CommitOutcome.COMMITTED
        broken = IcebergSink(
            "lake",
            make_config(
                catalog_uri="postgresql+psycopg://nobody@127.0.0.1:1/none", catalog_password="pw-secret-1"
            ),
        )
        with pytest.raises(Exception) as failure:
            broken.validate(rows(0, 1).schema)
    shown = caplog.text + repr(sink) + repr(broken) + str(failure.value) + repr(failure.value)
    shown += "".join(CODEC.dumps(c) for c in committables)
    assert secret not in shown and "pw-secret-1" not in shown
    assert "\n" not in str(failure.value)


def test_the_postgresql_catalog(postgres: PostgresServer, make_config: MakeConfig) -> None:
    endpoint = postgres.endpoint
    config = make_config(
        catalog_uri=f"postgresql+psycopg://{endpoint.user}@{endpoint.host}:{endpoint.port}/{endpoint.dbname}",
        catalog_password=endpoint.password,
        catalog_name="pg_it",
    )
    assert endpoint.password not in repr(config)
    sink = IcebergSink("lake", config)
    sink.validate(rows(0, 1).schema)
    first = pre_commit(sink, 1, [rows(0, 10), rows(10, 10)])
    assert read_ids(config) == []
    assert sink.commit_checkpoint(1, first) is CommitOutcome.COMMITTED
    assert IcebergSink("lake", config).commit_checkpoint(1, first) is CommitOutcome.ALREADY_COMMITTED
    assert read_ids(config) == list(range(20))
    assert sink.last_committed_checkpoint(JOB) == 1


def test_the_driver_keeps_one_catalog_reconnects_after_a_restart_and_fails_by_name_when_down(
    postgres: PostgresServer, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink's driver calls share one opened catalog (one SQL engine), as Flink's committer keeps
    its table loader: a restarted catalog database is reconnected under it, a stopped one raises
    ServiceUnavailableError as an unopened one does, a closed sink opens a new one, and the sink
    still pickles to executors without it."""
    import pyiceberg.catalog

    endpoint = postgres.endpoint
    config = make_config(
        catalog_uri=f"postgresql+psycopg://{endpoint.user}@{endpoint.host}:{endpoint.port}/{endpoint.dbname}",
        catalog_password=endpoint.password,
        catalog_name="pg_kept",
        connect_attempts=1,
    )
    sink = IcebergSink("kept", config)
    sink.validate(rows(0, 1).schema)
    first = pre_commit(sink, 1, [rows(0, 10)])
    second = pre_commit(sink, 2, [rows(10, 10)])
    third = pre_commit(sink, 3, [rows(20, 10)])
    opened: list[object] = []
    real = pyiceberg.catalog.load_catalog

    def counted(name: str | None = None, **properties: Any) -> Any:
        opened.append(name)
        return real(name, **properties)

    monkeypatch.setattr(pyiceberg.catalog, "load_catalog", counted)
    assert sink.commit_checkpoint(1, first) is CommitOutcome.COMMITTED
    assert sink.last_committed_checkpoint(JOB) == 1
    postgres.restart()
    assert sink.commit_checkpoint(2, second) is CommitOutcome.COMMITTED
    assert opened == [], "the kept catalog (validate's) served every driver call, across the restart"
    postgres.stop()
    try:
        with pytest.raises(ServiceUnavailableError, match="cannot open Iceberg catalog"):
            sink.last_committed_checkpoint(JOB)
    finally:
        postgres.start()
    assert sink.commit_checkpoint(3, third) is CommitOutcome.COMMITTED
    assert len(opened) == 2  # the failed open, then the one after the start
    sink.close()
    assert sink.last_committed_checkpoint(JOB) == 3
    assert len(opened) == 3
    assert pickle.loads(pickle.dumps(sink)).last_committed_checkpoint(JOB) == 3
    assert read_ids(config) == list(range(30))
    sink.close()
