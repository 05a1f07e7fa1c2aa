"""The Iceberg sink's committable: one subtask's data files of one checkpoint, as plain JSON-able fields.

Each :class:`IcebergDataFile` carries what an Iceberg manifest entry needs of a data file (Iceberg
table spec, "Manifests": ``data_file`` struct): location, size, record count, the partition tuple,
the spec id, and the column metrics keyed by field id (sizes, value/null/NaN counts, lower and
upper bounds). Partition values are stored in the spec's binary single-value serialization
(Iceberg table spec, Appendix D), encoded by pyiceberg's ``conversions.to_bytes``; bounds are
already in that form. :func:`to_data_file` rebuilds pyiceberg's ``DataFile`` from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from twophase.sinks.codec import CommittableCodec

Counts = tuple[tuple[int, int], ...]
"""``((field id, value), ...)``, ascending by field id."""
Bounds = tuple[tuple[int, bytes], ...]
"""``((field id, serialized bound), ...)``, ascending by field id."""


@dataclass(frozen=True)
class IcebergDataFile:
    """One Parquet data file as an Iceberg manifest entry needs it.

    Attributes:
        path: the file's full location (``s3://…`` or ``file:///…``).
        size: file size in bytes.
        record_count: rows in the file.
        spec_id: the partition spec the partition tuple follows.
        partition: the partition tuple, one serialized value (or ``None`` for null) per spec field.
        column_sizes, value_counts, null_value_counts, nan_value_counts: per field id.
        lower_bounds, upper_bounds: serialized per field id.
        split_offsets: row group start offsets (bytes).
    """

    path: str
    size: int
    record_count: int
    spec_id: int
    partition: tuple[bytes | None, ...]
    column_sizes: Counts = ()
    value_counts: Counts = ()
    null_value_counts: Counts = ()
    nan_value_counts: Counts = ()
    lower_bounds: Bounds = ()
    upper_bounds: Bounds = ()
    split_offsets: tuple[int, ...] = ()


@dataclass(frozen=True)
class IcebergCommittable:
    """What one subtask pre-committed for one checkpoint.

    Attributes:
        table: the table identifier (as in the sink's config).
        table_uuid: the table's ``table-uuid`` when the files were written: a table dropped and
            re-created under the same name is another table, and the commit refuses it.
        job_id: the job; recorded in the snapshot summary.
        sink_name: the sink; recorded in the snapshot summary.
        checkpoint_id: the checkpoint; recorded in the snapshot summary of its append.
        partition: the subtask's partition index.
        attempt: the Spark task attempt that wrote the files.
        num_partitions: the epoch's parallelism.
        schema_id: the table schema the files were written with.
        files: the data files, at least one.
    """

    table: str
    table_uuid: str
    job_id: str
    sink_name: str
    checkpoint_id: int
    partition: int
    attempt: int
    num_partitions: int
    schema_id: int
    files: tuple[IcebergDataFile, ...]

    @property
    def num_records(self) -> int:
        """Rows over all files."""
        return sum(f.record_count for f in self.files)

    @property
    def num_bytes(self) -> int:
        """Bytes over all files."""
        return sum(f.size for f in self.files)


CODEC: CommittableCodec[IcebergCommittable] = CommittableCodec(
    IcebergCommittable, kind="iceberg.data_files", version=1
)
"""Versioned JSON codec of :class:`IcebergCommittable` (kind ``iceberg.data_files``, version 1)."""


def _partition_types(spec: PartitionSpec, schema: Schema) -> list[Any]:
    return [f.transform.result_type(schema.find_type(f.source_id)) for f in spec.fields]


def from_data_file(data_file: DataFile, spec: PartitionSpec, schema: Schema) -> IcebergDataFile:
    """The committable form of a pyiceberg ``DataFile`` written with ``spec`` and ``schema``."""
    types = _partition_types(spec, schema)
    values = [data_file.partition[i] for i in range(len(types))]
    return IcebergDataFile(
        path=data_file.file_path,
        size=data_file.file_size_in_bytes,
        record_count=data_file.record_count,
        spec_id=spec.spec_id,
        partition=tuple(None if v is None else to_bytes(t, v) for t, v in zip(types, values, strict=True)),
        column_sizes=_pairs(data_file.column_sizes),
        value_counts=_pairs(data_file.value_counts),
        null_value_counts=_pairs(data_file.null_value_counts),
        nan_value_counts=_pairs(data_file.nan_value_counts),
        lower_bounds=_pairs(data_file.lower_bounds),
        upper_bounds=_pairs(data_file.upper_bounds),
        split_offsets=tuple(data_file.split_offsets or ()),
    )


def to_data_file(f: IcebergDataFile, spec: PartitionSpec, schema: Schema, format_version: Any) -> DataFile:
    """pyiceberg's ``DataFile`` for ``f`` (``spec`` must be the one ``f.spec_id`` names).

    Raises:
        ValueError: the partition tuple does not fit ``spec``.
    """
    types = _partition_types(spec, schema)
    if len(types) != len(f.partition) or spec.spec_id != f.spec_id:
        raise ValueError(f"{f.path}: partition of spec {f.spec_id} does not fit spec {spec.spec_id}")
    values = [None if b is None else from_bytes(t, b) for t, b in zip(types, f.partition, strict=True)]
    return DataFile.from_args(
        _table_format_version=format_version,
        content=DataFileContent.DATA,
        file_path=f.path,
        file_format=FileFormat.PARQUET,
        partition=Record(*values),
        file_size_in_bytes=f.size,
        record_count=f.record_count,
        column_sizes=dict(f.column_sizes),
        value_counts=dict(f.value_counts),
        null_value_counts=dict(f.null_value_counts),
        nan_value_counts=dict(f.nan_value_counts),
        lower_bounds=dict(f.lower_bounds),
        upper_bounds=dict(f.upper_bounds),
        split_offsets=list(f.split_offsets),
        sort_order_id=None,
        spec_id=f.spec_id,
        equality_ids=None,
        key_metadata=None,
    )


def _pairs(mapping: Any) -> Any:
    return tuple(sorted((int(k), v) for k, v in (mapping or {}).items()))
