"""Configuration of the Google Cloud Storage file sink: a frozen dataclass, validated on
construction (``ConfigError``).

Where: ``location`` is ``gs://<bucket>/<prefix>``. How:
:class:`~twophase.coordinator.storage.GcsStorageOptions` (``storage_options``), the same settings
the GCS checkpoint storage takes; unset ones come from ``GOOGLE_CLOUD_PROJECT``,
``STORAGE_EMULATOR_HOST`` and Application Default Credentials in each process that opens a
client, executors included. Credentials are never in ``repr``, logs or checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twophase.coordinator.storage.gcs import GcsStorageOptions, parse_location
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.files.layout import FileFormat as FileFormat
from twophase.sinks.internal.files.layout import MiB, check_encoding, check_layout
from twophase.sinks.internal.files.layout import RollingPolicy as RollingPolicy
from twophase.sinks.internal.files.naming import normalize_prefix

CHUNK_QUANTUM = 256 * 1024
"""GCS persists the chunks of a resumable upload in multiples of 256 KiB (all but the last)."""

MIN_CHUNK_BYTES = 1 * MiB
"""Our lower bound of ``chunk_size_bytes`` (GCS takes 256 KiB; tiny chunks waste requests)."""

MAX_CHUNK_BYTES = 1024 * MiB
"""Our upper bound of ``chunk_size_bytes`` (it is also the memory buffered per open file)."""

MAX_OBJECT_BYTES = 5 * 1024 * 1024 * MiB
"""GCS's maximum size of one object (5 TiB)."""

SESSION_LIFETIME_S = 7 * 24 * 3600
"""GCS expires a resumable upload session a week after it was initiated ("Resumable uploads")."""

_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass(frozen=True)
class GcsFileSinkConfig:
    """Where and how the GCS file sink writes. Validated on construction.

    Every file rolls at every checkpoint: a file never spans checkpoints, so its resumable upload
    session waits at most one checkpoint interval for the driver to finalize it, far within the
    seven days GCS keeps a session.

    Attributes:
        location: ``gs://<bucket>/<prefix>``; the bucket must exist (checked by
            ``GcsFileSink.validate``). The prefix allows letters, digits and ``! - _ . * ' ( ) / =``.
        format: ``FileFormat`` or its value (``"parquet"``, ``"jsonl"``, ``"csv"``).
        partition_by: Hive-style partition columns, in path order. They are not written into files.
        columns: the sink's projection of each batch (only these columns, in this order); ``None``
            = every column.
        chunk_size_bytes: size of the chunks uploaded into a session by the task (bytes, a multiple
            of 256 KiB within 1 MiB..1 GiB); also the memory buffered per open file.
        rolling: ``max_file_bytes`` and ``rollover_interval_ms`` roll a file within an epoch;
            every file rolls at the checkpoint anyway.
        max_open_files: per subtask; opening one more rolls the least recently written file.
        parquet_compression: Parquet codec (``none``, ``snappy``, ``gzip``, ``brotli``, ``lz4``, ``zstd``).
        parquet_row_group_bytes: Arrow bytes buffered per open Parquet file before a row group is written.
        csv_header: write a header line at the start of each CSV file.
        json_column: JSON lines only: a string column already holding one JSON document per row.
        non_finite_floats: JSON lines encoded here: NaN and ±Infinity become ``null`` (``"null"``)
            or fail the row (``"error"``).
        storage_options: how to reach GCS (project, credentials, an emulator's URL, timeout).

    Raises:
        ConfigError: any invalid field, naming it.
    """

    location: str
    format: FileFormat | str = FileFormat.PARQUET
    partition_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    chunk_size_bytes: int = 8 * MiB
    rolling: RollingPolicy = field(default_factory=RollingPolicy)
    max_open_files: int = 64
    parquet_compression: str = "snappy"
    parquet_row_group_bytes: int = 32 * MiB
    csv_header: bool = True
    json_column: str | None = None
    non_finite_floats: str = "null"
    storage_options: GcsStorageOptions = field(default_factory=GcsStorageOptions)

    def __post_init__(self) -> None:
        bucket, path = parse_location(self.location)
        if not set(bucket) <= _BUCKET_CHARS or not 3 <= len(bucket) <= 222:
            raise ConfigError(
                f"invalid GCS bucket name {bucket!r}: lower-case letters, digits, '-', '_' and '.' "
                "(3-63 characters, 222 with dots)"
            )
        normalize_prefix(path, "GCS")
        check_layout(self, "GCS")
        if (
            not MIN_CHUNK_BYTES <= self.chunk_size_bytes <= MAX_CHUNK_BYTES
            or self.chunk_size_bytes % CHUNK_QUANTUM
        ):
            raise ConfigError(
                f"chunk_size_bytes must be a multiple of 256 KiB within "
                f"{MIN_CHUNK_BYTES}..{MAX_CHUNK_BYTES}, got {self.chunk_size_bytes}"
            )
        check_encoding(self)
        if not isinstance(self.storage_options, GcsStorageOptions):
            raise ConfigError("storage_options must be a GcsStorageOptions (twophase.GcsStorageOptions)")
        if self.storage_options.timeout_s <= 0:
            raise ConfigError(f"storage_options.timeout_s must be > 0, got {self.storage_options.timeout_s}")

    @property
    def bucket(self) -> str:
        """The bucket."""
        return parse_location(self.location)[0]

    @property
    def prefix(self) -> str:
        """The object name prefix, without leading or trailing '/' (``""`` = the bucket's root)."""
        return normalize_prefix(parse_location(self.location)[1], "GCS")

    @property
    def file_format(self) -> FileFormat:
        """``format`` as a :class:`FileFormat` (normalized on construction)."""
        return FileFormat(self.format)
