"""File formats: Arrow batches → bytes of one file, whole batches at a time.

- Parquet via ``pyarrow.parquet.ParquetWriter``, batches buffered into row groups of
  ``parquet_row_group_bytes``. Not resumable: the footer is written on close, so Parquet files
  roll on every checkpoint.
- JSON lines: with ``json_column`` (pre-encoded JSON strings, e.g. Spark's ``to_json``), joined
  with newlines by Arrow kernels; otherwise each row is encoded with ``json`` (dates and
  timestamps ISO-8601, decimals as strings, binary as base64).
- CSV via ``pyarrow.csv`` (header once per file when configured; never repeated when a file is
  resumed in a later epoch).

Encoders write into an :class:`OutputBuffer`, from which a sink's writer drains upload parts
(S3) or blocks (Azure). Every function reads the layout fields of a sink's config
(:class:`~twophase.connectors.objectstore.internal.layout.FileLayout`).
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from twophase.connectors.objectstore.internal.layout import FileFormat, FileLayout
from twophase.sinks.errors import RecordError, SchemaError
from twophase.sinks.json_codec import encode_json

CONTENT_TYPES = {
    FileFormat.PARQUET: "application/vnd.apache.parquet",
    FileFormat.JSON_LINES: "application/x-ndjson",
    FileFormat.CSV: "text/csv",
}
"""Content-Type of data files per format."""


class OutputBuffer:
    """A write-only, file-like byte sink whose front can be drained (as upload parts).

    ``tell()`` counts every byte ever written, including drained ones, because the Parquet writer
    records column chunk offsets from it.
    """

    def __init__(self, initial: bytes = b"", position: int = 0) -> None:
        self._buf = bytearray(initial)
        self._position = position + len(initial)
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; returns its length."""
        self._buf += data
        n = len(memoryview(data).cast("B"))
        self._position += n
        return n

    def tell(self) -> int:
        """Bytes ever written (drained or not)."""
        return self._position

    def flush(self) -> None:
        """Nothing to flush: data stays buffered until drained."""

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        """Mark closed; buffered bytes stay drainable."""
        self.closed = True

    def __len__(self) -> int:
        return len(self._buf)

    def drain(self, n: int) -> bytes:
        """Remove and return the first ``n`` buffered bytes."""
        # one copy (slicing a bytearray would copy twice); deleting from the front is O(1) in
        # CPython, once the view is released
        with memoryview(self._buf) as view:
            chunk = bytes(view[:n])
        del self._buf[:n]
        return chunk

    def drain_all(self) -> bytes:
        """Remove and return every buffered byte."""
        return self.drain(len(self._buf))


class FileEncoder(Protocol):
    """Encodes batches of one file into an :class:`OutputBuffer`."""

    def write(self, batch: pa.RecordBatch) -> None:
        """Encode one batch (whose schema is the file's)."""

    def close(self) -> None:
        """Write whatever ends the file (Parquet footer); no more writes."""


def project_schema(config: FileLayout, schema: pa.Schema) -> pa.Schema:
    """``schema`` reduced to ``config.columns``, in that order (``schema`` itself without a projection).

    Raises:
        SchemaError: columns of the projection missing from ``schema``, naming every one of them.
    """
    if config.columns is None:
        return schema
    missing = [c for c in config.columns if schema.get_field_index(c) < 0]
    if missing:
        raise SchemaError(
            f"columns {missing} of the sink's projection are not in the data's columns {schema.names}"
        )
    return pa.schema([schema.field(c) for c in config.columns], metadata=schema.metadata)


