"""The Delta sink end to end on local tables: write, pre-commit, commit per checkpoint, read back."""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import json
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import twophase.connectors.delta.internal.committer as committer_module
from twophase.connectors.delta import DeltaCommittable, DeltaSink
from twophase.connectors.delta.config import CHECKPOINT_INTERVAL, checkpoint_interval
from twophase.connectors.delta.internal import lingering
from twophase.connectors.delta.internal.committable import CODEC
from twophase.connectors.delta.internal.lingering import load_table as real_load
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError, RecordError, SchemaError
from twophase.sinks.internal import sweep
from twophase.sinks.outcome import CommitOutcome

JOB = "job-1"
UTC = dt.timezone.utc

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("ts", pa.timestamp("us", "UTC")),
        ("country", pa.string()),
    ]
)


def batch(ids: list[int], country: str | None = "fr") -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(ids, pa.int64()),
            pa.array([None if i % 5 == 0 else f"näme-{i}-日本" for i in ids]),
            pa.array([None if i % 7 == 0 else decimal.Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
            pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=i * 1001) for i in ids],
                pa.timestamp("us", "UTC"),
            ),
            pa.array([country] * len(ids), pa.string()),
        ],
        schema=SCHEMA,
    )


def expected_rows(ids: list[int], country: str | None = "fr") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pa.Table.from_batches([batch(ids, country)]).to_pylist()
    return rows


def read_rows(path: str) -> list[dict[str, Any]]:
    table = DeltaTable(path).to_pyarrow_table()
    rows = table.select(SCHEMA.names).to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def log_actions(path: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


Sink = Callable[..., DeltaSink]


def test_one_commit_per_checkpoint_with_all_subtasks_and_txn(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink(partition_by=("country",))
    sink.validate(SCHEMA)
    comms = write_checkpoint(
        sink, 1, [[batch([1, 2, 3]), batch([4, 5], "de")], [batch([6, 7], None), batch([8], "a b:c/é")], []]
    )
    assert [c.partition for c in comms] == [0, 1]  # the empty third subtask yields no committable
    assert not DeltaTable.is_deltatable(table_path)  # files exist but are no table yet

    assert sink.commit_checkpoint(1, comms) is CommitOutcome.COMMITTED

    t = DeltaTable(table_path)
    assert t.version() == 0
    assert t.transaction_version("job-1:delta") == 1
    assert t.metadata().partition_columns == ["country"]
    want = expected_rows([1, 2, 3]) + expected_rows([4, 5], "de") + expected_rows([6, 7], None)
    want += expected_rows([8], "a b:c/é")
    assert read_rows(table_path) == sorted(want, key=lambda r: r["id"])
    actions = log_actions(table_path, 0)
    txns = [a["txn"] for a in actions if "txn" in a]
    assert [(x["appId"], x["version"]) for x in txns] == [("job-1:delta", 1)]
    adds = [a["add"] for a in actions if "add" in a]
    assert len(adds) == 4
    by_country = {a["partitionValues"]["country"]: a for a in adds}
    assert set(by_country) == {"fr", "de", None, "a b:c/é"}
    assert by_country["a b:c/é"]["path"].startswith("country=a%20b%253Ac%252F%C3%A9/part-00001-1-")
    assert by_country[None]["path"].startswith("country=__HIVE_DEFAULT_PARTITION__/part-00001-1-")
    stats = json.loads(by_country["fr"]["stats"])
    assert stats["numRecords"] == 3
    assert stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 3
    assert stats["nullCount"] == {"id": 0, "name": 0, "amount": 0, "ts": 0}
    assert "country" not in stats["minValues"]  # partition columns are not in the files


def test_committables_round_trip_through_the_codec(make_sink: Sink, write_checkpoint: Any) -> None:
    sink = make_sink(partition_by=("country",))
    comms = write_checkpoint(sink, 3, [[batch([1, 2]), batch([3], None)]])
    for c in comms:
        payload = json.loads(json.dumps(sink.encode(c)))
        assert payload["kind"] == "delta.add_files" and payload["version"] == 1
        assert sink.decode(payload) == c
        assert CODEC.loads(CODEC.dumps(c)) == c


def test_committing_a_checkpoint_twice_is_one_version(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink()
    comms = write_checkpoint(sink, 1, [[batch([1, 2])], [batch([3])]])
    assert sink.commit_checkpoint(1, comms) is CommitOutcome.COMMITTED
    # a recovery in another process: a fresh sink with the decoded committables
    again = make_sink()
    decoded = [again.decode(json.loads(json.dumps(sink.encode(c)))) for c in comms]
    assert again.recover_and_commit_checkpoint(1, decoded) is CommitOutcome.ALREADY_COMMITTED
    assert DeltaTable(table_path).version() == 0
    comms2 = write_checkpoint(sink, 2, [[batch([4])], [batch([5])]])
    assert sink.commit_checkpoint(2, comms2) is CommitOutcome.COMMITTED
    assert sink.commit_checkpoint(2, comms2) is CommitOutcome.ALREADY_COMMITTED
    assert sink.commit_checkpoint(1, comms) is CommitOutcome.ALREADY_COMMITTED
    t = DeltaTable(table_path)
    assert t.version() == 1 and t.transaction_version("job-1:delta") == 2
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3, 4, 5]
    assert len(t.history()) == 2


def test_concurrent_append_between_reload_and_commit_is_retried(
    make_sink: Sink, write_checkpoint: Any, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make_sink()
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])]])) is CommitOutcome.COMMITTED
    comms = write_checkpoint(sink, 2, [[batch([2])], [batch([3])]])
    loads = []

    def load_then_someone_appends(config: Any) -> DeltaTable | None:
        table = real_load(config)
        loads.append(table)
        if len(loads) == 1:  # another writer commits after our reload, before our commit
            write_deltalake(table_path, pa.Table.from_batches([batch([100])]), mode="append")
        return table

    monkeypatch.setattr(committer_module, "load_table", load_then_someone_appends)
    assert sink.commit_checkpoint(2, comms) is CommitOutcome.COMMITTED
    assert len(loads) == 2
    t = DeltaTable(table_path)
    assert t.version() == 2 and t.transaction_version("job-1:delta") == 2
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3, 100]


