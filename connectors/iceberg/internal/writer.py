"""Executor side of the Iceberg sink: Parquet data files under the job's data prefix, one per partition value.

Built on pyiceberg's own write path pieces (pyiceberg 0.12; they are what
``Table.append`` uses, minus the snapshot commit, which the driver does once per checkpoint):

- ``_determine_partitions`` splits a batch by the table's partition spec, with the transforms'
  pyarrow implementations (a transform without one, e.g. ``bucket`` without ``pyiceberg-core``,
  is refused by :func:`unsupported_transforms` before anything is written);
- ``_to_requested_schema(include_field_ids=True)`` casts the batch to the table schema and puts
  the Iceberg field ids into the Parquet schema (the Iceberg table spec's column projection
  reads Parquet columns by field id);
- ``ParquetFormatWriter`` writes the file through the table's FileIO and computes the column
  metrics (sizes, counts, bounds) the manifest entry needs.

Paths come from :mod:`twophase.connectors.iceberg.internal.naming`, not from the table's location
provider, so that lingering cleanup finds every file of the job under one prefix.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.io.pyarrow import (
    ParquetFormatModel,
    ParquetFormatWriter,
    _determine_partitions,
    _to_requested_schema,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionKey, PartitionSpec
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from twophase.connectors.iceberg.config import IcebergSinkConfig
from twophase.connectors.iceberg.internal import naming
from twophase.connectors.iceberg.internal.committable import IcebergDataFile, from_data_file
from twophase.connectors.iceberg.internal.lingering import delete_files
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import SchemaError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

_PARQUET = ParquetFormatModel()

BUFFER_ROWS = 131_072
"""Rows a writer gathers before it splits them by partition, casts them to the table schema and
writes them: Spark hands over batches of 10,000 rows, and doing that work per batch cost a third of
the write (the schema conversion each time) and gave 10,000-row Parquet row groups."""


def unsupported_transforms(spec: PartitionSpec, schema: Schema) -> list[str]:
    """The spec's fields whose transform pyiceberg cannot compute on Arrow data (``[]``: all can).

    pyiceberg 0.12 computes ``identity`` and ``truncate`` itself and the time transforms and
    ``bucket`` with ``pyiceberg-core`` (its Rust extension, the ``pyiceberg-core`` extra); a
    transform it cannot build raises, and the field is named here.
    """
    unsupported = []
    for f in spec.fields:
        try:
            f.transform.pyarrow_transform(schema.find_type(f.source_id))
        except (ImportError, NotImplementedError, ValueError, TypeError) as e:
            unsupported.append(f"{f.name} ({f.transform}: {type(e).__name__})")
    return unsupported


def utc_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every zoned top-level timestamp column in UTC.

    Spark hands timestamps to Arrow in the session time zone (``timestamp[us, tz=<zone>]``); the
    values are UTC instants whatever the zone, and Iceberg's ``timestamptz`` is UTC, which is all
    pyiceberg accepts. Re-labelling the zone changes no value.
    """
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz != "UTC":
            f = f.with_type(pa.timestamp(f.type.unit, "UTC"))
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def project(batch: pa.RecordBatch, columns: tuple[str, ...] | None) -> pa.RecordBatch:
    """``batch`` restricted to ``columns`` in that order (``None``: unchanged), zoned timestamps
    re-labelled as UTC (:func:`utc_schema`).

    Raises:
        SchemaError: a column of the projection is missing (all missing ones named).
    """
    if columns is not None:
        missing = [c for c in columns if c not in batch.schema.names]
        if missing:
            raise SchemaError(f"columns {missing} are not in the data ({batch.schema.names})")
        batch = batch.select(list(columns))
    target = utc_schema(batch.schema)
    return batch if target == batch.schema else batch.cast(target)


@dataclass
class _OpenFile:
    path: str
    writer: ParquetFormatWriter
    partition: Record
    rows: int = 0


