"""Configuration of the S3 sink: frozen dataclasses, validated on construction (ConfigError).

How the sink reaches S3 is :class:`~twophase.sinks.s3_options.S3Options` (``storage_options``):
unset fields come from the standard AWS chain in each process that opens a client, executors
included (environment, shared config, instance/container roles), which is preferred: the config
object is pickled to executors. Explicit secrets are masked in ``repr`` and never logged nor
written to checkpoint metadata.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from twophase.connectors.s3.internal.naming import normalize_prefix, validate_bucket
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

MiB = 1024 * 1024

MIN_PART_BYTES = 5 * MiB
"""S3's minimum part size for every part of a multipart upload except the last (bytes)."""

MAX_PART_BYTES = 5 * 1024 * MiB
"""S3's maximum part size (bytes)."""

MAX_PARTS = 10_000
"""S3's maximum number of parts in one multipart upload."""

MAX_UPLOADS_IN_FLIGHT = 16
"""Upper bound of ``S3SinkConfig.uploads_in_flight`` (each is a part held in memory)."""

STORAGE_CLASSES = frozenset(
    {
        "STANDARD",
        "REDUCED_REDUNDANCY",
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER",
        "DEEP_ARCHIVE",
        "GLACIER_IR",
        "EXPRESS_ONEZONE",
        "OUTPOSTS",
        "SNOW",
    }
)
SSE_ALGORITHMS = frozenset({"AES256", "aws:kms", "aws:kms:dsse"})
PARQUET_COMPRESSIONS = frozenset({"none", "snappy", "gzip", "brotli", "lz4", "zstd"})


def validate_columns(columns: object) -> tuple[str, ...]:
    """A ``columns`` projection as a tuple of names.

    Raises:
        ConfigError: not a sequence of strings (a bare string is refused), empty, an empty name or
            a repeated name.
    """
    if isinstance(columns, (str, bytes)) or not isinstance(columns, (tuple, list)):
        raise ConfigError(f"columns must be a tuple of column names, got {columns!r}")
    names = tuple(columns)
    if not names:
        raise ConfigError("columns must name at least one column (None = every column)")
    if not all(isinstance(c, str) and c for c in names):
        raise ConfigError(f"columns must be non-empty strings, got {names!r}")
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise ConfigError(f"columns repeats {repeated}")
    return names


class FileFormat(enum.Enum):
    """Output file format.

    - ``PARQUET``: rolls on every checkpoint (a Parquet file cannot be resumed: its footer is
      written last) and on size.
    - ``JSON_LINES``/``CSV``: row formats; files may span checkpoints and roll by
      :class:`RollingPolicy`.
    """

    PARQUET = "parquet"
    JSON_LINES = "jsonl"
    CSV = "csv"

    @property
    def spans_checkpoints(self) -> bool:
        """Whether a file of this format may stay open across checkpoints."""
        return self is not FileFormat.PARQUET

    @property
    def extension(self) -> str:
        """File name extension, without the dot."""
        return self.value


@dataclass(frozen=True)
class RollingPolicy:
    """When a file is closed ("rolled") and becomes a committable, as Flink's DefaultRollingPolicy.

    A file rolls when any limit is reached. Size is checked after every written batch; age and
    inactivity at every batch and checkpoint (there are no timers in a Spark task). Parquet files
    roll on every checkpoint regardless of ``on_checkpoint``. The defaults are Flink's
    DefaultRollingPolicy's (128 MiB, 60 s open, 60 s inactive), so a small stream's files become
    visible at the first checkpoint a minute after they opened, not an hour later.

    Attributes:
        max_file_bytes: roll once a file holds at least this many bytes (≥ 1).
        rollover_interval_ms: roll once a file has been open this long (ms), or ``None``.
        inactivity_interval_ms: roll once a file has not been written for this long (ms), or ``None``.
        on_checkpoint: roll every file on every checkpoint (Flink's OnCheckpointRollingPolicy).
    """

    max_file_bytes: int = 128 * MiB
    rollover_interval_ms: int | None = 60_000
    inactivity_interval_ms: int | None = 60_000
    on_checkpoint: bool = False

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1:
            raise ConfigError(f"rolling.max_file_bytes must be >= 1, got {self.max_file_bytes}")
        for name in ("rollover_interval_ms", "inactivity_interval_ms"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"rolling.{name} must be >= 1 ms or None, got {value}")