def test_same_checkpoint_committed_concurrently_by_another_process(
    make_sink: Sink, write_checkpoint: Any, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make_sink()
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])]])) is CommitOutcome.COMMITTED
    comms = write_checkpoint(sink, 2, [[batch([2])], [batch([3])]])
    calls = []

    def load_then_twin_commits(config: Any) -> DeltaTable | None:
        table = real_load(config)
        calls.append(1)
        if len(calls) == 1:
            monkeypatch.setattr(committer_module, "load_table", real_load)
            assert make_sink().commit_checkpoint(2, comms) is CommitOutcome.COMMITTED
            monkeypatch.setattr(committer_module, "load_table", load_then_twin_commits)
        return table

    monkeypatch.setattr(committer_module, "load_table", load_then_twin_commits)
    assert sink.commit_checkpoint(2, comms) is CommitOutcome.ALREADY_COMMITTED
    assert DeltaTable(table_path).version() == 1
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3]


def test_the_committer_keeps_its_table_and_reads_only_newer_log_entries(
    make_sink: Sink, write_checkpoint: Any, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # loading the whole table at every commit made commits grow with the table (the soak, #29)
    sink = make_sink()
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])]])) is CommitOutcome.COMMITTED
    loads: list[int] = []

    def counted(config: Any) -> DeltaTable | None:
        loads.append(1)
        return real_load(config)

    monkeypatch.setattr(committer_module, "load_table", counted)
    for c in (2, 3):
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED
    # another process commits checkpoint 4; the kept table sees its txn when brought up to date
    comms = write_checkpoint(sink, 4, [[batch([4])]])
    assert make_sink().commit_checkpoint(4, comms) is CommitOutcome.COMMITTED
    assert sink.commit_checkpoint(4, comms) is CommitOutcome.ALREADY_COMMITTED
    assert len(loads) == 2  # the kept table's first load, and the other process's sink
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3, 4]
    # executors get the sink without the driver's committer and its table
    clone = pickle.loads(pickle.dumps(sink))
    assert clone.config == sink.config and clone._committer is None


