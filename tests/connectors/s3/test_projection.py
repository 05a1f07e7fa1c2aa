"""The S3 sink's column projection (``S3SinkConfig.columns``) and zoned timestamps as Spark labels
them (session time zone), against the in-memory fake S3; files are read back with pyarrow."""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twophase.connectors.s3 import S3Sink, S3SinkConfig
from twophase.connectors.s3.internal.naming import parse_data_key
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import ConfigError, SchemaError
from twophase.sinks.outcome import CommitOutcome

MakeSink = Callable[..., S3Sink]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
INSTANTS = [
    dt.datetime(2024, 3, 10, 6, 59, 59, 999_999, tzinfo=dt.timezone.utc),
    dt.datetime(2024, 3, 10, 1, 30, tzinfo=ZoneInfo("America/New_York")).astimezone(dt.timezone.utc),
    dt.datetime(1969, 12, 31, 23, 59, 59, 123_456, tzinfo=dt.timezone.utc),
]


def ctx(checkpoint: int, partition: int = 0) -> WriterContext:
    return WriterContext("job-1", "out", checkpoint, partition, 0, 1)


def shared_batch(ids: list[int]) -> pa.RecordBatch:
    """A batch as a job would hand every sink: typed columns plus the Kafka sink's key/value."""
    return pa.record_batch(
        {
            "key": pa.array([str(i).encode() for i in ids], pa.binary()),
            "value": pa.array([json.dumps({"id": i}) for i in ids]),
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([i % 2 for i in ids], pa.int32()),
            "tags": pa.array([[i] for i in ids], pa.list_(pa.int64())),  # CSV could not hold it
            "name": pa.array([f"n{i}" for i in ids]),
        }
    )


def committed_files(fake: Any) -> dict[str, bytes]:
    """Partition path → bytes of every committed data file (one per path in these tests)."""
    out = {}
    for key in fake.object_keys():
        parsed = parse_data_key("data/out", key)
        assert parsed is not None
        out[parsed.partition_path] = fake.objects[("bucket", key)]
    return out


def write_and_commit(sink: S3Sink, batches: list[pa.RecordBatch]) -> None:
    sink.validate(batches[0].schema)
    txn = sink.begin_transaction(ctx(1))
    for b in batches:
        sink.write(txn, b)
    committable = sink.finish(txn)
    assert committable is not None
    assert sink.commit(committable) is CommitOutcome.COMMITTED


# --- configuration -------------------------------------------------------------------------------


def config(**fields: Any) -> S3SinkConfig:
    return S3SinkConfig(bucket="bucket", prefix="data", **fields)


def test_columns_config_is_normalised_and_validated() -> None:
    assert config(columns=["a", "b"]).columns == ("a", "b")
    assert config().columns is None
    for columns, message in [
        ((), "at least one column"),
        (("a", "b", "a"), r"repeats \['a'\]"),
        (("a", ""), "non-empty strings"),
        ("abc", "tuple of column names"),
    ]:
        with pytest.raises(ConfigError, match=message):
            config(columns=columns)


def test_partition_and_json_columns_must_be_in_the_projection() -> None:
    with pytest.raises(ConfigError, match=r"partition columns \['day'\] are not among columns \['id'\]"):
        config(columns=("id",), partition_by=("day",))
    with pytest.raises(ConfigError, match="json_column 'value' is not among columns"):
        config(columns=("id",), format="jsonl", json_column="value")


# --- projection ------------------------------------------------------------------------------------


def test_only_the_projected_columns_are_written_in_their_order(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(columns=("name", "id", "day"), partition_by=("day",))
    write_and_commit(sink, [shared_batch([1, 2, 3]), shared_batch([4])])
    got = {path: pq.read_table(io.BytesIO(data)) for path, data in committed_files(fake).items()}
    assert set(got) == {"day=0", "day=1"}
    for table in got.values():
        assert table.column_names == ["name", "id"]  # partition column in the path only
    assert got["day=1"].to_pylist() == [{"name": "n1", "id": 1}, {"name": "n3", "id": 3}]
    assert got["day=0"].to_pylist() == [{"name": "n2", "id": 2}, {"name": "n4", "id": 4}]


def test_projection_drops_columns_the_format_could_not_hold(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="csv", columns=("id", "name"))
    with pytest.raises(SchemaError, match="nested"):
        make_sink(format="csv").validate(shared_batch([1]).schema)  # without the projection
    write_and_commit(sink, [shared_batch([1, 2])])
    assert list(committed_files(fake).values()) == [b'"id","name"\n1,"n1"\n2,"n2"\n']


def test_json_column_with_projection(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(format="jsonl", json_column="value", columns=("value", "day"), partition_by=("day",))
    write_and_commit(sink, [shared_batch([1, 2, 3])])
    files = committed_files(fake)
    assert files == {"day=1": b'{"id": 1}\n{"id": 3}\n', "day=0": b'{"id": 2}\n'}


def test_missing_projected_column_is_refused_before_any_upload(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(columns=("id", "nope", "name", "gone"))
    with pytest.raises(SchemaError, match=r"columns \['nope', 'gone'\] of the sink's projection"):
        sink.validate(shared_batch([1]).schema)
    assert fake.calls == []  # not even the bucket check
    txn = sink.begin_transaction(ctx(1))
    with pytest.raises(SchemaError, match=r"\['nope', 'gone'\]"):
        sink.write(txn, shared_batch([1, 2]))
    sink.abort_open(txn)
    assert fake.calls == [] and fake.uploads == {} and fake.object_keys() == []


def test_later_batch_missing_a_projected_column_is_refused(fake: Any, make_sink: MakeSink) -> None:
    sink = make_sink(columns=("id", "name"))
    txn = sink.begin_transaction(ctx(1))
    sink.write(txn, shared_batch([1]))
    with pytest.raises(SchemaError, match=r"\['name'\]"):
        sink.write(txn, shared_batch([2]).drop_columns(["name"]))
    sink.abort_open(txn)
    assert fake.uploads == {} and fake.object_keys() == []


# --- zoned timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize("tz", ["Etc/UTC", "America/New_York"])
def test_zoned_timestamps_read_back_as_the_same_instants(fake: Any, make_sink: MakeSink, tz: str) -> None:
    micros = [(t - EPOCH) // dt.timedelta(microseconds=1) for t in INSTANTS]
    data = pa.record_batch(
        {
            "id": pa.array(range(len(INSTANTS)), pa.int64()),
            "at": pa.array(micros, pa.timestamp("us", tz)),
            "value": pa.array(["ignored"] * len(INSTANTS)),
        }
    )
    write_and_commit(make_sink(columns=("id", "at")), [data])
    [raw] = committed_files(fake).values()
    table = pq.read_table(io.BytesIO(raw))
    assert table.column_names == ["id", "at"]
    assert table.column("at").to_pylist() == INSTANTS  # aware datetimes compare as instants
