"""Arrow columns to Kafka keys, values and headers (no broker)."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pytest

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.internal import serializers as ser
from twophase.sinks.errors import RecordError, SchemaError


def config(**kw: object) -> KafkaSinkConfig:
    base: dict[str, object] = {"bootstrap_servers": "b:9092", "topic": "t"}
    base.update(kw)
    return KafkaSinkConfig(**base)  # type: ignore[arg-type]


def test_binary_and_string_pass_through_with_nulls_kept() -> None:
    assert ser.payloads(pa.array([b"a", None, b"\x00"]), "auto") == [b"a", None, b"\x00"]
    assert ser.payloads(pa.array(["é", None]), "string") == ["é", None]
    assert ser.payloads(pa.array([b"x"], type=pa.large_binary()), "bytes") == [b"x"]


def test_json_serializes_any_type_per_row() -> None:
    arr = pa.array([{"a": 1, "b": "x"}, None, {"a": 2, "b": None}])
    out = ser.payloads(arr, "json")
    assert out[1] is None
    assert [json.loads(v or b"") for v in (out[0], out[2])] == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert ser.to_json(datetime.date(2013, 1, 1)) == b'"2013-01-01"'
    assert ser.to_json("ü") == '"ü"'.encode()


def test_sizes_are_bytes_not_characters() -> None:
    arr = pa.array(["é", None, "abc"])
    assert ser.payload_sizes(arr, "string", ser.payloads(arr, "string")).to_pylist() == [2, 0, 3]
    j = pa.array([[1, 2]])
    assert ser.payload_sizes(j, "json", ser.payloads(j, "json")).to_pylist() == [5]


def test_headers_from_spark_shape_and_map() -> None:
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    arr = pa.array([[{"key": "a", "value": b"1"}], None, []], type=header_type)
    assert ser.headers(arr) == [[("a", b"1")], None, []]
    m = pa.array([[("k", b"v")]], type=pa.map_(pa.string(), pa.binary()))
    assert ser.headers(m) == [[("k", b"v")]]
    assert ser.header_sizes([[("k", b"vv")], None]) == [3, 0]


def test_schema_accepts_the_mapped_columns() -> None:
    schema = pa.schema(
        [
            ("key", pa.string()),
            ("value", pa.binary()),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
            ("part", pa.int32()),
            ("dest", pa.string()),
        ]
    )
    ser.check_schema(schema, config(headers_column="headers", partition_column="part", topic_column="dest"))
    ser.check_schema(pa.schema([("value", pa.binary())]), config(key_column=None))
    ser.check_schema(
        pa.schema([("key", pa.int64()), ("value", pa.int64())]),
        config(key_format="json", value_format="json"),
    )


@pytest.mark.parametrize(
    ("schema", "kw", "match"),
    [
        (pa.schema([("value", pa.binary())]), {}, "'key' not in the data"),
        (pa.schema([("key", pa.binary()), ("v", pa.binary())]), {}, "'value' not in the data"),
        (pa.schema([("key", pa.binary()), ("value", pa.int64())]), {}, "format 'auto'"),
        (
            pa.schema([("key", pa.binary()), ("value", pa.string())]),
            {"value_format": "bytes"},
            "format 'bytes'",
        ),
        (
            pa.schema([("key", pa.binary()), ("value", pa.binary())]),
            {"value_format": "string"},
            "format 'string'",
        ),
        (
            pa.schema([("key", pa.binary()), ("value", pa.binary()), ("p", pa.string())]),
            {"partition_column": "p"},
            "must be an int",
        ),
        (
            pa.schema([("key", pa.binary()), ("value", pa.binary()), ("h", pa.list_(pa.string()))]),
            {"headers_column": "h"},
            "headers column",
        ),
        (
            pa.schema([("key", pa.binary()), ("value", pa.binary()), ("d", pa.int8())]),
            {"topic_column": "d"},
            "must be a string",
        ),
    ],
)
def test_schema_errors_name_the_column(schema: pa.Schema, kw: dict[str, object], match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        ser.check_schema(schema, config(**kw))


def test_record_timestamps_are_ms_since_the_epoch_and_a_null_is_the_time_of_producing() -> None:
    at = pa.array([1_700_000_000_123_456, None], pa.timestamp("us", "UTC"))
    assert ser.timestamps_ms(at) == [1_700_000_000_123, 0]


def test_a_timestamp_before_1970_is_refused_naming_its_row() -> None:
    at = pa.array([0, -1_000], pa.timestamp("ms"))
    with pytest.raises(RecordError, match="row 1: a Kafka record's timestamp cannot precede 1970-01-01"):
        ser.timestamps_ms(at)