@dataclass(frozen=True)
class S3SinkConfig:
    """Where and how the S3 sink writes. Validated on construction.

    Attributes:
        bucket: the bucket (must exist; checked by ``S3Sink.validate``).
        prefix: key prefix, e.g. ``"warehouse/events"``; leading/trailing '/' stripped; ``""`` = root.
            Allowed characters: letters, digits, ``! - _ . * ' ( ) / =``.
        format: ``FileFormat`` or its value (``"parquet"``, ``"jsonl"``, ``"csv"``).
        partition_by: Hive-style partition columns, in path order. They are not written into files.
        columns: the sink's projection of each incoming batch (DESIGN.md §6): only these columns, in
            this order, are written (and the partition columns, which must be among them); other
            columns of the batch are ignored. ``None`` = every column. Non-empty, distinct names.
        part_size_bytes: size of the multipart upload parts (bytes, 5 MiB..5 GiB); also the memory
            buffered per open file.
        uploads_in_flight: parts of one open file uploaded in the background while encoding goes
            on (threads of the subtask, 0..16; 0 = every part uploaded synchronously). Memory per
            open file grows by up to this many parts; pre-commit waits for all of them.
        rolling: the rolling policy (row formats; Parquet uses only ``max_file_bytes``).
        max_open_files: per subtask; opening one more rolls the least recently written file.
        parquet_compression: Parquet codec (``none``, ``snappy``, ``gzip``, ``brotli``, ``lz4``, ``zstd``).
        parquet_row_group_bytes: Arrow bytes buffered per open Parquet file before a row group is
            written (memory per open file, on top of one part).
        csv_header: write a header line at the start of each CSV file.
        json_column: JSON lines only: a string column already holding one JSON document per row
            (computed upstream, e.g. Spark's ``to_json(struct(*))``) written as is. Without it,
            rows are encoded in Python (slower).
        non_finite_floats: JSON lines encoded here (:mod:`twophase.sinks.json_codec`): NaN and
            ±Infinity, which JSON (RFC 8259) has no tokens for, become ``null`` (``"null"``, the
            default) or fail the row with :class:`RecordError` (``"error"``). ``json_column``
            values are written as given.
        storage_options: how to reach S3 (endpoint, region, credentials or profile, path style,
            TLS); unset fields come from the standard AWS chain (``AWS_ENDPOINT_URL``, ...).
        server_side_encryption: ``AES256``, ``aws:kms`` or ``aws:kms:dsse``, passed through.
        sse_kms_key_id: KMS key for ``aws:kms*`` encryption.
        storage_class: S3 storage class passed through (``STANDARD_IA``, ...).
        max_attempts: attempts per S3 call for transient errors (throttling, 5xx, connection resets).
        retry_initial_backoff_ms / retry_max_backoff_ms: exponential backoff with jitter (ms).
        connect_timeout_ms / read_timeout_ms: socket timeouts (ms).

    Raises:
        ConfigError: any invalid field, naming it.
    """

    bucket: str
    prefix: str
    format: FileFormat | str = FileFormat.PARQUET
    partition_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    part_size_bytes: int = 8 * MiB
    uploads_in_flight: int = 2
    rolling: RollingPolicy = field(default_factory=RollingPolicy)
    max_open_files: int = 64
    parquet_compression: str = "snappy"
    parquet_row_group_bytes: int = 32 * MiB
    csv_header: bool = True
    json_column: str | None = None
    non_finite_floats: str = "null"
    storage_options: S3Options = field(default_factory=S3Options)
    server_side_encryption: str | None = None
    sse_kms_key_id: str | None = None
    storage_class: str | None = None
    max_attempts: int = 5
    retry_initial_backoff_ms: int = 200
    retry_max_backoff_ms: int = 10_000
    connect_timeout_ms: int = 10_000
    read_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        validate_bucket(self.bucket)
        object.__setattr__(self, "prefix", normalize_prefix(self.prefix))
        try:
            object.__setattr__(self, "format", FileFormat(self.format))
        except ValueError:
            allowed = [f.value for f in FileFormat]
            raise ConfigError(f"unknown S3 file format {self.format!r}; one of {allowed}") from None
        if isinstance(self.partition_by, str) or not all(isinstance(c, str) for c in self.partition_by):
            raise ConfigError("partition_by must be a tuple of column names")
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        if any(not c for c in self.partition_by) or len(set(self.partition_by)) != len(self.partition_by):
            raise ConfigError(f"partition_by must be distinct non-empty names, got {self.partition_by!r}")
        if self.columns is not None:
            object.__setattr__(self, "columns", validate_columns(self.columns))
            outside = [c for c in self.partition_by if c not in self.columns]
            if outside:
                raise ConfigError(f"partition columns {outside} are not among columns {list(self.columns)}")
            if self.json_column is not None and self.json_column not in self.columns:
                raise ConfigError(
                    f"json_column {self.json_column!r} is not among columns {list(self.columns)}"
                )
        if not MIN_PART_BYTES <= self.part_size_bytes <= MAX_PART_BYTES:
            raise ConfigError(
                f"part_size_bytes must be within {MIN_PART_BYTES}..{MAX_PART_BYTES} (S3 limits), "
                f"got {self.part_size_bytes}"
            )
        if not 0 <= self.uploads_in_flight <= MAX_UPLOADS_IN_FLIGHT:
            raise ConfigError(
                f"uploads_in_flight must be within 0..{MAX_UPLOADS_IN_FLIGHT}, got {self.uploads_in_flight}"
            )
        if not isinstance(self.rolling, RollingPolicy):
            raise ConfigError("rolling must be a RollingPolicy")
        if self.max_open_files < 1:
            raise ConfigError(f"max_open_files must be >= 1, got {self.max_open_files}")
        if self.parquet_compression not in PARQUET_COMPRESSIONS:
            raise ConfigError(
                f"parquet_compression {self.parquet_compression!r} not one of {sorted(PARQUET_COMPRESSIONS)}"
            )
        if self.parquet_row_group_bytes < 1:
            raise ConfigError(f"parquet_row_group_bytes must be >= 1, got {self.parquet_row_group_bytes}")
        if self.non_finite_floats not in ("null", "error"):
            raise ConfigError(f"non_finite_floats must be 'null' or 'error', got {self.non_finite_floats!r}")
        if self.json_column is not None and self.file_format is not FileFormat.JSON_LINES:
            raise ConfigError("json_column applies to the JSON lines format only")
        if self.json_column is not None and self.json_column in self.partition_by:
            raise ConfigError("json_column cannot be a partition column")
        if not isinstance(self.storage_options, S3Options):
            raise ConfigError("storage_options must be an S3Options (twophase.S3Options)")
        if self.server_side_encryption is not None and self.server_side_encryption not in SSE_ALGORITHMS:
            raise ConfigError(
                f"server_side_encryption {self.server_side_encryption!r} not one of {sorted(SSE_ALGORITHMS)}"
            )
        if self.sse_kms_key_id is not None and not (self.server_side_encryption or "").startswith("aws:kms"):
            raise ConfigError("sse_kms_key_id needs server_side_encryption 'aws:kms' or 'aws:kms:dsse'")
        if self.storage_class is not None and self.storage_class not in STORAGE_CLASSES:
            raise ConfigError(f"storage_class {self.storage_class!r} not one of {sorted(STORAGE_CLASSES)}")
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in (
            "retry_initial_backoff_ms",
            "retry_max_backoff_ms",
            "connect_timeout_ms",
            "read_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1 ms, got {getattr(self, name)}")

    @property
    def file_format(self) -> FileFormat:
        """``format`` as a :class:`FileFormat` (normalized on construction)."""
        return FileFormat(self.format)

    def extra_put_args(self) -> dict[str, str]:
        """Pass-through arguments for CreateMultipartUpload/PutObject (encryption, storage class)."""
        args: dict[str, str] = {}
        if self.server_side_encryption is not None:
            args["ServerSideEncryption"] = self.server_side_encryption
        if self.sse_kms_key_id is not None:
            args["SSEKMSKeyId"] = self.sse_kms_key_id
        if self.storage_class is not None:
            args["StorageClass"] = self.storage_class
        return args
