"""Rows of one batch split by a file sink's partition columns (Hive paths ``col=value/...``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from twophase.connectors.objectstore.internal import naming
from twophase.connectors.objectstore.internal.formats import project_batch, validate_schema
from twophase.connectors.objectstore.internal.layout import FileLayout
from twophase.sinks.errors import RecordError


def split_by_partition(batch: pa.RecordBatch, columns: tuple[str, ...]) -> list[tuple[str, pa.RecordBatch]]:
    """Split a batch by the values of its partition columns.

    Returns:
        ``[(hive partition path, rows of that partition with every column)]`` in order of first
        appearance; ``[("", batch)]`` without partition columns.

    Raises:
        RecordError: rows would be lost (a value no filter matches), which must never happen silently.
    """
    if not columns or batch.num_rows == 0:
        return [("", batch)] if batch.num_rows else []
    table = pa.Table.from_batches([batch])
    distinct = table.select(list(columns)).group_by(list(columns), use_threads=False).aggregate([])
    out: list[tuple[str, pa.RecordBatch]] = []
    for values in distinct.to_pylist():
        mask = None
        for col in columns:
            value = values[col]
            arr = batch.column(col)
            if value is None:
                m = pc.is_null(arr)
            elif isinstance(value, float) and value != value:  # NaN equals nothing, not even NaN
                m = pc.is_nan(arr)
            else:
                m = pc.equal(arr, pa.scalar(value, type=arr.type))
            m = pc.fill_null(m, False)
            mask = m if mask is None else pc.and_(mask, m)
        path = naming.hive_partition_path(columns, tuple(values[c] for c in columns))
        out.append((path, batch.filter(mask)))
    if sum(b.num_rows for _, b in out) != batch.num_rows:
        raise RecordError(f"splitting a batch of {batch.num_rows} rows by {columns} lost rows")
    return out


def file_batches(
    config: FileLayout, batch: pa.RecordBatch, file_schema: pa.Schema | None
) -> tuple[pa.Schema, list[tuple[str, pa.RecordBatch]]]:
    """One incoming batch as the rows each partition's file gets: projected to ``config.columns``
    (first, so that splitting filters only the columns written), split by partition path, reduced
    to the files' columns.

    Args:
        config: the sink's layout.
        batch: the incoming rows.
        file_schema: the files' schema from an earlier batch, or ``None`` for the first one (then
            checked and derived with
            :func:`~twophase.connectors.objectstore.internal.formats.validate_schema`).

    Returns:
        The files' schema and ``[(hive partition path, rows)]`` in order of first appearance.

    Raises:
        SchemaError: the batch lacks a column of the projection or does not fit the configuration.
        RecordError: see :func:`split_by_partition`.
    """
    batch = project_batch(config, batch)
    schema = file_schema if file_schema is not None else validate_schema(config, batch.schema)
    names = schema.names
    return schema, [
        (path, rows.select(names)) for path, rows in split_by_partition(batch, config.partition_by)
    ]
