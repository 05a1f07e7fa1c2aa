"""One JSON encoding for S3 JSON lines and Kafka's ``json`` format: a property test over Arrow
types (hypothesis) encodes random rows through both sinks' encoders and parses them with a strict
standard JSON parser (issue #18 §2)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase.connectors.kafka.internal.serializers import payloads
from twophase.connectors.objectstore.internal.formats import OutputBuffer, open_encoder
from twophase.connectors.s3 import S3SinkConfig
from twophase.sinks.json_codec import NonFiniteFloatError, encode_json

UTC = dt.timezone.utc
SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("d", pa.date32()),
        ("dec", pa.decimal128(12, 3)),
        ("bin", pa.binary()),
        ("l", pa.list_(pa.float64())),
        ("st", pa.struct([("x", pa.float64()), ("y", pa.string())])),
    ]
)

floats = st.floats(allow_nan=True, allow_infinity=True)
rows = st.fixed_dictionaries(
    {
        "i": st.none() | st.integers(-(2**63), 2**63 - 1),
        "f": st.none() | floats,
        "s": st.none() | st.text(),
        "b": st.none() | st.booleans(),
        "ts": st.none()
        | st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)).map(lambda t: t.replace(tzinfo=UTC)),
        "d": st.none() | st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
        "dec": st.none() | st.decimals(min_value=-(10**8), max_value=10**8, places=3, allow_nan=False),
        "bin": st.none() | st.binary(max_size=20),
        "l": st.none() | st.lists(st.none() | floats, max_size=4),
        "st": st.none()
        | st.fixed_dictionaries({"x": st.none() | floats, "y": st.none() | st.text(max_size=5)}),
    }
)


def strict_loads(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON (RFC 8259): {token}")

    return json.loads(text, parse_constant=refuse)


def expected(value: Any, column: str) -> Any:
    """What a standard parser must read back for one input value."""
    if value is None:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [expected(v, column) for v in value]
    if isinstance(value, dict):
        return {k: expected(v, column) for k, v in value.items()}
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, min_size=1, max_size=8))
def test_s3_and_kafka_encode_every_row_alike_as_valid_json(items: list[dict[str, Any]]) -> None:
    batch = pa.RecordBatch.from_pylist(items, schema=SCHEMA)
    out = OutputBuffer()
    enc = open_encoder(S3SinkConfig(bucket="bucket", prefix="p", format="jsonl"), SCHEMA, out, resumed=False)
    enc.write(batch)
    enc.close()
    s3_lines = out.drain_all().decode("utf-8").split("\n")[:-1]  # JSON lines end each row with \n only
    kafka_values = payloads(pa.StructArray.from_arrays(batch.columns, fields=list(SCHEMA)), "json")

    assert len(s3_lines) == len(kafka_values) == len(items)
    for line, value, row in zip(s3_lines, kafka_values, batch.to_pylist(), strict=True):
        assert isinstance(value, bytes)
        assert value.decode("utf-8") == line  # one codec: byte for byte the same
        parsed = strict_loads(line)
        assert parsed == {k: expected(v, k) for k, v in row.items()}
        if parsed["ts"] is not None:
            assert dt.datetime.fromisoformat(parsed["ts"]).utcoffset() == dt.timedelta(0)  # with offset


def test_non_finite_floats_are_refused_when_asked_and_other_choices_are_errors() -> None:
    assert encode_json({"a": [1.0, math.inf]}) == '{"a":[1.0,null]}'
    with pytest.raises(NonFiniteFloatError):
        encode_json({"a": math.nan}, non_finite="error")
    with pytest.raises(ValueError, match="non_finite"):
        encode_json(1, non_finite="zero")
