"""Arrow schema → Delta schema, and the compatibility check between data and an existing table.

Rules (checked before any file is written):

- unsigned integers, time-of-day, durations, intervals and other types without a Delta type are
  refused (Spark never produces them; cast upstream);
- timestamps are written in microseconds (Delta stores µs). With a time zone (any label: Spark
  uses the session time zone, e.g. ``Etc/UTC`` or ``America/New_York``) they are instants and
  become Delta ``timestamp``, written as ``timestamp[us, UTC]``: Arrow stores zoned timestamps as
  UTC-based counts, so changing the label alone is exact. Without a time zone they become
  ``timestamp_ntz`` (values kept as they are). Seconds and milliseconds widen to µs exactly; a
  nanosecond value that is not a whole number of µs is refused at write time (``RecordError``)
  rather than truncated: truncate upstream if sub-µs precision does not matter (Spark timestamps
  are µs already);
- against an existing table, every data column must exist in the table with the same type
  (nullability is not compared); table columns missing from the data read back as null; new
  columns are refused unless ``merge_schema`` is on, and then they are added as nullable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from deltalake import Schema

from twophase.connectors.delta.internal.partitions import check_partition_type
from twophase.sinks.errors import SchemaError


def project_schema(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """``schema`` reduced to ``columns``, in that order (``schema`` itself for ``None``).

    Raises:
        SchemaError: columns missing from ``schema``, naming every one of them.
    """
    if columns is None:
        return schema
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise SchemaError(
            f"columns {missing} of the sink's projection are not in the data's columns {schema.names}"
        )
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)


def writable_arrow_type(type_: pa.DataType, column: str) -> pa.DataType:
    """The Arrow type a column is written as (dictionaries decoded; timestamps in µs, zoned ones
    labelled ``UTC``, the only zone delta-rs and Delta's ``timestamp`` know).

    Raises:
        SchemaError: a type with no Delta counterpart.
    """
    if pa.types.is_dictionary(type_):
        return writable_arrow_type(type_.value_type, column)
    if pa.types.is_timestamp(type_):
        # Zoned values are UTC instants whatever the label, so relabelling is exact.
        return pa.timestamp("us", None if type_.tz is None else "UTC")
    if pa.types.is_unsigned_integer(type_):
        raise SchemaError(f"column {column!r}: unsigned {type_} has no Delta type; cast it to a signed type")
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(writable_arrow_type(f.type, f"{column}.{f.name}")) for f in type_])
    if pa.types.is_map(type_):
        return pa.map_(
            writable_arrow_type(type_.key_type, f"{column}.key"),
            type_.item_field.with_type(writable_arrow_type(type_.item_type, f"{column}.value")),
        )
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        item = type_.value_field
        return pa.list_(item.with_type(writable_arrow_type(item.type, f"{column}.element")))
    return type_


def writable_schema(schema: pa.Schema) -> pa.Schema:
    """:func:`writable_arrow_type` applied to every column (metadata dropped)."""
    return pa.schema([f.with_type(writable_arrow_type(f.type, f.name)) for f in schema])


def delta_schema_json(schema: pa.Schema, partition_by: Sequence[str]) -> str:
    """The Delta schema JSON of data with Arrow ``schema``, after checking partition columns.

    Raises:
        SchemaError: duplicate columns, a partition column missing or of a non-partitionable
            type, or a type with no Delta counterpart.
    """
    names = schema.names
    if len(set(names)) != len(names):
        raise SchemaError(f"duplicate column names in {names}")
    for column in partition_by:
        if column not in names:
            raise SchemaError(f"partition column {column!r} is not a column of the data {names}")
        check_partition_type(column, schema.field(column).type)
    if len(partition_by) == len(names) and names:
        raise SchemaError("every column is a partition column; Delta needs at least one data column")
    try:
        return str(Schema.from_arrow(writable_schema(schema)).to_json())
    except SchemaError:
        raise
    except Exception as e:
        raise SchemaError(f"data schema has no Delta equivalent: {str(e).splitlines()[0]}") from e


def new_columns(table_schema_json: str, data_schema_json: str, *, merge_schema: bool) -> list[str]:
    """Check data against the table; return the data columns the table lacks (to be added).

    Raises:
        SchemaError: a type clash, or new columns while ``merge_schema`` is off. The message
            names every offending column with both types.
    """
    table_fields = _fields(table_schema_json)
    data_fields = _fields(data_schema_json)
    clashes = []
    added = []
    for name, field in data_fields.items():
        if name not in table_fields:
            added.append(name)
            continue
        if _strip(field["type"]) != _strip(table_fields[name]["type"]):
            clashes.append(f"{name!r}: table {_show(table_fields[name])}, data {_show(field)}")
    if clashes:
        raise SchemaError("data types clash with the Delta table: " + "; ".join(clashes))
    if added and not merge_schema:
        raise SchemaError(
            f"columns {added} are not in the Delta table (columns {list(table_fields)}); "
            "set merge_schema=True to add them"
        )
    return added


def fields_for(schema_json: str, names: Sequence[str]) -> Schema:
    """A Delta schema holding only ``names`` of ``schema_json``, all nullable (for ``add_columns``)."""
    fields = _fields(schema_json)
    subset = {"type": "struct", "fields": [{**fields[n], "nullable": True} for n in names]}
    return Schema.from_json(json.dumps(subset))


def _fields(schema_json: str) -> dict[str, dict[str, Any]]:
    parsed = json.loads(schema_json)
    return {f["name"]: f for f in parsed["fields"]}


def _strip(type_: Any) -> Any:
    """A type without nullability and metadata, for comparison."""
    if isinstance(type_, dict):
        return {
            k: _strip(v)
            for k, v in type_.items()
            if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")
        }
    if isinstance(type_, list):
        return [_strip(v) for v in type_]
    return type_


def _show(field: dict[str, Any]) -> str:
    t = field["type"]
    return t if isinstance(t, str) else json.dumps(_strip(t), separators=(",", ":"))
