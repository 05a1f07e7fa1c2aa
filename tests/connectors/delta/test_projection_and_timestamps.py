"""The Delta sink's column projection (``DeltaSinkConfig.columns``) and zoned timestamps as Spark labels
them (session time zone), on local tables read back with delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
from twophase.connectors.delta.internal.schema import writable_arrow_type
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import ConfigError, RecordError, SchemaError
from twophase.sinks.outcome import CommitOutcome

JOB = "job-1"
Sink = Callable[..., DeltaSink]
NEW_YORK = ZoneInfo("America/New_York")

# Instants around New York's DST change (2024-03-10 02:00 local → 03:00), where a wrong
# zone handling would be off by an hour or more.
INSTANTS = [
    dt.datetime(2024, 3, 10, 6, 59, 59, 999_999, tzinfo=dt.timezone.utc),
    dt.datetime(2024, 3, 10, 7, 0, tzinfo=dt.timezone.utc),
    dt.datetime(2024, 3, 10, 1, 30, tzinfo=NEW_YORK).astimezone(dt.timezone.utc),
    dt.datetime(1969, 12, 31, 23, 59, 59, 123_456, tzinfo=dt.timezone.utc),
]


def shared_batch(ids: list[int]) -> pa.RecordBatch:
    """A batch as a job would hand every sink: typed columns plus columns for other sinks."""
    return pa.record_batch(
        {
            "key": pa.array([str(i).encode() for i in ids], pa.binary()),
            "value": pa.array([json.dumps({"id": i}) for i in ids]),
            "id": pa.array(ids, pa.int64()),
            "country": pa.array(["fr" if i % 2 else "de" for i in ids]),
            "unsigned": pa.array(ids, pa.uint64()),  # no Delta type: must be ignored, not refused
            "amount": pa.array([i * 1.5 for i in ids], pa.float64()),
        }
    )


def table_rows(path: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(path).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def delta_types(path: str) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in json.loads(DeltaTable(path).schema().to_json())["fields"]}


# --- configuration -------------------------------------------------------------------------------


def test_columns_config_is_normalised_and_validated() -> None:
    c = DeltaSinkConfig("/t", partition_by=("b",), columns=["a", "b"])  # type: ignore[arg-type]
    assert c.columns == ("a", "b")
    assert DeltaSinkConfig("/t").columns is None
    for columns, message in [
        ((), "at least one column"),
        (("a", "b", "a"), r"repeats \['a'\]"),
        (("a", ""), "empty or non-string"),
        ("abc", "sequence of column names"),
    ]:
        with pytest.raises(ConfigError, match=message):
            DeltaSinkConfig("/t", columns=columns)  # type: ignore[arg-type]


def test_partition_column_outside_the_projection_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"partition_by \['country'\] are not among columns \['id'\]"):
        DeltaSinkConfig("/t", partition_by=("country",), columns=("id",))


# --- projection ------------------------------------------------------------------------------------


def test_only_the_projected_columns_are_written_in_their_order(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink(columns=("amount", "id", "country"), partition_by=("country",))
    sink.validate(shared_batch([1]).schema)  # the uint64 column it ignores would be refused
    comms = write_checkpoint(sink, 1, [[shared_batch([1, 2, 3])], [shared_batch([4, 5])]])
    assert sink.commit_checkpoint(1, comms) is CommitOutcome.COMMITTED
    assert list(delta_types(table_path)) == ["amount", "id", "country"]
    assert table_rows(table_path) == [
        {"amount": i * 1.5, "id": i, "country": "fr" if i % 2 else "de"} for i in [1, 2, 3, 4, 5]
    ]
    # a second checkpoint with the same projection fits the table it created
    sink.validate(shared_batch([1]).schema)


def test_missing_projected_column_is_refused_before_anything_is_written(
    make_sink: Sink, table_path: str, files_under: Any
) -> None:
    sink = make_sink(columns=("id", "nope", "amount", "gone"))
    with pytest.raises(SchemaError, match=r"columns \['nope', 'gone'\] of the sink's projection"):
        sink.validate(shared_batch([1]).schema)
    txn = sink.begin_transaction(WriterContext(JOB, "delta", 1, 0, 0, 1))
    with pytest.raises(SchemaError, match=r"\['nope', 'gone'\]"):
        sink.write(txn, shared_batch([1, 2]))
    sink.abort_open(txn)
    assert txn.writer.created_paths == ()
    assert files_under(table_path) == set()
    assert not os.path.exists(os.path.join(table_path, "_delta_log"))


def test_projection_is_checked_per_batch(make_sink: Sink) -> None:
    sink = make_sink(columns=("id", "amount"))
    txn = sink.begin_transaction(WriterContext(JOB, "delta", 1, 0, 0, 1))
    sink.write(txn, shared_batch([1]))
    with pytest.raises(SchemaError, match=r"\['amount'\]"):
        sink.write(txn, shared_batch([2]).drop_columns(["amount"]))
    sink.abort_open(txn)
    assert not any(os.path.exists(os.path.join(sink.config.table_uri, p)) for p in txn.writer.created_paths)


# --- zoned timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", ["UTC", "Etc/UTC", "America/New_York", "+05:30"])
def test_every_zoned_timestamp_is_written_as_utc_microseconds(unit: str, tz: str) -> None:
    assert writable_arrow_type(pa.timestamp(unit, tz), "t") == pa.timestamp("us", "UTC")
    assert writable_arrow_type(pa.timestamp(unit), "t") == pa.timestamp("us")
    nested = pa.struct([("at", pa.timestamp(unit, tz))])
    assert writable_arrow_type(nested, "s") == pa.struct([("at", pa.timestamp("us", "UTC"))])


def zoned_batch(tz: str, unit: str = "us") -> pa.RecordBatch:
    per_unit = {"us": 1, "ns": 1_000}[unit]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    micros = [(t - epoch) // dt.timedelta(microseconds=1) for t in INSTANTS]
    return pa.record_batch(
        {
            "id": pa.array(range(len(INSTANTS)), pa.int64()),
            "at": pa.array([m * per_unit for m in micros], pa.timestamp(unit, tz)),
            "local": pa.array([t.replace(tzinfo=None) for t in INSTANTS], pa.timestamp(unit)),
            "nested": pa.array(
                [{"at": m * per_unit} for m in micros], pa.struct([("at", pa.timestamp(unit, tz))])
            ),
        }
    )


@pytest.mark.parametrize(("tz", "unit"), [("Etc/UTC", "us"), ("America/New_York", "us"), ("Etc/UTC", "ns")])
def test_zoned_timestamps_read_back_as_the_same_instants(
    make_sink: Sink, write_checkpoint: Any, table_path: str, tz: str, unit: str
) -> None:
    sink = make_sink()
    data = zoned_batch(tz, unit)
    sink.validate(data.schema)
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[data]])) is CommitOutcome.COMMITTED
    types = delta_types(table_path)
    assert (types["at"], types["local"]) == ("timestamp", "timestamp_ntz")
    assert types["nested"]["fields"][0]["type"] == "timestamp"
    rows = table_rows(table_path)
    assert [r["at"] for r in rows] == INSTANTS  # aware datetimes compare as instants
    assert all(r["at"].utcoffset() == dt.timedelta(0) for r in rows)
    assert [r["nested"]["at"] for r in rows] == INSTANTS
    assert [r["local"] for r in rows] == [t.replace(tzinfo=None) for t in INSTANTS]


def test_sessions_in_different_time_zones_append_to_one_timestamp_column(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink()
    utc, new_york = zoned_batch("Etc/UTC"), zoned_batch("America/New_York")
    sink.validate(utc.schema)
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[utc]])) is CommitOutcome.COMMITTED
    sink.validate(new_york.schema)  # no type clash: both are Delta `timestamp`
    assert sink.commit_checkpoint(2, write_checkpoint(sink, 2, [[new_york]])) is CommitOutcome.COMMITTED
    at = sorted(r["at"] for r in DeltaTable(table_path).to_pyarrow_table().to_pylist())
    assert at == sorted(INSTANTS * 2)


def test_zoned_timestamp_partition_values_are_utc(
    make_sink: Sink, write_checkpoint: Any, table_path: str
) -> None:
    sink = make_sink(partition_by=("at",))
    data = zoned_batch("America/New_York").select(["id", "at"])
    sink.validate(data.schema)
    assert sink.commit_checkpoint(1, write_checkpoint(sink, 1, [[data]])) is CommitOutcome.COMMITTED
    with open(Path(table_path) / "_delta_log" / f"{0:020d}.json") as f:
        adds = [json.loads(line)["add"] for line in f if '"add"' in line]
    values = sorted(a["partitionValues"]["at"] for a in adds)
    assert values == sorted(t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in INSTANTS)
    assert sorted(r["at"] for r in table_rows(table_path)) == sorted(INSTANTS)


def test_sub_microsecond_zoned_values_are_refused_not_truncated(make_sink: Sink) -> None:
    sink = make_sink()
    txn = sink.begin_transaction(WriterContext(JOB, "delta", 1, 0, 0, 1))
    sink.write(txn, pa.record_batch({"at": pa.array([1_000], pa.timestamp("ns", "America/New_York"))}))
    with pytest.raises(RecordError, match="would lose data"):
        sink.write(txn, pa.record_batch({"at": pa.array([1_001], pa.timestamp("ns", "America/New_York"))}))
    sink.abort_open(txn)
