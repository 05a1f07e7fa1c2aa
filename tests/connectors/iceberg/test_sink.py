"""The Iceberg sink against a SQLite catalog and a local-filesystem warehouse: commit decisions,
abort, lingering cleanup, conflicts and bad configuration."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table, Transaction

from twophase.connectors.iceberg import IcebergCommittable, IcebergSink, IcebergSinkConfig
from twophase.connectors.iceberg.internal.committable import CODEC
from twophase.connectors.iceberg.internal.committer import SUMMARY_CHECKPOINT_ID, SUMMARY_JOB_ID, SUMMARY_SINK
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError, SchemaError
from twophase.sinks.outcome import CommitOutcome

from .conftest import rows

JOB = "orders"


def reader(config: IcebergSinkConfig) -> Table:
    """A fresh catalog and table load: a reader that is not the writer."""
    catalog = SqlCatalog("twophase", uri=f"sqlite:///{config.catalog_uri}", warehouse=config.warehouse or "")
    return catalog.load_table(config.identifier)


def ids(config: IcebergSinkConfig) -> list[int]:
    return sorted(reader(config).scan().to_arrow().column("id").to_pylist())


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


def test_files_are_invisible_until_the_commit_then_exact(sink: IcebergSink) -> None:
    committables = pre_commit(sink, 1, [rows(0, 10), rows(10, 10)])
    assert all(os.path.exists(f.path.removeprefix("file://")) for c in committables for f in c.files)
    assert ids(sink.config) == []
    assert sink.commit_checkpoint(1, committables) is CommitOutcome.COMMITTED
    assert ids(sink.config) == list(range(20))
    summary = reader(sink.config).current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None
    assert (summary[SUMMARY_JOB_ID], summary[SUMMARY_SINK], summary[SUMMARY_CHECKPOINT_ID]) == (
        JOB,
        "lake",
        "1",
    )
    assert sink.last_committed_checkpoint(JOB) == 1
    assert sink.last_committed_checkpoint("other-job") is None


def test_partitions_and_stats_reach_the_manifest(sink: IcebergSink) -> None:
    sink.commit_checkpoint(1, pre_commit(sink, 1, [rows(0, 12)]))
    table = reader(sink.config)
    files = list(table.scan().plan_files())
    assert len(files) == 6  # two regions x three days
    assert {str(f.file.partition[0]) for f in files} == {"eu", "us"}
    assert all(f.file.lower_bounds and f.file.value_counts for f in files)
    # partition pruning works on the recorded partition tuples
    eu = table.scan(row_filter="region == 'eu'").to_arrow()
    assert sorted(eu.column("id").to_pylist()) == list(range(1, 12, 2))


def test_commit_twice_and_an_older_checkpoint_are_already_committed(sink: IcebergSink) -> None:
    first = pre_commit(sink, 1, [rows(0, 5)])
    second = pre_commit(sink, 2, [rows(5, 5)])
    assert sink.commit_checkpoint(1, first) is CommitOutcome.COMMITTED
    assert sink.commit_checkpoint(1, first) is CommitOutcome.ALREADY_COMMITTED
    assert sink.commit_checkpoint(2, second) is CommitOutcome.COMMITTED
    assert sink.commit_checkpoint(1, first) is CommitOutcome.ALREADY_COMMITTED
    assert ids(sink.config) == list(range(10))
    assert len(reader(sink.config).metadata.snapshots) == 2


def test_recover_and_commit_from_the_json_in_a_new_sink_instance(
    sink: IcebergSink, make_config: Callable[..., IcebergSinkConfig]
) -> None:
    payloads = [CODEC.dumps(c) for c in pre_commit(sink, 3, [rows(0, 4), rows(4, 4)])]
    fresh = IcebergSink("lake", make_config())
    decoded = [fresh.decode(CODEC.to_json(CODEC.loads(p))) for p in payloads]
    assert fresh.recover_and_commit_checkpoint(3, decoded) is CommitOutcome.COMMITTED
    assert fresh.recover_and_commit_checkpoint(3, decoded) is CommitOutcome.ALREADY_COMMITTED
    assert ids(sink.config) == list(range(8))


def test_a_missing_data_file_is_lost_only_when_no_snapshot_records_it(sink: IcebergSink) -> None:
    committed = pre_commit(sink, 1, [rows(0, 3)])
    assert sink.commit_checkpoint(1, committed) is CommitOutcome.COMMITTED
    gone = pre_commit(sink, 2, [rows(3, 3)])
    os.remove(gone[0].files[0].path.removeprefix("file://"))
    assert sink.commit_checkpoint(2, gone) is CommitOutcome.LOST
    assert ids(sink.config) == [0, 1, 2]  # nothing of checkpoint 2 was committed


def test_per_committable_commit_is_refused_for_several_partitions(sink: IcebergSink) -> None:
    two = pre_commit(sink, 1, [rows(0, 2), rows(2, 2)])
    assert sink.commit(two[0]) is CommitOutcome.FATAL
    one = pre_commit(sink, 2, [rows(4, 2)])
    assert sink.commit(one[0]) is CommitOutcome.COMMITTED


def test_inconsistent_committables_are_fatal(sink: IcebergSink) -> None:
    c = pre_commit(sink, 1, [rows(0, 2)])
    assert sink.commit_checkpoint(2, c) is CommitOutcome.FATAL  # of another checkpoint
    assert sink.commit_checkpoint(1, [c[0], c[0]]) is CommitOutcome.FATAL  # one partition twice


def test_abort_deletes_the_files_and_never_committed_ones(sink: IcebergSink) -> None:
    committed = pre_commit(sink, 1, [rows(0, 3)])
    sink.commit_checkpoint(1, committed)
    aborted = pre_commit(sink, 2, [rows(3, 3)])
    sink.abort(aborted[0])
    sink.abort(aborted[0])  # idempotent
    assert not any(os.path.exists(f.path.removeprefix("file://")) for f in aborted[0].files)
    sink.abort(committed[0])  # referenced by a snapshot: kept
    assert all(os.path.exists(f.path.removeprefix("file://")) for f in committed[0].files)
    assert ids(sink.config) == [0, 1, 2]


def test_abort_batch_loads_the_table_once_and_keeps_what_a_snapshot_references(
    sink: IcebergSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An aborted checkpoint of many subtasks is one ``abort_batch``: the catalog is opened and the
    table's manifests read once for all its committables, not once per committable (issue #42)."""
    import twophase.connectors.iceberg.sink as sink_module

    committed = pre_commit(sink, 1, [rows(0, 3)])
    sink.commit_checkpoint(1, committed)
    aborted = pre_commit(sink, 2, [rows(3, 3), rows(6, 3), rows(9, 3)])
    loads: list[object] = []
    from twophase.connectors.iceberg.internal.catalog import load_table as real

    def counting(catalog: Any, config: Any) -> Any:
        loads.append(config)
        return real(catalog, config)

    monkeypatch.setattr(sink_module, "load_table", counting)
    sink.abort_batch([*aborted, committed[0]])
    assert len(loads) == 1
    assert not any(os.path.exists(f.path.removeprefix("file://")) for c in aborted for f in c.files)
    assert all(os.path.exists(f.path.removeprefix("file://")) for f in committed[0].files)
    sink.abort_batch(aborted)  # idempotent
    assert ids(sink.config) == [0, 1, 2]


