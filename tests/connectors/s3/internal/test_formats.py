"""File encoders, schema checks and partition splitting (no S3)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from twophase.connectors.objectstore.internal.formats import OutputBuffer, open_encoder, validate_schema
from twophase.connectors.objectstore.internal.partitioning import split_by_partition
from twophase.connectors.s3 import S3SinkConfig
from twophase.sinks.errors import RecordError, SchemaError


def cfg(**fields: Any) -> S3SinkConfig:
    return S3SinkConfig(bucket="bucket", prefix="p", **fields)


def test_output_buffer_drains_front_and_counts_every_byte() -> None:
    out = OutputBuffer(initial=b"tail", position=100)
    assert out.tell() == 104 and len(out) == 4
    out.write(b"abcdef")
    out.write(memoryview(b"gh"))
    assert out.drain(3) == b"tai"
    assert out.tell() == 112 and len(out) == 9
    assert out.drain_all() == b"labcdefgh" and len(out) == 0 and out.tell() == 112


def test_parquet_encoder_output_reads_back_exactly() -> None:
    table = pa.table(
        {"a": [1, 2, None], "s": ["x", None, "zz"], "t": pa.array([0, 1, 2], pa.timestamp("us", "UTC"))}
    )
    out = OutputBuffer()
    enc = open_encoder(cfg(), table.schema, out, resumed=False)
    chunks = []
    for batch in table.to_batches(max_chunksize=2):
        enc.write(batch)
        chunks.append(out.drain_all())  # draining mid-file must not break offsets
    enc.close()
    chunks.append(out.drain_all())
    assert pq.read_table(io.BytesIO(b"".join(chunks))).equals(table)
    with pytest.raises(ValueError):
        open_encoder(cfg(), table.schema, OutputBuffer(), resumed=True)


def test_json_rows_encoder_types() -> None:
    batch = pa.record_batch(
        {
            "i": [1, None],
            "f": [1.5, -0.0],
            "b": [True, False],
            "s": ['é\n"q"', ""],
            "d": [dt.date(2024, 1, 2), None],
            "ts": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6)] * 2, pa.timestamp("us")),
            "dec": pa.array([decimal.Decimal("1.10"), None], pa.decimal128(5, 2)),
            "bin": [b"\x00\xff", None],
            "l": [[1, 2], []],
            "st": [{"x": 1}, None],
        }
    )
    out = OutputBuffer()
    enc = open_encoder(cfg(format="jsonl"), batch.schema, out, resumed=False)
    enc.write(batch)
    lines = out.drain_all().decode().split("\n")
    assert lines[-1] == "" and len(lines) == 3
    assert json.loads(lines[0]) == {
        "i": 1,
        "f": 1.5,
        "b": True,
        "s": 'é\n"q"',
        "d": "2024-01-02",
        "ts": "2024-01-02T03:04:05.000006",
        "dec": "1.10",
        "bin": "AP8=",
        "l": [1, 2],
        "st": {"x": 1},
    }
    assert json.loads(lines[1])["i"] is None and json.loads(lines[1])["l"] == []


def test_json_column_encoder_writes_values_as_lines_without_python_per_row() -> None:
    c = cfg(format="jsonl", json_column="v")
    batch = pa.record_batch({"v": ['{"a":1}', '{"a":2}'], "day": [1, 2]})
    schema = validate_schema(c, batch.schema)
    assert schema.names == ["v"]
    out = OutputBuffer()
    enc = open_encoder(c, schema, out, resumed=False)
    enc.write(batch.select(["v"]))
    enc.write(pa.record_batch({"v": pa.array([], pa.string())}))
    enc.write(pa.record_batch({"v": ['{"a":3}']}))
    assert out.drain_all() == b'{"a":1}\n{"a":2}\n{"a":3}\n'
    with pytest.raises(RecordError, match="row 1"):
        enc.write(pa.record_batch({"v": ["{}", None]}))


def test_csv_header_once_per_file_and_never_on_resume() -> None:
    c = cfg(format="csv")
    batch = pa.record_batch({"a": [1, 2], "s": ["x,y", 'q"']})
    out = OutputBuffer()
    enc = open_encoder(c, batch.schema, out, resumed=False)
    enc.write(batch)
    enc.write(batch)
    data = out.drain_all()
    assert pacsv.read_csv(io.BytesIO(data)).to_pydict() == {
        "a": [1, 2, 1, 2],
        "s": ["x,y", 'q"', "x,y", 'q"'],
    }
    resumed = OutputBuffer()
    open_encoder(c, batch.schema, resumed, resumed=True).write(batch)
    assert pacsv.read_csv(io.BytesIO(data + resumed.drain_all())).num_rows == 6
    no_header = OutputBuffer()
    open_encoder(cfg(format="csv", csv_header=False), batch.schema, no_header, resumed=False).write(batch)
    assert not no_header.drain_all().startswith(b'"a"')


@pytest.mark.parametrize(
    ("fields", "schema", "match"),
    [
        ({"partition_by": ("x",)}, pa.schema([("a", pa.int64())]), "partition column 'x'"),
        (
            {"partition_by": ("a",)},
            pa.schema([("a", pa.list_(pa.int64())), ("b", pa.int8())]),
            "only primitive",
        ),
        ({"partition_by": ("a",)}, pa.schema([("a", pa.int64())]), "every column"),
        ({"format": "csv"}, pa.schema([("a", pa.struct([("x", pa.int8())]))]), "nested"),
        ({"format": "jsonl", "json_column": "v"}, pa.schema([("a", pa.int64())]), "json_column 'v' not in"),
        ({"format": "jsonl", "json_column": "v"}, pa.schema([("v", pa.int64())]), "must be a string"),
    ],
)
def test_schema_errors(fields: dict[str, Any], schema: pa.Schema, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        validate_schema(cfg(**fields), schema)


def test_validate_schema_drops_partition_columns() -> None:
    schema = pa.schema([("day", pa.int32()), ("a", pa.int64()), ("kind", pa.string())])
    assert validate_schema(cfg(partition_by=("kind", "day")), schema).names == ["a"]


def test_split_by_partition_keeps_every_row_exactly_once() -> None:
    batch = pa.record_batch(
        {
            "id": list(range(8)),
            "k": ["a/b", None, "a/b", "x", None, "", "x", "a/b"],
            "f": [1.0, math.nan, 1.0, 2.0, math.nan, 1.0, 2.0, None],
        }
    )
    parts = split_by_partition(batch, ("k", "f"))
    got = {path: b.column("id").to_pylist() for path, b in parts}
    assert got == {
        "k=a%2Fb/f=1.0": [0, 2],
        "k=__HIVE_DEFAULT_PARTITION__/f=nan": [1, 4],
        "k=x/f=2.0": [3, 6],
        "k=__HIVE_DEFAULT_PARTITION__/f=1.0": [5],
        "k=a%2Fb/f=__HIVE_DEFAULT_PARTITION__": [7],
    }
    assert next(p for p, _ in parts) == "k=a%2Fb/f=1.0"  # order of first appearance
    assert split_by_partition(batch, ()) == [("", batch)]
    assert split_by_partition(batch.slice(0, 0), ("k",)) == []


def test_json_rows_are_valid_json_with_non_finite_floats_as_null() -> None:
    # RFC 8259 has no NaN or Infinity: bare tokens break standard readers (issue #18 §2)
    batch = pa.record_batch(
        {
            "f": [math.nan, math.inf, -math.inf, 1.5],
            "l": [[math.nan, 2.0], [], None, [3.0]],
            "st": [{"x": -math.inf}, None, {"x": 0.5}, None],
        }
    )
    out = OutputBuffer()
    enc = open_encoder(cfg(format="jsonl"), batch.schema, out, resumed=False)
    enc.write(batch)
    enc.close()

    def strict(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    rows = [json.loads(line, parse_constant=strict) for line in out.drain_all().decode().splitlines()]
    assert rows == [
        {"f": None, "l": [None, 2.0], "st": {"x": None}},
        {"f": None, "l": [], "st": None},
        {"f": None, "l": None, "st": {"x": 0.5}},
        {"f": 1.5, "l": [3.0], "st": None},
    ]


def test_json_rows_with_non_finite_floats_can_be_refused_by_option() -> None:
    batch = pa.record_batch({"f": [1.0, math.nan]})
    enc = open_encoder(
        cfg(format="jsonl", non_finite_floats="error"), batch.schema, OutputBuffer(), resumed=False
    )
    with pytest.raises(RecordError, match="row 1"):
        enc.write(batch)
    with pytest.raises(Exception, match="non_finite_floats"):
        cfg(format="jsonl", non_finite_floats="zero")
