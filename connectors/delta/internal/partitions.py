"""Partition values: which types may partition, how values are serialized, how a batch is split.

Serialization follows Delta PROTOCOL.md, "Partition Value Serialization": strings as they are,
numbers in decimal notation, ``true``/``false``, dates ``YYYY-MM-DD``, timestamps (with time
zone) as ISO-8601 in UTC ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, timestamps without time zone as
``YYYY-MM-DD HH:MM:SS[.ffffff]``, and null as JSON null. Like Spark, an empty string partition
value is stored as null.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from twophase.sinks.errors import SchemaError

_ROW_INDEX = "__twophase_row__"


def check_partition_type(column: str, type_: pa.DataType) -> None:
    """Refuse partition columns whose values Delta cannot serialize.

    Raises:
        SchemaError: binary, nested and other types without a PROTOCOL.md serialization.
    """
    ok = (
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_integer(type_)
        or pa.types.is_floating(type_)
        or pa.types.is_boolean(type_)
        or pa.types.is_decimal(type_)
        or pa.types.is_date(type_)
        or pa.types.is_timestamp(type_)
        or (pa.types.is_dictionary(type_) and pa.types.is_string(type_.value_type))
    )
    if not ok:
        raise SchemaError(f"partition column {column!r} has type {type_}, which Delta cannot partition by")


def serialize_partition_value(value: object) -> str | None:
    """One partition value as PROTOCOL.md's string (``None`` for null and, as in Spark, for ``""``).

    Args:
        value: a Python value as ``pyarrow.Scalar.as_py()`` returns it (str, int, float, bool,
            Decimal, date, datetime with or without tzinfo, or None).

    Raises:
        SchemaError: a type that cannot be a partition value (bytes, lists, ...).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            utc = value.astimezone(dt.timezone.utc)
            return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond:06d}Z"
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        return f"{text}.{value.microsecond:06d}" if value.microsecond else text
    if isinstance(value, dt.date):
        return value.isoformat()
    raise SchemaError(f"cannot serialize a {type(value).__name__} partition value")


def split_by_partition(
    table: pa.Table, columns: Sequence[str]
) -> list[tuple[tuple[str | None, ...], pa.Table]]:
    """Split rows by their partition values; drop the partition columns from each part.

    Returns:
        ``[(serialized values in column order, rows without partition columns), ...]``, each
        group's rows in their input order. Without partition columns: one group, ``()``.
    """
    if not columns:
        return [((), table)]
    data_columns = [c for c in table.column_names if c not in columns]
    if table.num_rows == 0:
        return []
    indexed = table.select(list(columns)).append_column(
        _ROW_INDEX, pa.array(range(table.num_rows), pa.int64())
    )
    grouped = indexed.group_by(list(columns), use_threads=False).aggregate([(_ROW_INDEX, "list")])
    groups: dict[tuple[str | None, ...], list[pa.Array]] = {}
    keys = [grouped.column(c).to_pylist() for c in columns]
    rows = grouped.column(f"{_ROW_INDEX}_list")
    for i in range(grouped.num_rows):
        values = tuple(serialize_partition_value(k[i]) for k in keys)
        # "" and null serialize alike, so two groups may share one partition: merge them.
        groups.setdefault(values, []).append(rows[i].values)
    parts = []
    for values, index_arrays in groups.items():
        indices = pa.concat_arrays(index_arrays) if len(index_arrays) > 1 else index_arrays[0]
        if len(index_arrays) > 1:
            indices = pc.take(indices, pc.sort_indices(indices))
        parts.append((values, table.select(data_columns).take(indices)))
    return parts
