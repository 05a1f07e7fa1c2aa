"""Rows of one batch split by a file sink's partition columns (Hive paths ``col=value/...``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from twophase.sinks.errors import RecordError
from twophase.sinks.internal.files import naming


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