def test_abort_open_deletes_what_the_attempt_wrote(sink: IcebergSink) -> None:
    txn = sink.begin_transaction(WriterContext(JOB, "lake", 1, 0, 0, 1))
    sink.write(txn, rows(0, 30))
    sink.abort_open(txn)
    prefix = sink.config.warehouse.removeprefix("file://")  # type: ignore[union-attr]
    assert [f for _, _, fs in os.walk(prefix) for f in fs if f.endswith(".parquet")] == []


def test_lingering_cleanup_deletes_a_dead_attempts_file_and_keeps_referenced_and_held_ones(
    sink: IcebergSink, make_config: Callable[..., IcebergSinkConfig]
) -> None:
    committed = pre_commit(sink, 1, [rows(0, 4)], attempt=1)
    dead = pre_commit(sink, 1, [rows(0, 4)], attempt=0)  # the failed attempt's files
    assert sink.commit_checkpoint(1, committed) is CommitOutcome.COMMITTED
    held = pre_commit(sink, 2, [rows(4, 4)])  # pre-committed, its checkpoint retained
    newer = pre_commit(sink, 3, [rows(8, 4)])  # beyond the scope: work still running
    patient = IcebergSink("lake", make_config(lingering_grace_ms=3_600_000))
    assert patient.abort_lingering(LingeringScope(JOB, "lake", held=tuple(held), up_to_checkpoint=2)) == 0
    deleted = sink.abort_lingering(LingeringScope(JOB, "lake", held=tuple(held), up_to_checkpoint=2))
    assert deleted == len(dead[0].files)

    def present(cs: list[IcebergCommittable]) -> bool:
        return all(os.path.exists(f.path.removeprefix("file://")) for c in cs for f in c.files)

    assert not any(os.path.exists(f.path.removeprefix("file://")) for f in dead[0].files)
    assert present(committed) and present(held) and present(newer)
    assert sink.abort_lingering(LingeringScope(JOB, "other", up_to_checkpoint=9)) == 0  # other sink
    assert ids(sink.config) == [0, 1, 2, 3]


