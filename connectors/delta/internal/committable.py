"""The Delta sink's committable: one subtask's Add actions of one checkpoint, plus what the commit needs.

Each :class:`DeltaAddFile` mirrors the fields of a Delta ``add`` action (PROTOCOL.md, "Add File and
Remove File"): ``path`` (relative, URI-encoded), ``partitionValues`` (strings or null, per
"Partition Value Serialization"), ``size`` (bytes), ``modificationTime`` (ms since the epoch),
``dataChange`` (always true here) and ``stats`` (JSON, "Per-file Statistics").
"""

from __future__ import annotations

from dataclasses import dataclass

from twophase.sinks.codec import CommittableCodec


@dataclass(frozen=True)
class DeltaAddFile:
    """One data file as a Delta Add action.

    Attributes:
        path: relative to the table root, URI-encoded (``naming.encode_add_path``).
        size: file size in bytes.
        partition_values: ``((column, serialized value or None), ...)`` in partition-column order.
        modification_time: when the file was closed, ms since the epoch.
        stats: the ``stats`` JSON string (numRecords, minValues, maxValues, nullCount).
        num_records: rows in the file (also inside ``stats``; kept for cheap accounting).
    """

    path: str
    size: int
    partition_values: tuple[tuple[str, str | None], ...]
    modification_time: int
    stats: str
    num_records: int

    @property
    def partition_values_dict(self) -> dict[str, str | None]:
        """``partition_values`` as the ``partitionValues`` map."""
        return dict(self.partition_values)


@dataclass(frozen=True)
class DeltaCommittable:
    """What one subtask pre-committed for one checkpoint.

    Attributes:
        table_uri: the table root the files were written under (as in the sink's config).
        app_id: the ``txn.appId``, ``"<job-id>:<sink>"`` (PROTOCOL.md, "Transaction Identifiers").
        checkpoint_id: the checkpoint; becomes ``txn.version`` of the checkpoint's commit.
        partition: the subtask's partition index.
        attempt: the Spark task attempt that wrote the files.
        num_partitions: the epoch's parallelism.
        schema_json: the Delta schema (``deltalake.Schema.to_json()``) of the data, partition
            columns included; used to create the table on the first commit and to check it later.
        partition_columns: the table's partition columns.
        adds: the data files, at least one.
    """

    table_uri: str
    app_id: str
    checkpoint_id: int
    partition: int
    attempt: int
    num_partitions: int
    schema_json: str
    partition_columns: tuple[str, ...]
    adds: tuple[DeltaAddFile, ...]

    @property
    def num_records(self) -> int:
        """Rows over all files."""
        return sum(a.num_records for a in self.adds)


CODEC: CommittableCodec[DeltaCommittable] = CommittableCodec(
    DeltaCommittable, kind="delta.add_files", version=1
)
"""Versioned JSON codec of :class:`DeltaCommittable` (kind ``delta.add_files``, version 1)."""