def test_table_created_on_first_commit_with_the_data_schema(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink(partition_by=("country",), table_name="orders")
    comms = write_checkpoint(sink, 7, [[batch([1])]])
    assert sink.commit_checkpoint(7, comms) is CommitOutcome.COMMITTED
    t = DeltaTable(table_path)
    fields = {f["name"]: f["type"] for f in json.loads(t.schema().to_json())["fields"]}
    assert fields == {
        "id": "long",
        "name": "string",
        "amount": "decimal(12,2)",
        "ts": "timestamp",
        "country": "string",
    }
    assert t.metadata().name == "orders"
    assert [h["operation"] for h in t.history()] == ["CREATE TABLE"]


def test_schema_mismatch_refused_before_any_file_is_written(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any
) -> None:
    sink = make_sink()
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])]])) is CommitOutcome.COMMITTED
    before = files_under(table_path)
    clash = pa.schema([("id", pa.string()), ("name", pa.string())])
    with pytest.raises(SchemaError, match=r"'id': table long, data string"):
        sink.validate(clash)
    extra = SCHEMA.append(pa.field("extra", pa.int32()))
    with pytest.raises(SchemaError, match=r"\['extra'\] are not in the Delta table"):
        sink.validate(extra)
    with pytest.raises(SchemaError, match="partitioned by"):
        make_sink(partition_by=("country",)).validate(SCHEMA)
    assert files_under(table_path) == before
    assert DeltaTable(table_path).version() == 0


def test_bad_schemas_refused_by_validate(make_sink: Sink, table_path: str, files_under: Any) -> None:
    with pytest.raises(SchemaError, match="partition column 'nope'"):
        make_sink(partition_by=("nope",)).validate(SCHEMA)
    with pytest.raises(SchemaError, match="unsigned"):
        make_sink().validate(pa.schema([("u", pa.uint32())]))
    with pytest.raises(SchemaError, match="no Delta equivalent"):
        make_sink().validate(pa.schema([("t", pa.time64("us"))]))
    with pytest.raises(SchemaError, match="cannot partition"):
        make_sink(partition_by=("b",)).validate(pa.schema([("b", pa.binary()), ("x", pa.int64())]))
    assert files_under(table_path) == set()


def test_merge_schema_adds_nullable_columns(make_sink: Sink, write_checkpoint: Any, table_path: str) -> None:
    sink = make_sink()
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])]])) is CommitOutcome.COMMITTED
    merging = make_sink(merge_schema=True)
    wider = pa.Table.from_batches([batch([2])]).append_column("note", pa.array(["n"]))
    merging.validate(wider.schema)
    comms = write_checkpoint(merging, 2, [wider.to_batches()])
    assert merging.commit_checkpoint(2, comms) is CommitOutcome.COMMITTED
    rows = DeltaTable(table_path).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["note"]) for r in rows) == [(1, None), (2, "n")]


def test_batch_with_another_schema_is_refused(make_sink: Sink) -> None:
    sink = make_sink()
    txn = sink.begin_transaction(WriterContext(JOB, "delta", 1, 0, 0, 1))
    sink.write(txn, batch([1]))
    with pytest.raises(SchemaError, match="unlike the first batch"):
        sink.write(txn, pa.record_batch({"id": pa.array(["x"])}))
    sink.abort_open(txn)
    assert txn.writer.created_paths and not any(
        os.path.exists(os.path.join(sink.config.table_uri, p)) for p in txn.writer.created_paths
    )


def test_nanosecond_timestamps_that_lose_precision_are_a_record_error(make_sink: Sink) -> None:
    sink = make_sink()
    txn = sink.begin_transaction(WriterContext(JOB, "delta", 1, 0, 0, 1))
    ok = pa.record_batch({"ts": pa.array([1_000, 2_000], pa.timestamp("ns", "UTC"))})
    sink.write(txn, ok)
    with pytest.raises(RecordError, match="batch 2 of partition 0"):
        sink.write(txn, pa.record_batch({"ts": pa.array([1_001], pa.timestamp("ns", "UTC"))}))
    sink.abort_open(txn)


