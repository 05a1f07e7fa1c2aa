"""A restore's re-commit after snapshot expiry (issue #43): the checkpoint's own snapshot is gone,
its data files are still in the table.

Found by a review on a real pyiceberg SQL catalog: checkpoint 2 commits, its ``_committed`` marker
is refused, the driver dies; another writer appends and ``expire_snapshots`` keeps only the
current snapshot, so no snapshot summary of the job is left; the restore re-committed checkpoint
2 and its rows appeared twice, with nothing logged at WARNING or above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
import pytest

from twophase.connectors.iceberg import IcebergCommittable, IcebergSink, IcebergSinkConfig
from twophase.connectors.iceberg.internal.committable import CODEC
from twophase.connectors.iceberg.internal.naming import job_token
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome

from .conftest import rows
from .test_sink import JOB, ids, pre_commit, reader

PROPERTY = f"twophase.committed-checkpoint.{job_token(JOB, 'lake')}"
"""The table property recording the newest checkpoint job ``orders``, sink ``lake`` committed."""


def another_writer_appends_then_snapshots_expire(config: IcebergSinkConfig) -> None:
    """Another writer appends ids 100-101; then every snapshot but the current one is expired
    (pyiceberg 0.12's ``MaintenanceTable.expire_snapshots``)."""
    reader(config).append(pa.Table.from_batches([rows(100, 2)]))
    table = reader(config)
    current = table.current_snapshot()
    assert current is not None
    older = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current.snapshot_id]
    table.maintenance.expire_snapshots().by_ids(older).commit()
    assert [s.snapshot_id for s in reader(config).metadata.snapshots] == [current.snapshot_id]


def as_restored(committables: list[IcebergCommittable]) -> list[IcebergCommittable]:
    """The committables as a restore reads them back from checkpoint metadata."""
    return [CODEC.from_json(CODEC.to_json(c)) for c in committables]


def test_a_checkpoint_whose_snapshot_expired_is_already_committed(
    sink: IcebergSink, make_config: Callable[..., IcebergSinkConfig], caplog: pytest.LogCaptureFixture
) -> None:
    assert sink.commit_checkpoint(1, pre_commit(sink, 1, [rows(0, 10)])) is CommitOutcome.COMMITTED
    second = pre_commit(sink, 2, [rows(10, 5), rows(15, 5)])
    assert sink.commit_checkpoint(2, second) is CommitOutcome.COMMITTED
    # the marker was refused and the driver died; meanwhile the table is maintained
    another_writer_appends_then_snapshots_expire(sink.config)

    restarted = IcebergSink("lake", make_config())
    with caplog.at_level(logging.INFO):
        outcome = restarted.recover_and_commit_checkpoint(2, as_restored(second))
    assert (outcome, ids(sink.config)) == (CommitOutcome.ALREADY_COMMITTED, [*range(20), 100, 101])
    assert restarted.last_committed_checkpoint(JOB) == 2  # the restore's id floor
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_table_committed_by_the_previous_release_decides_from_its_data_files(
    sink: IcebergSink, make_config: Callable[..., IcebergSinkConfig], caplog: pytest.LogCaptureFixture
) -> None:
    """No committed-checkpoint property (the release before #43 wrote none): after expiry, the
    data file paths the table references decide, and the fallback says so at WARNING."""
    second = pre_commit(sink, 2, [rows(0, 6)])
    assert sink.commit_checkpoint(2, second) is CommitOutcome.COMMITTED
    table = reader(sink.config)
    key = PROPERTY
    assert table.properties[key] == "2"
    with table.transaction() as t:  # as the previous release left the table
        t.remove_properties(key)
    another_writer_appends_then_snapshots_expire(sink.config)

    restarted = IcebergSink("lake", make_config())
    with caplog.at_level(logging.WARNING):
        outcome = restarted.recover_and_commit_checkpoint(2, as_restored(second))
    assert (outcome, ids(sink.config)) == (CommitOutcome.ALREADY_COMMITTED, [*range(6), 100, 101])
    assert "no committed-checkpoint property" in caplog.text and key in caplog.text
    assert restarted.last_committed_checkpoint(JOB) == 2


def test_a_later_checkpoint_commits_and_records_itself_after_expiry(sink: IcebergSink) -> None:
    assert sink.commit_checkpoint(1, pre_commit(sink, 1, [rows(0, 3)])) is CommitOutcome.COMMITTED
    another_writer_appends_then_snapshots_expire(sink.config)
    assert sink.commit_checkpoint(2, pre_commit(sink, 2, [rows(3, 3)])) is CommitOutcome.COMMITTED
    assert reader(sink.config).properties[PROPERTY] == "2"
    assert ids(sink.config) == [*range(6), 100, 101]
    assert sink.last_committed_checkpoint(JOB) == 2


def test_a_property_edited_into_something_else_fails_the_commit_by_name(
    sink: IcebergSink, make_config: Callable[..., IcebergSinkConfig], caplog: pytest.LogCaptureFixture
) -> None:
    first = pre_commit(sink, 1, [rows(0, 2)])
    assert sink.commit_checkpoint(1, first) is CommitOutcome.COMMITTED
    with reader(sink.config).transaction() as t:
        t.set_properties({PROPERTY: "one"})
    second = pre_commit(sink, 2, [rows(2, 2)])
    with caplog.at_level(logging.ERROR):
        assert sink.commit_checkpoint(2, second) is CommitOutcome.FATAL
    assert f"{PROPERTY}='one' is not a checkpoint id" in caplog.text
    assert ids(sink.config) == [0, 1]
    with pytest.raises(ConfigError, match="set it back to that id"):
        IcebergSink("lake", make_config()).last_committed_checkpoint(JOB)