class IcebergFileWriter:
    """One subtask's data files of one checkpoint. Lives only inside the task.

    Args:
        config: the sink's configuration.
        ctx: the subtask (job, sink, checkpoint, partition, attempt).
        table: the table, loaded by the task (schema, spec, location, properties, FileIO).
    """

    def __init__(self, config: IcebergSinkConfig, ctx: WriterContext, table: Table) -> None:
        self._config = config
        self._ctx = ctx
        self._table = table
        self.schema: Schema = table.schema()
        self.spec: PartitionSpec = table.spec()
        sanitized = sanitize_column_names(self.schema)
        self._file_schema = sanitized if sanitized != self.schema else self.schema
        self._prefix = naming.job_data_prefix(table.location(), naming.job_token(ctx.job_id, ctx.sink_name))
        self._open: dict[str, _OpenFile] = {}
        self._done: list[IcebergDataFile] = []
        self._written: list[str] = []
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._task_schemas: dict[pa.Schema, Schema] = {}

    def write(self, batch: pa.RecordBatch) -> None:
        """Append the rows of ``batch`` (only ``config.columns``) to the file of each partition value.

        Rows are gathered up to :data:`BUFFER_ROWS` (or ``target_file_rows`` if smaller) and
        written together; :meth:`finish` writes the rest.

        Raises:
            SchemaError: the batch does not fit the table schema.
            OSError: the storage refused a write.
        """
        batch = project(batch, self._config.columns)
        if batch.num_rows == 0:
            return
        if self._pending and batch.schema != self._pending[0].schema:
            self._flush()
        self._task_schema(batch.schema)  # a batch that does not fit fails here, at once
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        if self._pending_rows >= min(BUFFER_ROWS, self._config.target_file_rows):
            self._flush()

    def _task_schema(self, schema: pa.Schema) -> Schema:
        """The Iceberg schema of Arrow ``schema`` (by the table's name mapping), converted once."""
        known = self._task_schemas.get(schema)
        if known is not None:
            return known
        try:
            converted = pyarrow_to_schema(
                schema,
                name_mapping=self.schema.name_mapping,
                downcast_ns_timestamp_to_us=True,
                format_version=self._table.format_version,
            )
        except ValueError as e:
            raise SchemaError(
                f"data does not fit Iceberg table {self._config.table}: {str(e).splitlines()[0]}"
            ) from e
        self._task_schemas[schema] = converted
        return converted

    def _flush(self) -> None:
        """Split the gathered rows by partition value and write each part to its file."""
        if not self._pending:
            return
        data = pa.Table.from_batches(self._pending).combine_chunks()  # one cast, one row group
        self._pending, self._pending_rows = [], 0
        task_schema = self._task_schema(data.schema)
        if self.spec.is_unpartitioned():
            parts: list[tuple[PartitionKey | None, pa.Table]] = [(None, data)]
        else:
            parts = [
                (p.partition_key, p.arrow_table_partition)
                for p in _determine_partitions(self.spec, self.schema, data)
            ]
        for key, part in parts:
            arrow = pa.Table.from_batches(
                [
                    _to_requested_schema(
                        requested_schema=self._file_schema,
                        file_schema=task_schema,
                        batch=b,
                        downcast_ns_timestamp_to_us=True,
                        include_field_ids=True,
                        format_model=_PARQUET,
                    )
                    for b in part.to_batches()
                ]
            )
            opened = self._file_for(key)
            opened.writer.write(arrow)
            opened.rows += arrow.num_rows
            if opened.rows >= self._config.target_file_rows:
                self._close(key.to_path() if key is not None else "")

    def finish(self) -> list[IcebergDataFile]:
        """Write the gathered rows, close every open file; return all data files of the transaction
        (``[]``: no row written)."""
        self._flush()
        for partition_path in list(self._open):
            self._close(partition_path)
        return list(self._done)

    def abort(self) -> None:
        """Delete every file this writer created. Best effort: what is left, lingering cleanup finds."""
        self._pending, self._pending_rows = [], 0
        for opened in self._open.values():
            with contextlib.suppress(Exception):  # never written to, or a broken stream
                opened.writer.close()
        self._open.clear()
        for path in self._written:
            try:
                delete_files(self._table.io, self._config.storage_options, [path])
            except Exception as e:
                log_event(
                    log, logging.WARNING, "cannot delete aborted file", file=path, error=type(e).__name__
                )

    def _file_for(self, key: PartitionKey | None) -> _OpenFile:
        partition_path = key.to_path() if key is not None else ""
        opened = self._open.get(partition_path)
        if opened is None:
            ctx = self._ctx
            name = naming.data_file_name(ctx.partition, ctx.checkpoint_id, ctx.attempt, uuid.uuid4().hex)
            path = naming.data_file_path(self._prefix, partition_path, name)
            output = self._table.io.new_output(path)
            writer = ParquetFormatWriter(output, self._file_schema, self._table.properties)
            opened = _OpenFile(path, writer, key.partition if key is not None else Record())
            self._open[partition_path] = opened
            self._written.append(path)
        return opened

    def _close(self, partition_path: str) -> None:
        opened = self._open.pop(partition_path)
        statistics = opened.writer.close()
        size = len(self._table.io.new_input(opened.path))
        data_file = DataFile.from_args(
            _table_format_version=self._table.format_version,
            content=DataFileContent.DATA,
            file_path=opened.path,
            file_format=FileFormat.PARQUET,
            partition=opened.partition,
            file_size_in_bytes=size,
            sort_order_id=None,
            spec_id=self.spec.spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )
        self._done.append(from_data_file(data_file, self.spec, self.schema))
        log_event(log, logging.DEBUG, "data file closed", file=opened.path, rows=opened.rows, bytes=size)
