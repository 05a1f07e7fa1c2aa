"""A checkpoint re-committed after its ``txn`` expired, on real local delta-rs tables (issue #43).

The table sets ``delta.setTransactionRetentionDuration``; checkpoint 2 commits with a ``txn`` whose
``lastUpdated`` is already past it (the driver stayed down longer than the retention), so the
restart finds no txn version for the appId. OPTIMIZE then takes checkpoint 2's files out of the
snapshot (VACUUM deletes them; log cleanup deletes the log entry of its commit). The restore's
re-commit must answer from the table's own evidence: ALREADY_COMMITTED, or a FATAL that names the
table properties when the table no longer holds the evidence; never a second copy.

Rows are read back with pyarrow.dataset over the snapshot's file URIs, not with the writer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from twophase.connectors.delta import DeltaCommittable, DeltaSink
from twophase.sinks.outcome import CommitOutcome

JOB = "job-1"
APP_ID = f"{JOB}:delta"
RETENTION = {
    "delta.setTransactionRetentionDuration": "interval 1 hour",
    "delta.logRetentionDuration": "interval 0 seconds",  # log cleanup only when a test asks for it
}
TWO_HOURS_AGO_S = 2 * 3600

Sink = Callable[..., DeltaSink]


def ids_batch(ids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64())})


def read_ids(path: str) -> list[int]:
    """Every id of the table's current snapshot, read by pyarrow from the files themselves."""
    uris = DeltaTable(path).file_uris()
    ids: list[int] = ds.dataset(uris, format="parquet").to_table(columns=["id"]).column("id").to_pylist()
    return sorted(ids)


def commit_with_expired_txn(
    sink: DeltaSink, checkpoint_id: int, committables: list[DeltaCommittable]
) -> None:
    """Commit as if the driver then stayed down past the retention: the txn's lastUpdated is old."""
    past = time.time() - TWO_HOURS_AGO_S
    with mock.patch("time.time", return_value=past):
        assert sink.commit_checkpoint(checkpoint_id, committables) is CommitOutcome.COMMITTED


@pytest.fixture
def committed_two(make_sink: Sink, write_checkpoint: Any, table_path: str) -> list[DeltaCommittable]:
    """Checkpoints 1 and 2 committed, 2's txn expired, then OPTIMIZE; returns checkpoint 2's committables."""
    sink = make_sink(table_configuration=RETENTION)
    one = write_checkpoint(sink, 1, [[ids_batch([1, 2])], [ids_batch([3])]])
    assert sink.commit_checkpoint(1, one) is CommitOutcome.COMMITTED
    two: list[DeltaCommittable] = write_checkpoint(sink, 2, [[ids_batch([4, 5])], [ids_batch([6])]])
    commit_with_expired_txn(sink, 2, two)
    table = DeltaTable(table_path)
    assert table.transaction_version(APP_ID) is None  # expired: the txn alone cannot answer
    table.optimize.compact()
    assert read_ids(table_path) == [1, 2, 3, 4, 5, 6]
    return two


def test_recommit_after_txn_expired_and_optimize_is_already_committed(
    make_sink: Sink, committed_two: list[DeltaCommittable], table_path: str
) -> None:
    restarted = make_sink(table_configuration=RETENTION)  # a new driver: nothing in memory
    assert restarted.recover_and_commit_checkpoint(2, committed_two) is CommitOutcome.ALREADY_COMMITTED
    assert read_ids(table_path) == [1, 2, 3, 4, 5, 6]
    assert restarted.last_committed_checkpoint(JOB) == 2  # the id floor still sees checkpoint 2


def test_recommit_after_txn_expired_optimize_and_vacuum_is_not_lost(
    make_sink: Sink, committed_two: list[DeltaCommittable], table_path: str
) -> None:
    deleted = DeltaTable(table_path).vacuum(
        retention_hours=0, dry_run=False, enforce_retention_duration=False
    )
    assert any("-2-" in Path(f).name for f in deleted)  # checkpoint 2's files are gone
    restarted = make_sink(table_configuration=RETENTION)
    assert restarted.recover_and_commit_checkpoint(2, committed_two) is CommitOutcome.ALREADY_COMMITTED
    assert read_ids(table_path) == [1, 2, 3, 4, 5, 6]


def test_recommit_without_the_evidence_fails_by_name(
    make_sink: Sink, committed_two: list[DeltaCommittable], table_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    table = DeltaTable(table_path)
    table.create_checkpoint()
    table.cleanup_metadata()  # logRetentionDuration 0: the log entry of checkpoint 2's commit goes
    assert [h["operation"] for h in DeltaTable(table_path).history()] == ["OPTIMIZE"]
    restarted = make_sink(table_configuration=RETENTION)
    with caplog.at_level(logging.ERROR):
        assert restarted.recover_and_commit_checkpoint(2, committed_two) is CommitOutcome.FATAL
    named = [
        r.getMessage() for r in caplog.records if "delta.setTransactionRetentionDuration" in r.getMessage()
    ]
    assert len(named) == 1 and "delta.logRetentionDuration" in named[0], caplog.text
    assert read_ids(table_path) == [1, 2, 3, 4, 5, 6]


def test_a_new_checkpoint_after_txn_expired_commits(
    make_sink: Sink, write_checkpoint: Any, committed_two: list[DeltaCommittable], table_path: str
) -> None:
    restarted = make_sink(table_configuration=RETENTION)
    three = write_checkpoint(restarted, 3, [[ids_batch([7])]])
    assert restarted.commit_checkpoint(3, three) is CommitOutcome.COMMITTED
    assert read_ids(table_path) == [1, 2, 3, 4, 5, 6, 7]
    assert DeltaTable(table_path).transaction_version(APP_ID) == 3


def test_a_new_checkpoint_after_txn_expired_and_log_cleanup_commits(
    make_sink: Sink, write_checkpoint: Any, committed_two: list[DeltaCommittable], table_path: str
) -> None:
    table = DeltaTable(table_path)
    table.create_checkpoint()
    table.cleanup_metadata()
    restarted = make_sink(table_configuration=RETENTION)
    three = write_checkpoint(restarted, 3, [[ids_batch([7])]])  # written after the oldest readable commit
    with mock.patch("twophase.connectors.delta.internal.lingering.CLOCK_SKEW_ALLOWANCE_MS", 0):
        assert restarted.commit_checkpoint(3, three) is CommitOutcome.COMMITTED
    assert read_ids(table_path) == [1, 2, 3, 4, 5, 6, 7]


def test_validate_warns_of_a_txn_retention_by_name(
    make_sink: Sink, committed_two: list[DeltaCommittable], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        make_sink(table_configuration=RETENTION).validate(pa.schema([("id", pa.int64())]))
    named = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("delta.setTransactionRetentionDuration='interval 1 hour'" in line for line in named), named