def test_a_concurrent_foreign_append_is_retried_after_a_re_check(
    sink: IcebergSink, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ours = pre_commit(sink, 1, [rows(0, 5)])
    original = Transaction.commit_transaction
    raced: list[bool] = []

    def foreign_append_first(self: Transaction) -> Table:
        if not raced:  # another writer commits between our table load and our commit
            raced.append(True)
            reader(sink.config).append(pa.Table.from_batches([rows(100, 2)]))
        return original(self)

    monkeypatch.setattr(Transaction, "commit_transaction", foreign_append_first)
    with caplog.at_level(logging.INFO):
        assert sink.commit_checkpoint(1, ours) is CommitOutcome.COMMITTED
    assert raced and "commit conflict, reloading" in caplog.text
    assert "Commit failed due to a concurrent update" not in caplog.text  # no blind retry by pyiceberg
    assert ids(sink.config) == [0, 1, 2, 3, 4, 100, 101]
    assert sink.last_committed_checkpoint(JOB) == 1


def test_a_foreign_append_after_ours_does_not_hide_our_record(sink: IcebergSink) -> None:
    ours = pre_commit(sink, 1, [rows(0, 2)])
    assert sink.commit_checkpoint(1, ours) is CommitOutcome.COMMITTED
    reader(sink.config).append(pa.Table.from_batches([rows(50, 1)]))
    assert sink.commit_checkpoint(1, ours) is CommitOutcome.ALREADY_COMMITTED


def test_bad_configuration_fails_before_anything_is_written(
    sink: IcebergSink, make_config: Callable[..., IcebergSinkConfig]
) -> None:
    with pytest.raises(ConfigError, match="does not exist and create_table is off") as missing:
        IcebergSink("lake", make_config(table="db.nope", create_table=False)).validate(rows(0, 1).schema)
    with pytest.raises(SchemaError, match="columns not in the table: \\['extra'\\]") as mismatch:
        sink.validate(rows(0, 1).schema.append(pa.field("extra", pa.string())))
    with pytest.raises(SchemaError, match="type or nullability"):
        sink.validate(pa.schema([("id", pa.string()), ("region", pa.string())]))
    with pytest.raises(ConfigError, match="partitioned by") as spec:
        IcebergSink("lake", make_config(partition_by=("region",))).validate(rows(0, 1).schema)
    with pytest.raises(ConfigError, match="not in the data"):
        IcebergSink("lake", make_config(table="db.other", partition_by=("nope",))).validate(rows(0, 1).schema)
    for e in (missing, mismatch, spec):
        assert "\n" not in str(e.value)
    assert ids(sink.config) == []


def test_a_partition_transform_the_writer_cannot_compute_is_refused(
    sink: IcebergSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.transforms import DayTransform

    def unavailable(self: DayTransform[Any], source: object) -> None:
        raise ModuleNotFoundError("pyiceberg-core needed")

    monkeypatch.setattr(DayTransform, "pyarrow_transform", unavailable)
    with pytest.raises(ConfigError, match="cannot compute partition fields"):
        sink.validate(rows(0, 1).schema)


def test_the_projection_writes_only_the_named_columns(make_config: Callable[..., IcebergSinkConfig]) -> None:
    projected = IcebergSink("lake", make_config(columns=("id", "region"), partition_by=("region",)))
    wide = rows(0, 3)
    projected.validate(wide.schema)
    projected.commit_checkpoint(1, pre_commit(projected, 1, [wide]))
    assert reader(projected.config).scan().to_arrow().column_names == ["id", "region"]


def test_timestamps_in_a_session_zone_are_written_as_the_same_instants(sink: IcebergSink) -> None:
    utc = rows(0, 3)
    paris = utc.cast(utc.schema.set(2, pa.field("ts", pa.timestamp("us", "Europe/Paris"))))
    sink.validate(paris.schema)
    sink.commit_checkpoint(1, pre_commit(sink, 1, [paris]))
    back = reader(sink.config).scan().to_arrow().sort_by("id")
    assert back.column("ts").to_pylist() == utc.column(2).to_pylist()


def test_bucket_and_truncate_partitions_are_written_and_pruned(
    make_config: Callable[..., IcebergSinkConfig],
) -> None:
    bucketed = IcebergSink(
        "lake", make_config(table="db.bucketed", partition_by=("bucket[4](id)", "truncate[1](region)"))
    )
    bucketed.validate(rows(0, 1).schema)
    assert bucketed.commit_checkpoint(1, pre_commit(bucketed, 1, [rows(0, 40)])) is CommitOutcome.COMMITTED
    table = reader(bucketed.config)
    assert [str(f.transform) for f in table.spec().fields] == ["bucket[4]", "truncate[1]"]
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(40))
    assert sorted(table.scan(row_filter="id == 7").to_arrow().column("id").to_pylist()) == [7]


def test_many_small_batches_make_one_row_group_per_file(
    make_config: Callable[..., IcebergSinkConfig],
) -> None:
    import pyarrow.parquet as pq

    sink = IcebergSink("lake", make_config(partition_by=()))
    sink.validate(rows(0, 1).schema)
    txn = sink.begin_transaction(WriterContext(JOB, sink.name, 1, 0, 0, 1))
    for start in range(0, 2_000, 100):  # Spark hands batches over a few at a time
        sink.write(txn, rows(start, 100))
    committable = sink.pre_commit(txn)
    assert committable is not None and len(committable.files) == 1
    meta = pq.ParquetFile(committable.files[0].path.removeprefix("file://")).metadata
    assert (meta.num_rows, meta.num_row_groups) == (2_000, 1)
    assert sink.commit_checkpoint(1, [committable]) is CommitOutcome.COMMITTED
    assert ids(sink.config) == list(range(2_000))
