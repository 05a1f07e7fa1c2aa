"""The target table as PostgreSQL describes it, and the check of the data's Arrow schema against it.

Checked before anything is written (``PostgresSink.validate``):

- the table exists;
- every written column is a column of the table, of a type its Arrow type is dumped to exactly
  (:data:`COMPATIBLE`): integers into integer types at least as wide or ``numeric``, floats into
  ``float4``/``float8``, strings into ``text``/``varchar``/``bpchar``, binary into ``bytea``,
  dates, timestamps (zoned → ``timestamptz``, naive → ``timestamp``), decimals of up to 38 digits
  into ``numeric`` (what the binary COPY encoder writes:
  :func:`~twophase.connectors.postgres.internal.copy_encoder.copy_type`);
- table columns the data does not write are nullable or have a default;
- upsert mode: the key columns are written and a unique index (or primary key) covers exactly them.

The type check is the one pure function :func:`check_columns`; :func:`describe_table` reads the
catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
import pyarrow as pa

from twophase.connectors.postgres.internal.copy_encoder import copy_type
from twophase.sinks.errors import ConfigError, SchemaError


@dataclass(frozen=True)
class TableColumn:
    """One column of the target table.

    Attributes:
        name: the column's name.
        type_name: ``pg_type.typname`` of its base type (``int4``, ``text``, ``timestamptz``…).
        not_null: declared ``NOT NULL``.
        has_default: has a default, or is an identity or generated column.
    """

    name: str
    type_name: str
    not_null: bool
    has_default: bool


@dataclass(frozen=True)
class TableInfo:
    """The target table: its columns in order and its unique keys.

    Attributes:
        schema: its schema.
        table: its name.
        columns: every live column, in ``attnum`` order.
        primary_key: the primary key's columns (``()`` without one).
        unique_keys: the column sets of every unique index (the primary key's included).
    """

    schema: str
    table: str
    columns: tuple[TableColumn, ...]
    primary_key: tuple[str, ...]
    unique_keys: tuple[frozenset[str], ...]

    def column(self, name: str) -> TableColumn | None:
        """The column called ``name``, or ``None``."""
        return next((c for c in self.columns if c.name == name), None)


_INTEGERS = {8: {"int2", "int4", "int8", "numeric"}, 16: {"int2", "int4", "int8", "numeric"}}
COMPATIBLE: Mapping[str, frozenset[str]] = {
    "bool": frozenset({"bool"}),
    "int8": frozenset(_INTEGERS[8]),
    "int16": frozenset(_INTEGERS[16]),
    "int32": frozenset({"int4", "int8", "numeric"}),
    "int64": frozenset({"int8", "numeric"}),
    "uint8": frozenset({"int2", "int4", "int8", "numeric"}),
    "uint16": frozenset({"int4", "int8", "numeric"}),
    "uint32": frozenset({"int8", "numeric"}),
    "uint64": frozenset({"numeric"}),
    "float16": frozenset({"float4", "float8"}),
    "float32": frozenset({"float4", "float8"}),
    "float64": frozenset({"float8"}),
    "string": frozenset({"text", "varchar", "bpchar"}),
    "binary": frozenset({"bytea"}),
    "date": frozenset({"date"}),
    "timestamp": frozenset({"timestamp"}),
    "timestamptz": frozenset({"timestamptz"}),
    "decimal": frozenset({"numeric"}),
    "time": frozenset({"time"}),
}
"""Arrow type family → the PostgreSQL types (``typname``) a column of it may be written into."""


def arrow_family(type_: pa.DataType) -> str | None:
    """The :data:`COMPATIBLE` key of an Arrow type (dictionaries by their value type), or ``None``
    for types the sink does not write (lists, structs, maps, durations, intervals…)."""
    if pa.types.is_dictionary(type_):
        return arrow_family(type_.value_type)
    if pa.types.is_boolean(type_):
        return "bool"
    if pa.types.is_integer(type_):
        return str(type_)
    if pa.types.is_floating(type_):
        return f"float{type_.bit_width}"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "string"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_):
        return "binary"
    if pa.types.is_date(type_):
        return "date"
    if pa.types.is_timestamp(type_):
        return "timestamp" if type_.tz is None else "timestamptz"
    if pa.types.is_decimal(type_):
        return "decimal"
    if pa.types.is_time(type_):
        return "time"
    return None


def check_columns(
    schema: pa.Schema, table: TableInfo, columns: Sequence[str] | None, where: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Check the data's columns (``columns`` of ``schema``, all of them for ``None``) against ``table``.

    Args:
        schema: the data's Arrow schema.
        table: the target table (:func:`describe_table`).
        columns: the sink's projection, or ``None``.
        where: the table's name for messages.

    Returns:
        The written columns and their PostgreSQL type names, in the written order.

    Raises:
        SchemaError: a projected column missing from the data, a column the table lacks, a type
            clash (column, Arrow type, PostgreSQL type), a NOT NULL column without default the data
            does not write. One line, naming every offending column of the first kind found.
    """
    names = list(schema.names if columns is None else columns)
    missing_in_data = [c for c in names if schema.get_field_index(c) < 0]
    if missing_in_data:
        raise SchemaError(
            f"columns {missing_in_data} of the sink's projection are not in the data's columns {schema.names}"
        )
    unknown = [c for c in names if table.column(c) is None]
    if unknown:
        raise SchemaError(
            f"{where} has no column(s) {unknown}; its columns are {[c.name for c in table.columns]}"
        )
    clashes = []
    types = []
    for name in names:
        column = table.column(name)
        assert column is not None
        arrow_type = schema.field(name).type
        family = arrow_family(arrow_type)
        if family is None or column.type_name not in COMPATIBLE[family]:
            clashes.append(f"{name}: data {arrow_type} vs table {column.type_name}")
        elif copy_type(arrow_type, column.type_name) is None:
            clashes.append(f"{name}: data {arrow_type} is wider than 38 digits, the most binary COPY writes")
        types.append(column.type_name)
    if clashes:
        raise SchemaError(f"type mismatch between the data and {where}: {'; '.join(clashes)}")
    required = [c.name for c in table.columns if c.not_null and not c.has_default and c.name not in names]
    if required:
        raise SchemaError(
            f"{where} has NOT NULL column(s) {required} without default that the data does not write"
        )
    return tuple(names), tuple(types)


def upsert_key(
    table: TableInfo, key_columns: Sequence[str], written: Sequence[str], where: str
) -> tuple[str, ...]:
    """The conflict key of upsert mode: ``key_columns``, or the table's primary key when empty.

    Raises:
        ConfigError: no key given and no primary key; no unique index on exactly the key; a key
            column not written by the sink.
    """
    key = tuple(key_columns) or table.primary_key
    if not key:
        raise ConfigError(
            f"upsert mode needs a key: {where} has no primary key; set key_columns to the columns "
            "of a unique index"
        )
    if frozenset(key) not in table.unique_keys:
        raise ConfigError(
            f"upsert key {list(key)} of {where} is not covered by a unique index or primary key "
            "on exactly those columns (INSERT … ON CONFLICT needs one)"
        )
    unwritten = [k for k in key if k not in written]
    if unwritten:
        raise ConfigError(f"upsert key column(s) {unwritten} of {where} are not among the written columns")
    return key


@dataclass(frozen=True)
class WritePlan:
    """What the sink learnt from the table before writing (``PostgresSink.validate``), pickled to executors.

    Attributes:
        columns: the written columns, in order.
        type_names: their PostgreSQL type names (``pg_type.typname``), what each column is cast
            to before it is encoded.
        key: upsert mode's conflict key (``()`` in append mode).
    """

    columns: tuple[str, ...]
    type_names: tuple[str, ...]
    key: tuple[str, ...] = ()


def build_plan(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: pa.Schema,
    *,
    table_schema: str,
    table: str,
    columns: Sequence[str] | None,
    mode: str,
    key_columns: Sequence[str],
) -> WritePlan:
    """Describe the target table and check the data against it (see the module docstring).

    Raises:
        ConfigError: the table does not exist; upsert mode without a usable key.
        SchemaError: see :func:`check_columns`.
    """
    where = f"table {table_schema}.{table}"
    info = describe_table(conn, table_schema, table)
    if info is None:
        raise ConfigError(f"{where} does not exist (the PostgreSQL sink writes into an existing table)")
    written, types = check_columns(schema, info, columns, where)
    key = upsert_key(info, key_columns, written, where) if mode == "upsert" else ()
    return WritePlan(written, types, key)


def describe_table(conn: psycopg.Connection[tuple[object, ...]], schema: str, table: str) -> TableInfo | None:
    """The table's columns and unique keys from the catalog, or ``None`` if it does not exist."""
    row = conn.execute(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, table),
    ).fetchone()
    if row is None:
        return None
    oid = row[0]
    columns = tuple(
        TableColumn(str(name), str(type_name), bool(not_null), bool(has_default))
        for name, type_name, not_null, has_default in conn.execute(
            "SELECT a.attname, COALESCE(bt.typname, t.typname), a.attnotnull,"
            " a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''"
            " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
            " LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype"
            " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (oid,),
        ).fetchall()
    )
    primary_key: tuple[str, ...] = ()
    unique: list[frozenset[str]] = []
    for is_primary, names in conn.execute(
        "SELECT i.indisprimary, array_agg(a.attname ORDER BY k.ord)"
        " FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        " WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL"
        " GROUP BY i.indexrelid, i.indisprimary",
        (oid,),
    ).fetchall():
        key = tuple(str(n) for n in names)  # type: ignore[attr-defined]
        unique.append(frozenset(key))
        if is_primary:
            primary_key = key
    return TableInfo(schema, table, columns, primary_key, tuple(unique))