def test_unwritable_path_is_a_config_error_and_nothing_is_committed(
    tmp_path: Path, make_sink: Sink, write_checkpoint: Any
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as root: permissions are not enforced")
        sink = make_sink(table_uri=str(locked / "table"))
        with pytest.raises(ConfigError, match="cannot be created"):
            sink.validate(SCHEMA)
        with pytest.raises(ConfigError, match="not writable"):
            write_checkpoint(sink, 1, [[batch([1])]])
        assert not DeltaTable.is_deltatable(str(locked / "table"))
    finally:
        locked.chmod(0o700)


def test_table_root_under_a_file_is_a_config_error(
    tmp_path: Path, make_sink: Sink, write_checkpoint: Any
) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    sink = make_sink(table_uri=str(blocker / "table"))
    with pytest.raises(ConfigError, match="cannot be created"):
        sink.validate(SCHEMA)
    with pytest.raises(ConfigError, match="not writable"):
        write_checkpoint(sink, 1, [[batch([1])]])
    assert blocker.read_text() == "not a directory"


def test_missing_data_file_is_lost_and_nothing_committed(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink()
    comms = write_checkpoint(sink, 1, [[batch([1])], [batch([2])]])
    os.remove(os.path.join(table_path, comms[1].adds[0].path))
    assert sink.commit_checkpoint(1, comms) is CommitOutcome.LOST
    assert not DeltaTable.is_deltatable(table_path)


def test_per_committable_commit_refused_for_several_partitions(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink()
    comms = write_checkpoint(sink, 1, [[batch([1])], [batch([2])]])
    assert sink.commit(comms[0]) is CommitOutcome.FATAL
    assert not DeltaTable.is_deltatable(table_path)
    single = write_checkpoint(sink, 2, [[batch([3])]])
    assert sink.commit(single[0]) is CommitOutcome.COMMITTED
    assert [r["id"] for r in read_rows(table_path)] == [3]


def test_inconsistent_committables_are_fatal(make_sink: Sink, write_checkpoint: Any, table_path: str) -> None:
    sink = make_sink()
    one = write_checkpoint(sink, 1, [[batch([1])]])
    two = write_checkpoint(sink, 2, [[batch([2])]])
    assert sink.commit_checkpoint(2, one + two) is CommitOutcome.FATAL
    assert sink.commit_checkpoint(1, one + one) is CommitOutcome.FATAL
    assert not DeltaTable.is_deltatable(table_path)
    assert sink.commit_checkpoint(1, []) is CommitOutcome.COMMITTED


def test_files_roll_at_the_target_size(make_sink: Sink, write_checkpoint: Any, table_path: str) -> None:
    sink = make_sink(target_file_size_bytes=1, row_group_rows=2, compression="zstd")
    comms = write_checkpoint(sink, 1, [[batch([1, 2]), batch([3, 4]), batch([5])]])
    assert len(comms[0].adds) == 3
    assert [json.loads(a.stats)["numRecords"] for a in comms[0].adds] == [2, 2, 1]
    assert sink.commit_checkpoint(1, comms) is CommitOutcome.COMMITTED
    assert read_rows(table_path) == expected_rows([1, 2, 3, 4, 5])


def test_empty_transaction_yields_no_committable_and_no_file(
    make_sink: Sink, table_path: str, files_under: Any
) -> None:
    sink = make_sink()
    txn = sink.begin_transaction(WriterContext(JOB, "delta", 1, 0, 0, 1))
    sink.write(txn, batch([]))
    assert sink.pre_commit(txn) is None
    assert files_under(table_path) == set()


def test_abort_deletes_files_unless_committed(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any
) -> None:
    sink = make_sink()
    committed = write_checkpoint(sink, 1, [[batch([1])]])
    assert sink.commit_checkpoint(1, committed) is CommitOutcome.COMMITTED
    sink.abort(committed[0])  # referenced by a commit: kept
    aborted = write_checkpoint(sink, 2, [[batch([2])]])
    sink.abort(aborted[0])
    sink.abort(aborted[0])  # idempotent
    assert files_under(table_path) == {committed[0].adds[0].path}
    assert [r["id"] for r in read_rows(table_path)] == [1]


def test_abort_batch_reads_the_table_once_and_deletes_only_unreferenced_files(
    make_sink: Sink,
    write_checkpoint: Any,
    table_path: str,
    files_under: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An aborted checkpoint of many subtasks is one ``abort_batch`` per sink: Delta reads the
    table's log once for all of them, not once per committable (at 10⁴ subtasks the per-committable
    abort was still running after 6 minutes when stopped, issue #42), and keeps what a commit references."""
    import twophase.connectors.delta.sink as sink_module

    sink = make_sink()
    committed = write_checkpoint(sink, 1, [[batch([1])]])
    assert sink.commit_checkpoint(1, committed) is CommitOutcome.COMMITTED
    aborted = write_checkpoint(sink, 2, [[batch([2])], [batch([3])], [batch([4])]])
    loads: list[object] = []

    def counting_load(config: Any) -> Any:
        loads.append(config)
        return real_load(config)

    monkeypatch.setattr(sink_module, "load_table", counting_load)
    sink.abort_batch([*aborted, committed[0]])  # a committed one among them: kept
    assert len(loads) == 1
    assert files_under(table_path) == {committed[0].adds[0].path}
    sink.abort_batch(aborted)  # idempotent
    assert [r["id"] for r in read_rows(table_path)] == [1]


def test_abort_lingering_deletes_only_our_unreferenced_files(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any
) -> None:
    sink = make_sink(partition_by=("country",))
    # checkpoint 1: attempt 0 failed mid-way (files left), attempt 1 succeeded and was committed
    failed = write_checkpoint(sink, 1, [[batch([1])], [batch([2], "de")]], attempt=0)
    ok = write_checkpoint(sink, 1, [[batch([1])], [batch([2], "de")]], attempt=1)
    assert sink.commit_checkpoint(1, ok) is CommitOutcome.COMMITTED
    # checkpoint 2 never completed; 3 is held by a retained checkpoint; 9 is still being written
    never = write_checkpoint(sink, 2, [[batch([3])]])
    held = write_checkpoint(sink, 3, [[batch([4])]])
    running = write_checkpoint(sink, 9, [[batch([5])]])
    # another job's sink and another writer of the same table
    other_job = write_checkpoint(sink, 2, [[batch([6])]], job_id="job-2")
    write_deltalake(
        table_path, pa.Table.from_batches([batch([7], "fr")]), mode="append", partition_by=["country"]
    )
    foreign = {p for p in files_under(table_path) if "part-00000-" in p and "-c000" in p}
    assert len(foreign) == 1

    scope = LingeringScope[DeltaCommittable](JOB, "delta", held=tuple(held), up_to_checkpoint=8)
    assert sink.abort_lingering(scope) == 3
    remaining = files_under(table_path)

    def paths(comms: list[DeltaCommittable]) -> set[str]:
        return {a.path for c in comms for a in c.adds}

    assert not (remaining & (paths(failed) | paths(never)))
    assert {p for p in remaining if p.endswith(".parquet")} >= (
        {p.replace("%20", " ") for p in paths(ok)} | paths(held) | paths(running) | paths(other_job) | foreign
    )
    assert sink.abort_lingering(scope) == 0
    assert sorted(r["id"] for r in read_rows(table_path)) == [1, 2, 7]
    # once the retained checkpoint is gone and newer ones are in scope, they go too
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 2


def test_a_restored_drivers_cleanup_asks_the_tables_txn_once_however_many_files_optimize_removed(
    make_sink: Sink,
    write_checkpoint: Any,
    table_path: str,
    files_under: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The soak of 2026-12-03 (issue #44): after an hour of OPTIMIZE at Delta's default retention, a
    restored driver's cleanup took minutes per thousand files, asking delta-rs for the appId's txn
    version (a replay of the log each time) once per removed file. One table state has one txn."""
    sink = make_sink()
    for c in (1, 2, 3):
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])], [batch([10 * c])]])) is (
            CommitOutcome.COMMITTED
        )
    DeltaTable(table_path).optimize.compact()
    before = files_under(table_path)
    asked: list[str] = []
    real = DeltaTable.transaction_version

    def counted(self: DeltaTable, app_id: str) -> int | None:
        asked.append(app_id)
        return real(self, app_id)

    monkeypatch.setattr(DeltaTable, "transaction_version", counted)
    restored = make_sink()  # a new driver: nothing remembered of earlier cleanups
    assert restored.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 0
    assert files_under(table_path) == before
    assert len(asked) == 1
    assert sorted(r["id"] for r in read_rows(table_path)) == [1, 2, 3, 10, 20, 30]


def test_abort_lingering_before_the_table_exists(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any
) -> None:
    sink = make_sink()
    write_checkpoint(sink, 1, [[batch([1])], [batch([2])]])
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 2
    assert files_under(table_path) == set()


def test_lingering_after_log_mentions_checkpoint_of_other_commit(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    """Files of a skipped checkpoint (2 aborted, 3 committed) are unreferenced though txn ≥ 2."""
    sink = make_sink()
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])]])) is CommitOutcome.COMMITTED
    skipped = write_checkpoint(sink, 2, [[batch([2])]])
    assert sink.commit_checkpoint(3, write_checkpoint(sink, 3, [[batch([3])]])) is CommitOutcome.COMMITTED
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 1
    assert not os.path.exists(os.path.join(table_path, skipped[0].adds[0].path))
    assert [r["id"] for r in read_rows(table_path)] == [1, 3]
    assert len(glob.glob(os.path.join(table_path, "*.parquet"))) == 2


def test_two_committers_racing_to_create_the_table(
    make_sink: Sink, write_checkpoint: Any, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make_sink()
    comms = write_checkpoint(sink, 1, [[batch([1])], [batch([2])]])
    calls = []

    def no_table_yet_then_twin_creates(config: Any) -> DeltaTable | None:
        table = real_load(config)
        calls.append(table)
        if len(calls) == 1:
            assert table is None
            monkeypatch.setattr(committer_module, "load_table", real_load)
            assert make_sink().commit_checkpoint(1, comms) is CommitOutcome.COMMITTED
            monkeypatch.setattr(committer_module, "load_table", no_table_yet_then_twin_creates)
        return table

    monkeypatch.setattr(committer_module, "load_table", no_table_yet_then_twin_creates)
    assert sink.commit_checkpoint(1, comms) is CommitOutcome.ALREADY_COMMITTED
    assert len(calls) == 2
    assert DeltaTable(table_path).version() == 0
    assert [r["id"] for r in read_rows(table_path)] == [1, 2]


def test_the_sink_measures_records_and_bytes_of_a_committable(make_sink: Sink, write_checkpoint: Any) -> None:
    sink = make_sink()
    [c] = write_checkpoint(sink, 1, [[batch([1, 2, 3])]])
    size = sink.measure(c)
    assert size.records == 3 and size.bytes is not None
    assert size.bytes == sum(a.size for a in c.adds) and size.bytes > 0


def test_a_routine_cleanup_lists_the_table_only_as_often_as_its_size_allows(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29's soak: listing the table after every epoch made each epoch slower as the table grew.
    A routine cleanup lists again only after (our files at its last listing // ENTRIES_PER_EPOCH)
    epochs; a cleanup that is not routine always lists."""
    monkeypatch.setattr(sweep, "ENTRIES_PER_EPOCH", 2)
    sink = make_sink()
    committed = sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[batch([1])], [batch([2])]]))
    assert committed is CommitOutcome.COMMITTED
    routine = LingeringScope[DeltaCommittable](JOB, "delta", routine=True)
    assert sink.abort_lingering(routine) == 0  # listed 2 files: the next routine one is skipped

    def orphan(checkpoint_id: int) -> set[str]:  # a failed attempt's file of a checkpoint never committed
        committables = write_checkpoint(sink, checkpoint_id, [[batch([9])]], attempt=3)
        return {a.path for c in committables for a in c.adds}

    first = orphan(2)
    assert sink.abort_lingering(routine) == 0 and first <= files_under(table_path)  # put off
    assert sink.abort_lingering(routine) == 1 and not first & files_under(table_path)
    second = orphan(3)
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 1  # never put off
    assert not second & files_under(table_path)


def test_files_compacted_away_are_kept_and_decided_from_their_own_commit_once(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: after OPTIMIZE removed our committed files from the snapshot, the cleanup loaded the
    whole table at the version of each one's checkpoint, every time it listed. It reads that one
    commit's log entry instead, and remembers what it found referenced."""
    sink = make_sink()
    committed: list[DeltaCommittable] = []
    for checkpoint_id in (1, 2, 3):
        committables = write_checkpoint(sink, checkpoint_id, [[batch([checkpoint_id])]])
        assert sink.commit_checkpoint(checkpoint_id, committables) is CommitOutcome.COMMITTED
        committed += committables
    failed = write_checkpoint(sink, 2, [[batch([20])]], attempt=1)  # a failed attempt's file
    DeltaTable(table_path).optimize.compact()
    loaded: list[object] = []
    history_reads: list[object] = []
    real_init, real_history = DeltaTable.__init__, DeltaTable.history

    def counting_init(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        loaded.append(kwargs.get("version"))
        real_init(self, *args, **kwargs)

    def counting_history(self: DeltaTable, limit: int | None = None) -> list[dict[str, Any]]:
        history_reads.append(limit)
        return real_history(self, limit)

    monkeypatch.setattr(DeltaTable, "__init__", counting_init)
    monkeypatch.setattr(DeltaTable, "history", counting_history)

    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 1
    assert not {a.path for c in failed for a in c.adds} & files_under(table_path)
    assert {a.path for c in committed for a in c.adds} <= files_under(table_path)  # VACUUM's to delete
    assert loaded == [None] and history_reads == [64]  # the latest table only; one page of history
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3]
    assert sorted(DeltaTable(table_path, version=2).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]
    history_reads.clear()
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 0
    assert history_reads == []  # decided once


def test_a_file_whose_commit_left_the_log_is_kept_as_undecidable(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any
) -> None:
    """Once log cleanup deleted the log entry of a checkpoint's commit, its files outside the
    snapshot cannot be decided: they are kept (and the listing says so)."""
    sink = make_sink()
    for checkpoint_id in (1, 2):
        committables = write_checkpoint(sink, checkpoint_id, [[batch([checkpoint_id])]])
        assert sink.commit_checkpoint(checkpoint_id, committables) is CommitOutcome.COMMITTED
    failed = write_checkpoint(sink, 1, [[batch([10])]], attempt=1)
    DeltaTable(table_path).create_checkpoint()
    os.remove(os.path.join(table_path, "_delta_log", f"{0:020d}.json"))
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 0
    assert {a.path for c in failed for a in c.adds} <= files_under(table_path)
    assert [r["id"] for r in read_rows(table_path)] == [1, 2]


def test_the_history_is_read_only_as_deep_as_the_oldest_checkpoint_to_decide(
    make_sink: Sink, write_checkpoint: Any, table_path: str, files_under: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A skipped checkpoint's file is decided by the first older commit of ours; a file of an old
    checkpoint makes the reads go deeper, each twice as deep as the one before."""
    monkeypatch.setattr(lingering, "FIRST_HISTORY_PAGE", 2)
    sink = make_sink()
    for checkpoint_id in (1, 2, 3, 4, 6, 7):  # 5 was aborted
        committables = write_checkpoint(sink, checkpoint_id, [[batch([checkpoint_id])]])
        assert sink.commit_checkpoint(checkpoint_id, committables) is CommitOutcome.COMMITTED
    history_reads: list[int | None] = []
    real_history = DeltaTable.history

    def counting_history(self: DeltaTable, limit: int | None = None) -> list[dict[str, Any]]:
        history_reads.append(limit)
        return real_history(self, limit)

    monkeypatch.setattr(DeltaTable, "history", counting_history)
    skipped = write_checkpoint(sink, 5, [[batch([50])]], attempt=1)
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 1
    assert history_reads == [2, 4]  # versions 5, 4 (checkpoints 7, 6), then 3, 2 (4, 3): past 5
    assert not {a.path for c in skipped for a in c.adds} & files_under(table_path)
    history_reads.clear()
    oldest = write_checkpoint(sink, 1, [[batch([10])]], attempt=1)
    assert sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta")) == 1
    assert history_reads == [2, 4, 8]  # down to version 0, checkpoint 1's commit
    assert not {a.path for c in oldest for a in c.adds} & files_under(table_path)
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3, 4, 6, 7]


def _log_checkpoints(table_path: str) -> list[int]:
    return sorted(
        int(name.split(".")[0]) for name in os.listdir(f"{table_path}/_delta_log") if ".checkpoint." in name
    )


def test_the_committer_writes_a_log_checkpoint_every_ten_versions_as_delta_spark_does(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    # delta-rs checkpoints every 100 versions: the commit's log replay climbed 2 ms a commit (#44 soak)
    sink = make_sink()
    for c in range(1, 23):
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED
    assert _log_checkpoints(table_path) == [10, 20]
    assert json.loads(Path(table_path, "_delta_log", "_last_checkpoint").read_text())["version"] == 20
    assert [r["id"] for r in read_rows(table_path)] == list(range(1, 23))
    assert (
        DeltaTable(table_path).transaction_version(f"{JOB}:delta") == 22
    )  # the txn is in the checkpoint's state
    assert checkpoint_interval({}) == CHECKPOINT_INTERVAL == 10


def test_the_tables_own_checkpoint_interval_is_kept(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink(table_configuration={"delta.checkpointInterval": "4"})
    for c in range(1, 10):
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED
    assert _log_checkpoints(table_path) == [4, 8]
    with pytest.raises(ConfigError, match=r"delta\.checkpointInterval='0' must be a positive number"):
        make_sink(table_configuration={"delta.checkpointInterval": "0"})
    assert (
        checkpoint_interval({"delta.checkpointInterval": "x"}) == CHECKPOINT_INTERVAL
    )  # a table's, as unset


def test_a_commit_between_log_checkpoints_leaves_the_log_alone(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    # delta-rs's post-commit hook would list the whole log and clean it after every commit, a cost
    # that grew with the log in the soak (issue #44); the committer cleans only after its own
    # log checkpoints, as delta-spark does.
    sink = make_sink(table_configuration={"delta.logRetentionDuration": "interval 1 second"})
    for c in (1, 2, 3):  # versions 0, 1 and 2
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED
    DeltaTable(table_path).create_checkpoint()  # another writer's log checkpoint at 2, no cleanup
    time.sleep(1.5)  # versions 0 and 1 are now past the log's retention
    assert sink.commit_checkpoint(4, write_checkpoint(sink, 4, [[batch([4])]])) is CommitOutcome.COMMITTED
    assert Path(table_path, "_delta_log", f"{0:020d}.json").exists()  # not cleaned by a commit
    for c in range(5, 12):  # versions 4..10: the committer's log checkpoint at 10 cleans up
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED
    assert not Path(table_path, "_delta_log", f"{0:020d}.json").exists()
    assert [r["id"] for r in read_rows(table_path)] == list(range(1, 12))


def test_a_log_checkpoint_that_fails_leaves_the_commit_committed(
    make_sink: Sink, write_checkpoint: Any, table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make_sink(table_configuration={"delta.checkpointInterval": "2"})
    for c in (1, 2):  # versions 0 and 1
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED

    def refused(self: DeltaTable) -> None:
        raise OSError("storage refused the checkpoint")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", refused)
    assert sink.commit_checkpoint(3, write_checkpoint(sink, 3, [[batch([3])]])) is CommitOutcome.COMMITTED
    assert _log_checkpoints(table_path) == []
    monkeypatch.undo()
    for c in (4, 5):  # versions 3 and 4: the next multiple writes it
        assert sink.commit_checkpoint(c, write_checkpoint(sink, c, [[batch([c])]])) is CommitOutcome.COMMITTED
    assert _log_checkpoints(table_path) == [4]
    assert [r["id"] for r in read_rows(table_path)] == [1, 2, 3, 4, 5]
