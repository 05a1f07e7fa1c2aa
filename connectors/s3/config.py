"""Configuration of the S3 sink: frozen dataclasses, validated on construction (ConfigError).

How the sink reaches S3 is :class:`~twophase.sinks.s3_options.S3Options` (``storage_options``):
unset fields come from the standard AWS chain in each process that opens a client, executors
included (environment, shared config, instance/container roles), which is preferred: the config
object is pickled to executors. Explicit secrets are masked in ``repr`` and never logged nor
written to checkpoint metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twophase.connectors.objectstore.internal.layout import FileFormat as FileFormat
from twophase.connectors.objectstore.internal.layout import MiB as MiB
from twophase.connectors.objectstore.internal.layout import RollingPolicy as RollingPolicy
from twophase.connectors.objectstore.internal.layout import check_encoding, check_layout
from twophase.connectors.objectstore.internal.layout import validate_columns as validate_columns
from twophase.connectors.s3.internal.naming import normalize_prefix, validate_bucket
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

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


WRITE_PATHS = ("python", "spark")
"""The values of :attr:`S3SinkConfig.write_path`."""


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
        write_path: ``"python"`` (the default): the job's one pass hands the rows to Python, which
            encodes and uploads them. ``"spark"`` (Parquet only; a job whose only sink this is):
            Spark's own Parquet writer stages each file as a pending multipart upload through the
            S3A magic committer and twophase's committer (``connectors/s3/jvm``), and the sink
            commits them (:mod:`~twophase.connectors.s3.internal.staged_write`); the session needs
            ``hadoop-aws``, ``spark-hadoop-cloud`` and that committer's jar, s3a reaching the same
            store, and Spark's cloud commit protocol (``staged_write.SESSION_SETTINGS``).

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
    write_path: str = "python"

    def __post_init__(self) -> None:
        validate_bucket(self.bucket)
        object.__setattr__(self, "prefix", normalize_prefix(self.prefix))
        check_layout(self, "S3")
        if not MIN_PART_BYTES <= self.part_size_bytes <= MAX_PART_BYTES:
            raise ConfigError(
                f"part_size_bytes must be within {MIN_PART_BYTES}..{MAX_PART_BYTES} (S3 limits), "
                f"got {self.part_size_bytes}"
            )
        if not 0 <= self.uploads_in_flight <= MAX_UPLOADS_IN_FLIGHT:
            raise ConfigError(
                f"uploads_in_flight must be within 0..{MAX_UPLOADS_IN_FLIGHT}, got {self.uploads_in_flight}"
            )
        check_encoding(self)
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
        if self.write_path not in WRITE_PATHS:
            raise ConfigError(f"write_path must be one of {list(WRITE_PATHS)}, got {self.write_path!r}")
        if self.write_path == "spark" and self.file_format is not FileFormat.PARQUET:
            raise ConfigError(f"write_path 'spark' writes Parquet only; format is {self.file_format.value!r}")

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
