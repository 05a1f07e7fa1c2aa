"""Arrow columns to Kafka record parts: pure functions, whole columns at a time.

The fast path takes binary or string ``key``/``value`` columns computed upstream by Spark, as
Spark's own Kafka sink does (DESIGN.md §10): one ``to_pylist`` per column per batch and nothing
per record (confluent-kafka encodes ``str`` as UTF-8 itself). ``json`` is the convenience path:
``json.dumps`` per row.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twophase.connectors.kafka.config import Format, KafkaSinkConfig
from twophase.sinks.errors import RecordError, SchemaError
from twophase.sinks.internal.arrow_compat import is_binary_view, is_string_view
from twophase.sinks.json_codec import encode_json

Payload = bytes | str | None
Headers = list[tuple[str, bytes | str | None]]


def is_binary(t: pa.DataType) -> bool:
    """binary, large_binary or binary_view."""
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or is_binary_view(t))


def is_string(t: pa.DataType) -> bool:
    """string, large_string or string_view."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or is_string_view(t))


def check_payload_type(column: str, t: pa.DataType, fmt: Format) -> None:
    """Raise SchemaError unless a ``fmt`` column may have Arrow type ``t``."""
    ok = {
        "auto": is_binary(t) or is_string(t),
        "bytes": is_binary(t),
        "string": is_string(t),
        "json": True,
    }[fmt]
    if not ok:
        raise SchemaError(
            f"Kafka sink: column {column!r} has type {t}, which format {fmt!r} cannot write "
            "(auto: binary or string; bytes: binary; string: string; json: any)"
        )


def _is_header_value(t: pa.DataType) -> bool:
    return is_binary(t) or is_string(t) or pa.types.is_null(t)


def check_headers_type(column: str, t: pa.DataType) -> None:
    """Raise SchemaError unless ``t`` is ``list<struct<key: string, value: binary|string>>`` or
    ``map<string, binary|string>`` (Spark's Kafka ``headers`` shape)."""
    ok = False
    if pa.types.is_map(t):
        ok = is_string(t.key_type) and _is_header_value(t.item_type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_type
        if pa.types.is_struct(item):
            names = {item.field(i).name: item.field(i).type for i in range(item.num_fields)}
            ok = (
                set(names) == {"key", "value"}
                and is_string(names["key"])
                and _is_header_value(names["value"])
            )
    if not ok:
        raise SchemaError(
            f"Kafka sink: headers column {column!r} has type {t}; expected "
            "list<struct<key: string, value: binary>> or map<string, binary>"
        )


def check_schema(schema: pa.Schema, config: KafkaSinkConfig) -> None:
    """Check that ``schema`` has every column ``config`` maps, of a type the sink can write.

    Raises:
        SchemaError: a column is missing or of the wrong type (before anything is written).
    """

    def field_type(column: str) -> pa.DataType:
        index = schema.get_field_index(column)
        if index < 0:
            raise SchemaError(f"Kafka sink: column {column!r} not in the data (columns: {schema.names})")
        return schema.field(index).type

    check_payload_type(config.value_column, field_type(config.value_column), config.value_format)
    if config.key_column is not None:
        check_payload_type(config.key_column, field_type(config.key_column), config.key_format)
    if config.headers_column is not None:
        check_headers_type(config.headers_column, field_type(config.headers_column))
    if config.partition_column is not None:
        t = field_type(config.partition_column)
        if not pa.types.is_integer(t):
            raise SchemaError(
                f"Kafka sink: partition column {config.partition_column!r} must be an int, got {t}"
            )
    if config.topic_column is not None:
        t = field_type(config.topic_column)
        if not is_string(t):
            raise SchemaError(f"Kafka sink: topic column {config.topic_column!r} must be a string, got {t}")
    if config.timestamp_column is not None:
        t = field_type(config.timestamp_column)
        if not pa.types.is_timestamp(t):
            raise SchemaError(
                f"Kafka sink: timestamp column {config.timestamp_column!r} must be a timestamp, got {t}"
            )


def timestamps_ms(column: pa.Array | pa.ChunkedArray) -> list[int]:
    """A timestamp column as Kafka record timestamps: ms since the epoch (UTC), a null as 0, which
    librdkafka replaces with the time of producing (so does a timestamp of exactly the epoch). One
    vectorised cast per batch.

    Raises:
        RecordError: a timestamp before 1970 (Kafka's are non-negative), naming the first row.
    """
    unit = pa.timestamp("ms", getattr(column.type, "tz", None))
    millis = pc.cast(pc.cast(column, unit, safe=False), pa.int64())
    negative = pc.less(millis, 0)
    if pc.any(negative).as_py():
        row = pc.index(negative, True).as_py()
        raise RecordError(f"row {row}: a Kafka record's timestamp cannot precede 1970-01-01")
    return list(pc.fill_null(millis, 0).to_pylist())


def to_json(value: Any) -> bytes | None:
    """One value as compact UTF-8 JSON (:mod:`twophase.sinks.json_codec`, the encoding S3 JSON
    lines use; NaN and ±Infinity as ``null``); ``None`` stays ``None`` (a Kafka null, e.g. a
    tombstone).

    Raises:
        TypeError: a value JSON cannot carry.
    """
    if value is None:
        return None
    return encode_json(value).encode("utf-8")


def payloads(array: pa.Array | pa.ChunkedArray, fmt: Format) -> list[Payload]:
    """The Kafka key or value of every row: bytes or str (UTF-8 on the wire), ``None`` for nulls."""
    if fmt == "json":
        return [to_json(v) for v in array.to_pylist()]
    return array.to_pylist()  # type: ignore[no-any-return]


def payload_sizes(array: pa.Array | pa.ChunkedArray, fmt: Format, values: list[Payload]) -> pa.Array:
    """Bytes per row of a key/value column (0 for nulls), computed in Arrow when possible."""
    if fmt != "json" and (is_binary(array.type) or is_string(array.type)):
        return pc.fill_null(pc.binary_length(array), 0)
    return pa.array([0 if v is None else len(v) for v in values], type=pa.int64())


def headers(array: pa.Array | pa.ChunkedArray) -> list[Headers | None]:
    """Per-row header lists ``[(key, value), …]`` from a column accepted by :func:`check_headers_type`."""
    out: list[Headers | None] = []
    is_map = pa.types.is_map(array.type)
    for row in array.to_pylist():
        if row is None:
            out.append(None)
        elif is_map:
            out.append(list(row))
        else:
            out.append([(h["key"], h["value"]) for h in row])
    return out


def header_sizes(rows: list[Headers | None]) -> list[int]:
    """Bytes per row taken by headers (keys and values)."""
    return [
        0 if hs is None else sum(len(k.encode("utf-8")) + (0 if v is None else len(v)) for k, v in hs)
        for hs in rows
    ]
