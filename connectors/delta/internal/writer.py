"""Executor side of the Delta sink: one subtask's Parquet data files for one checkpoint.

Rows are split by partition values; each partition has at most one open file, buffered into
row groups of ``row_group_rows`` and rolled once it reaches ``target_file_size_bytes``.
Files are invisible to readers until the checkpoint's commit adds them (Delta PROTOCOL.md: only
files referenced by an Add action belong to the table).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from twophase.connectors.delta.config import DeltaSinkConfig
from twophase.connectors.delta.internal import naming
from twophase.connectors.delta.internal.committable import DeltaAddFile
from twophase.connectors.delta.internal.filesystem import TableLocation
from twophase.connectors.delta.internal.partitions import split_by_partition
from twophase.connectors.delta.internal.schema import delta_schema_json, project_schema, writable_schema
from twophase.connectors.delta.internal.stats import StatsCollector
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import ConfigError, RecordError, SchemaError, ServiceUnavailableError
from twophase.sinks.internal.s3_access import denied_in_message
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


@dataclass
class _OpenFile:
    relative_path: str
    partition_values: tuple[tuple[str, str | None], ...]
    stream: pa.NativeFile
    writer: pq.ParquetWriter
    stats: StatsCollector
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0


class DeltaFileWriter:
    """Writes one subtask's data files. Not thread-safe; lives inside one Spark task.

    Args:
        config: the sink's configuration.
        ctx: the subtask's context (job, sink, checkpoint, partition, attempt).
        location: the table root's file system.

    Errors from :meth:`write` and :meth:`finish`:
        SchemaError: a batch lacks a column of ``config.columns``, its (projected) schema differs
            from the first batch's, or cannot be written.
        RecordError: a value cannot be written (e.g. a nanosecond timestamp not representable in
            µs: it is refused, never truncated).
        ConfigError: the table root is not writable (permission denied).
        S3AccessDeniedError: S3 refused for lack of permission (names the IAM action and key).
        ServiceUnavailableError: storage failed (after pyarrow's own retries).
    """

    def __init__(self, config: DeltaSinkConfig, ctx: WriterContext, location: TableLocation) -> None:
        self._config = config
        self._ctx = ctx
        self._location = location
        self._token = naming.job_token(ctx.job_id, ctx.sink_name)
        self._input_schema: pa.Schema | None = None
        self._file_schema: pa.Schema | None = None
        self._schema_json: str | None = None
        self._open: dict[tuple[str | None, ...], _OpenFile] = {}
        self._finished: list[DeltaAddFile] = []
        self._created: list[str] = []  # relative paths of every file opened, for abort
        self._batches = 0

    @property
    def schema_json(self) -> str | None:
        """The Delta schema JSON of the data written, or ``None`` before the first batch."""
        return self._schema_json

    @property
    def created_paths(self) -> tuple[str, ...]:
        """Relative (not URI-encoded) paths of every file this writer created."""
        return tuple(self._created)

    def write(self, batch: pa.RecordBatch) -> None:
        """Project ``batch`` to ``config.columns``, split it by partition and append it to the open files."""
        self._batches += 1
        if batch.num_rows == 0:
            return
        if self._config.columns is not None:
            project_schema(batch.schema, self._config.columns)  # names the missing columns, if any
            batch = batch.select(list(self._config.columns))  # zero-copy
        self._check_schema(batch.schema)
        assert self._file_schema is not None
        table = pa.Table.from_batches([batch])
        try:
            table = table.cast(writable_schema(table.schema), safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise RecordError(
                f"batch {self._batches} of partition {self._ctx.partition} cannot be written to Delta: {e}"
            ) from e
        for values, part in split_by_partition(table, self._config.partition_by):
            open_file = self._open.get(values)
            if open_file is None:
                open_file = self._open_file(values, part.schema)
                self._open[values] = open_file
            open_file.pending.append(part)
            open_file.pending_rows += part.num_rows
            if open_file.pending_rows >= self._config.row_group_rows:
                self._flush(open_file)
                if open_file.stream.tell() >= self._config.target_file_size_bytes:
                    self._close(values)

    def finish(self) -> list[DeltaAddFile]:
        """Close every open file; return all files written (empty if no rows arrived)."""
        for values in list(self._open):
            self._close(values)
        return list(self._finished)

    def abort(self) -> None:
        """Close and delete every file this writer created. Best effort; never raises."""
        for open_file in self._open.values():
            with contextlib.suppress(Exception):
                open_file.writer.close()
            with contextlib.suppress(Exception):
                open_file.stream.close()
        self._open.clear()
        try:
            self._location.delete(self._created)
        except Exception as e:  # what stays is found by abort_lingering
            log_event(log, logging.WARNING, "delete failed", files=len(self._created), error=e)
        self._finished.clear()

    # --- internals ---------------------------------------------------------------------------

    def _check_schema(self, schema: pa.Schema) -> None:
        if self._input_schema is None:
            self._schema_json = delta_schema_json(schema, self._config.partition_by)
            self._input_schema = schema
            self._file_schema = writable_schema(schema)
            return
        if not schema.equals(self._input_schema, check_metadata=False):
            raise SchemaError(
                f"batch {self._batches} of partition {self._ctx.partition} has schema {schema}, "
                f"unlike the first batch's {self._input_schema}"
            )

    def _open_file(self, values: tuple[str | None, ...], schema: pa.Schema) -> _OpenFile:
        directory = naming.partition_directory(self._config.partition_by, values)
        name = naming.data_file_name(
            self._ctx.partition, self._ctx.checkpoint_id, self._token, uuid.uuid4().hex
        )
        rel = naming.data_file_path(directory, name)
        path = self._location.path(rel)
        with _storage_errors(rel):
            if self._location.is_local:
                self._location.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            stream = self._location.fs.open_output_stream(path)
        self._created.append(rel)
        try:
            writer = pq.ParquetWriter(
                stream,
                schema,
                compression=self._config.compression,
                compression_level=self._config.compression_level,
                coerce_timestamps="us",
                allow_truncated_timestamps=False,
            )
        except Exception:
            stream.close()
            raise
        pairs = tuple(zip(self._config.partition_by, values, strict=True))
        log_event(log, logging.DEBUG, "opened", file=rel)
        return _OpenFile(
            rel, pairs, stream, writer, StatsCollector(schema, self._config.string_stats_prefix_length)
        )

    def _flush(self, open_file: _OpenFile) -> None:
        if not open_file.pending:
            return
        table = pa.concat_tables(open_file.pending)
        open_file.pending.clear()
        open_file.pending_rows = 0
        with _storage_errors(open_file.relative_path):
            open_file.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        open_file.stats.update(table)

    def _close(self, values: tuple[str | None, ...]) -> None:
        open_file = self._open.pop(values)
        self._flush(open_file)
        with _storage_errors(open_file.relative_path):
            open_file.writer.close()
            size = open_file.stream.tell()
            open_file.stream.close()
        add = DeltaAddFile(
            path=naming.encode_add_path(open_file.relative_path),
            size=size,
            partition_values=open_file.partition_values,
            modification_time=int(time.time() * 1000),
            stats=open_file.stats.to_json(),
            num_records=open_file.stats.num_records,
        )
        self._finished.append(add)
        log_event(log, logging.INFO, "closed", file=open_file.relative_path, bytes=size, rows=add.num_records)


@contextlib.contextmanager
def _storage_errors(rel: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        denied = denied_in_message(e)
        if denied is not None:
            raise denied from e
        if isinstance(e, (PermissionError, NotADirectoryError, FileExistsError, IsADirectoryError)):
            raise ConfigError(f"Delta table root is not writable ({rel}): {e}") from e
        raise ServiceUnavailableError(f"writing Delta data file {rel} failed: {e}") from e
