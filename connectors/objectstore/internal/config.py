"""The base of the configs of the file sinks whose every file is one part-file transfer rolled at
every checkpoint (Azure Blob Storage, GCS): the location and layout fields, and the order of the
checks every such config runs on construction. Each store's config adds its transfer size, its
storage options and the checks of its names (container, bucket).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from twophase.connectors.objectstore.internal.layout import (
    FileFormat,
    MiB,
    RollingPolicy,
    check_encoding,
    check_layout,
)
from twophase.connectors.objectstore.internal.naming import normalize_prefix


@dataclass(frozen=True)
class PartFileSinkConfig:
    """Where and how a part-file sink writes: the fields every store shares. Validated on
    construction by :meth:`__post_init__` (the subclass's checks come in at fixed points, so that
    every store reports the same field first).

    Attributes:
        location: the store's URL of the place files go (``scheme://<place>/<prefix>``).
        format: ``FileFormat`` or its value (``"parquet"``, ``"jsonl"``, ``"csv"``).
        partition_by: Hive-style partition columns, in path order. They are not written into files.
        columns: the sink's projection of each batch (only these columns, in this order); ``None``
            = every column.
        rolling: ``max_file_bytes`` and ``rollover_interval_ms`` roll a file within an epoch;
            every file rolls at the checkpoint anyway.
        max_open_files: per subtask; opening one more rolls the least recently written file.
        parquet_compression: Parquet codec (``none``, ``snappy``, ``gzip``, ``brotli``, ``lz4``, ``zstd``).
        parquet_row_group_bytes: Arrow bytes buffered per open Parquet file before a row group is written.
        csv_header: write a header line at the start of each CSV file.
        json_column: JSON lines only: a string column already holding one JSON document per row.
        non_finite_floats: JSON lines encoded here: NaN and ±Infinity become ``null`` (``"null"``)
            or fail the row (``"error"``).

    Raises:
        ConfigError: any invalid field, naming it.
    """

    STORE: ClassVar[str] = "object store"
    """The store's name in messages (``"Azure"``, ``"GCS"``)."""

    location: str
    format: FileFormat | str = FileFormat.PARQUET
    partition_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    rolling: RollingPolicy = field(default_factory=RollingPolicy)
    max_open_files: int = 64
    parquet_compression: str = "snappy"
    parquet_row_group_bytes: int = 32 * MiB
    csv_header: bool = True
    json_column: str | None = None
    non_finite_floats: str = "null"

    def __post_init__(self) -> None:
        self.check_place()
        normalize_prefix(self.location_path, self.STORE)
        check_layout(self, self.STORE)
        self.check_transfer()
        check_encoding(self)
        self.check_storage()

    def check_place(self) -> None:
        """Check the location's scheme and the store's name of the place (container, bucket).

        Raises:
            ConfigError: not a location of this store, or an invalid name.
        """

    def check_transfer(self) -> None:
        """Check the size of the parts the tasks send (block, chunk).

        Raises:
            ConfigError: out of the store's range.
        """

    def check_storage(self) -> None:
        """Check the storage options and request settings.

        Raises:
            ConfigError: of another type, or out of range.
        """

    @property
    def location_path(self) -> str:
        """The path part of ``location`` (the prefix, not yet normalized)."""
        raise NotImplementedError

    @property
    def prefix(self) -> str:
        """The name prefix, without leading or trailing '/' (``""`` = the root of the place)."""
        return normalize_prefix(self.location_path, self.STORE)

    @property
    def file_format(self) -> FileFormat:
        """``format`` as a :class:`FileFormat` (normalized on construction)."""
        return FileFormat(self.format)