def project_batch(config: FileLayout, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` reduced to ``config.columns`` (zero-copy ``RecordBatch.select``); as is without one.

    Raises:
        SchemaError: columns of the projection missing from the batch.
    """
    if config.columns is None:
        return batch
    project_schema(config, batch.schema)  # names the missing columns, if any
    return batch.select(list(config.columns))


def validate_schema(config: FileLayout, schema: pa.Schema) -> pa.Schema:
    """Check that the incoming data's ``schema`` fits the configuration; return the files' schema.

    Returns:
        ``schema`` projected to ``columns`` (:func:`project_schema`), without the partition columns
        (and, with ``json_column``, only that column).

    Raises:
        SchemaError: a column of the projection is missing, a partition column is missing or
            nested, no data column is left, CSV gets a nested column, or ``json_column`` is missing
            or not a string.
    """
    schema = project_schema(config, schema)
    names = set(schema.names)
    for col in config.partition_by:
        if col not in names:
            raise SchemaError(f"partition column {col!r} not in the data's columns {schema.names}")
        t = schema.field(col).type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_binary(t):
            raise SchemaError(f"partition column {col!r} has type {t}; only primitive types partition")
    data_fields = [f for f in schema if f.name not in config.partition_by]
    if not data_fields:
        raise SchemaError("every column is a partition column; nothing would be written into files")
    fmt = config.file_format
    if config.json_column is not None:
        if config.json_column not in names:
            raise SchemaError(f"json_column {config.json_column!r} not in the data's columns {schema.names}")
        t = schema.field(config.json_column).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise SchemaError(f"json_column {config.json_column!r} must be a string column, got {t}")
        return pa.schema([schema.field(config.json_column)])
    if fmt is FileFormat.CSV:
        for f in data_fields:
            if pa.types.is_nested(f.type):
                raise SchemaError(f"CSV cannot hold nested column {f.name!r} of type {f.type}")
    return pa.schema(data_fields, metadata=schema.metadata)


def open_encoder(config: FileLayout, schema: pa.Schema, out: OutputBuffer, *, resumed: bool) -> FileEncoder:
    """An encoder for one file of ``config``'s format, writing into ``out``.

    Args:
        config: the sink configuration.
        schema: the file's schema (from :func:`validate_schema`).
        out: where encoded bytes go.
        resumed: the file already holds data from an earlier epoch (no CSV header; Parquet never).

    Raises:
        ValueError: ``resumed`` for Parquet (it cannot be resumed).
    """
    fmt = config.file_format
    if fmt is FileFormat.PARQUET:
        if resumed:
            raise ValueError("a Parquet file cannot be resumed")
        return _ParquetEncoder(config, schema, out)
    if fmt is FileFormat.CSV:
        return _CsvEncoder(out, header=config.csv_header and not resumed)
    if config.json_column is not None:
        return _JsonColumnEncoder(out, config.json_column)
    return _JsonRowEncoder(out, config.non_finite_floats)


class _ParquetEncoder:
    """Buffers batches into row groups of about ``parquet_row_group_bytes`` (Arrow bytes): one row
    group per small Spark batch (10,000 rows by default) would compress poorly."""

    def __init__(self, config: FileLayout, schema: pa.Schema, out: OutputBuffer) -> None:
        self._schema = schema
        self._row_group_bytes = config.parquet_row_group_bytes
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._writer = pq.ParquetWriter(out, schema, compression=config.parquet_compression)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.schema != self._schema:
            # Spark may hand over batches differing only in nullability or metadata.
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            table = pa.Table.from_batches(self._pending, schema=self._schema)
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
            self._pending.clear()
            self._pending_bytes = 0

    def close(self) -> None:
        self._flush()
        self._writer.close()


class _CsvEncoder:
    def __init__(self, out: OutputBuffer, *, header: bool) -> None:
        self._out = out
        self._header = header

    def write(self, batch: pa.RecordBatch) -> None:
        sink = pa.BufferOutputStream()
        pacsv.write_csv(batch, sink, write_options=pacsv.WriteOptions(include_header=self._header))
        self._header = False
        self._out.write(sink.getvalue().to_pybytes())

    def close(self) -> None:
        pass


class _JsonColumnEncoder:
    def __init__(self, out: OutputBuffer, column: str) -> None:
        self._out = out
        self._column = column

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        col = batch.column(self._column).cast(pa.large_string())
        if col.null_count:
            first = pc.index(pc.is_null(col), True).as_py()
            raise RecordError(f"json_column {self._column!r} is null at batch row {first}")
        # One list holding every value, joined by Arrow: no per-row Python.
        one_list = pa.LargeListArray.from_arrays(pa.array([0, len(col)], pa.int64()), col)
        joined = pc.binary_join(one_list, pa.scalar("\n", pa.large_string()))
        self._out.write(joined[0].as_buffer().to_pybytes() + b"\n")

    def close(self) -> None:
        pass


class _JsonRowEncoder:
    def __init__(self, out: OutputBuffer, non_finite: str) -> None:
        self._out = out
        self._non_finite = non_finite

    def write(self, batch: pa.RecordBatch) -> None:
        lines = []
        for i, row in enumerate(batch.to_pylist()):
            try:
                lines.append(encode_json(row, self._non_finite))
            except (TypeError, ValueError) as e:
                raise RecordError(f"row {i} of the batch cannot be encoded as JSON: {e}") from e
        if lines:
            self._out.write(("\n".join(lines) + "\n").encode())

    def close(self) -> None:
        pass
