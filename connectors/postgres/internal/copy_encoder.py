"""Arrow batches as PostgreSQL binary ``COPY`` data, encoded natively by pgpq.

The binary COPY format carries every field in the binary input format of its column's type
(PostgreSQL docs, "COPY", "Binary Format"): an ``int8`` column takes 8 bytes whatever the data's
integer width. So each written column is first cast with pyarrow to the one Arrow type whose pgpq
encoding is that format (:func:`copy_type`: ``int4`` ← int32, ``float8`` ← float64, ``numeric`` ←
decimal128, ``timestamptz`` ← microseconds…); pgpq's ``ArrowToPostgresBinaryEncoder`` (Rust) then
encodes whole batches, with no Python object per value. The bytes go to psycopg's ``Copy.write`` in
the session that later runs ``PREPARE TRANSACTION``, so the two-phase commit is untouched.

pgpq encodes decimals of up to 38 digits (decimal128); a wider decimal256 is refused by
:func:`~twophase.connectors.postgres.internal.schema.check_columns` before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pgpq import ArrowToPostgresBinaryEncoder

from twophase.sinks.errors import SchemaError

_INTEGER_COLUMNS = {"int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64()}
_TEXT_COLUMNS = frozenset({"text", "varchar", "bpchar"})
MAX_DECIMAL_DIGITS = 38
"""The widest decimal the sink writes into ``numeric``: decimal128's precision, what pgpq encodes."""


def _decimal_type(type_: pa.DataType) -> pa.DataType | None:
    """The decimal128 holding the values of a decimal or an integer type, or ``None`` (too wide)."""
    if pa.types.is_integer(type_):
        # digits of the widest value of the type: 2**63 - 1 has 19, 2**64 - 1 has 20
        digits = len(str(2 ** (type_.bit_width - (0 if pa.types.is_unsigned_integer(type_) else 1))))
        return pa.decimal128(digits, 0)
    precision, scale = type_.precision, type_.scale
    if scale < 0:  # a negative scale multiplies by a power of ten: the same values at scale 0
        precision, scale = precision - scale, 0
    if precision > MAX_DECIMAL_DIGITS:
        return None
    return pa.decimal128(precision, scale)


def copy_type(type_: pa.DataType, pg_type: str) -> pa.DataType | None:
    """The Arrow type a column of ``type_`` is cast to before pgpq encodes it for a column of
    PostgreSQL type ``pg_type`` (``pg_type.typname``), or ``None`` when pgpq cannot encode it (a
    decimal of more than :data:`MAX_DECIMAL_DIGITS` digits, a pair the sink does not write).

    Only pairs :data:`~twophase.connectors.postgres.internal.schema.COMPATIBLE` admits are asked
    for. Dictionaries are decoded; nanosecond times and timestamps become microseconds (truncated:
    PostgreSQL keeps microseconds).
    """
    if pa.types.is_dictionary(type_):
        return copy_type(type_.value_type, pg_type)
    if pg_type in _INTEGER_COLUMNS:
        return _INTEGER_COLUMNS[pg_type]
    if pg_type == "float4":
        return type_ if pa.types.is_float16(type_) else pa.float32()
    if pg_type == "float8":
        return pa.float64()
    if pg_type == "numeric":
        return _decimal_type(type_)
    if pg_type in _TEXT_COLUMNS:
        return pa.large_string() if pa.types.is_large_string(type_) else pa.string()
    if pg_type == "bytea":
        return pa.large_binary() if pa.types.is_large_binary(type_) else pa.binary()
    if pg_type == "date":
        return pa.date32()
    if pg_type == "time":
        return type_ if pa.types.is_time32(type_) else pa.time64("us")
    if pg_type in ("timestamp", "timestamptz"):
        return pa.timestamp("us", type_.tz) if type_.unit == "ns" else type_
    if pg_type == "bool":
        return pa.bool_()
    return None


def copy_schema(schema: pa.Schema, columns: Sequence[str], pg_types: Sequence[str]) -> pa.Schema:
    """What ``columns`` of ``schema`` are cast to for pgpq (:func:`copy_type`), by name.

    Raises:
        SchemaError: a column pgpq cannot encode for its PostgreSQL type (the driver's
            ``check_columns`` refuses it first).
    """
    fields = []
    for name, pg_type in zip(columns, pg_types, strict=True):
        source = schema.field(name).type
        target = copy_type(source, pg_type)
        if target is None:
            raise SchemaError(f"column {name}: data {source} cannot be written into PostgreSQL {pg_type}")
        fields.append(pa.field(name, target))
    return pa.schema(fields)


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` as ``target``: exact (overflow raises), but nanoseconds truncated to microseconds."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if array.type == target:
        return array
    nanoseconds = (
        pa.types.is_timestamp(array.type) or pa.types.is_time64(array.type)
    ) and array.type.unit == "ns"
    return array.cast(target, safe=not nanoseconds)


class CopyEncoder:
    """The binary data of one ``COPY … FROM STDIN (FORMAT BINARY)``: :meth:`header` once,
    :meth:`encode` per batch, :meth:`finish` once; every piece goes to ``Copy.write`` in order.

    Args:
        schema: what the batches' written columns are cast to (:func:`copy_schema`).

    pgpq keeps up to 1 MiB of encoded rows before it hands them out: :meth:`encode` may return
    ``b""``, and :meth:`finish` returns the rest with the trailer.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._encoder = ArrowToPostgresBinaryEncoder(schema)

    def header(self) -> bytes:
        """The format's signature, flags and header extension."""
        return bytes(self._encoder.write_header())

    def encode(self, batch: pa.RecordBatch) -> bytes:
        """The tuples of ``batch``'s written columns (those of :attr:`schema`, by name).

        Raises:
            pyarrow.ArrowInvalid: a value does not fit its cast (names the value).
            ValueError: pgpq refused a value.
        """
        arrays = [_cast(batch.column(f.name), f.type) for f in self.schema]
        return bytes(self._encoder.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema)))

    def finish(self) -> bytes:
        """The rows still buffered and the trailer; the encoder is done."""
        return bytes(self._encoder.finish())
