"""Configuration of the Azure Blob Storage file sink: a frozen dataclass, validated on
construction (``ConfigError``).

Where: ``location`` is ``abfss://<container>@<account>.dfs.core.windows.net/<prefix>`` (ADLS Gen2)
or ``wasbs://<container>@<account>.blob.core.windows.net/<prefix>``; both are written through the
Blob service (Put Block / Put Block List serve accounts with a hierarchical namespace too). How:
:class:`~twophase.coordinator.storage.AzureStorageOptions` (``storage_options``), the same
credentials the checkpoint storage takes; unset ones come from ``AZURE_STORAGE_CONNECTION_STRING``,
``AZURE_STORAGE_KEY``, ``AZURE_STORAGE_SAS_TOKEN`` or azure-identity's ``DefaultAzureCredential``
in each process that opens a client, executors included. Secrets are masked in ``repr`` and never
logged nor written to checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twophase.coordinator.storage.azure_blob import AzureLocation, AzureStorageOptions, parse_location
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.files.layout import FileFormat as FileFormat
from twophase.sinks.internal.files.layout import MiB, check_encoding, check_layout
from twophase.sinks.internal.files.layout import RollingPolicy as RollingPolicy
from twophase.sinks.internal.files.naming import normalize_prefix

MIN_BLOCK_BYTES = 1 * MiB
"""Our lower bound of ``block_size_bytes`` (Azure takes any size ≥ 1 byte; tiny blocks waste requests)."""

MAX_BLOCK_BYTES = 4000 * MiB
"""Azure's maximum size of one staged block (service version 2019-12-12 and later)."""

MAX_BLOCKS = 50_000
"""Azure's maximum number of committed blocks in one block blob."""

_CONTAINER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class AzureBlobSinkConfig:
    """Where and how the Azure Blob Storage file sink writes. Validated on construction.

    Every file rolls at every checkpoint (Flink's OnCheckpointRollingPolicy): a file never spans
    checkpoints, so a staged block waits at most one checkpoint interval for its Put Block List,
    far within the seven days Azure keeps uncommitted blocks.

    Attributes:
        location: ``abfss://<container>@<account>.dfs.core.windows.net/<prefix>`` or
            ``wasbs://<container>@<account>.blob.core.windows.net/<prefix>``; the container must
            exist (checked by ``AzureBlobSink.validate``). The prefix allows letters, digits and
            ``! - _ . * ' ( ) / =``.
        format: ``FileFormat`` or its value (``"parquet"``, ``"jsonl"``, ``"csv"``).
        partition_by: Hive-style partition columns, in path order. They are not written into files.
        columns: the sink's projection of each batch (only these columns, in this order); ``None``
            = every column.
        block_size_bytes: size of the staged blocks (bytes, 1 MiB..4000 MiB); also the memory
            buffered per open file.
        rolling: ``max_file_bytes`` and ``rollover_interval_ms`` roll a file within an epoch;
            every file rolls at the checkpoint anyway.
        max_open_files: per subtask; opening one more rolls the least recently written file.
        parquet_compression: Parquet codec (``none``, ``snappy``, ``gzip``, ``brotli``, ``lz4``, ``zstd``).
        parquet_row_group_bytes: Arrow bytes buffered per open Parquet file before a row group is written.
        csv_header: write a header line at the start of each CSV file.
        json_column: JSON lines only: a string column already holding one JSON document per row.
        non_finite_floats: JSON lines encoded here: NaN and ±Infinity become ``null`` (``"null"``)
            or fail the row (``"error"``).
        storage_options: how to reach the account (connection string, account key, SAS token,
            a ``TokenCredential``, the Blob endpoint of an emulator, timeouts).
        max_attempts: attempts per Azure request for transient errors (408, 429, 5xx, resets),
            with the SDK's exponential backoff.

    Raises:
        ConfigError: any invalid field, naming it.
    """

    location: str
    format: FileFormat | str = FileFormat.PARQUET
    partition_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    block_size_bytes: int = 8 * MiB
    rolling: RollingPolicy = field(default_factory=RollingPolicy)
    max_open_files: int = 64
    parquet_compression: str = "snappy"
    parquet_row_group_bytes: int = 32 * MiB
    csv_header: bool = True
    json_column: str | None = None
    non_finite_floats: str = "null"
    storage_options: AzureStorageOptions = field(default_factory=AzureStorageOptions)
    max_attempts: int = 5

    def __post_init__(self) -> None:
        parsed = self.parsed_location
        if not set(parsed.container) <= _CONTAINER_CHARS or not 3 <= len(parsed.container) <= 63:
            raise ConfigError(
                f"invalid Azure container name {parsed.container!r}: 3-63 lower-case letters, digits and '-'"
            )
        normalize_prefix(parsed.path, "Azure")
        check_layout(self, "Azure")
        if not MIN_BLOCK_BYTES <= self.block_size_bytes <= MAX_BLOCK_BYTES:
            raise ConfigError(
                f"block_size_bytes must be within {MIN_BLOCK_BYTES}..{MAX_BLOCK_BYTES}, "
                f"got {self.block_size_bytes}"
            )
        check_encoding(self)
        if not isinstance(self.storage_options, AzureStorageOptions):
            raise ConfigError("storage_options must be an AzureStorageOptions (twophase.AzureStorageOptions)")
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")

    @property
    def parsed_location(self) -> AzureLocation:
        """``location`` split into scheme, container, account host and path.

        Raises:
            ConfigError: not an ``abfss://`` / ``wasbs://`` location with a container and account.
        """
        return parse_location(self.location)

    @property
    def container(self) -> str:
        """The container (an ADLS Gen2 file system)."""
        return self.parsed_location.container

    @property
    def prefix(self) -> str:
        """The blob name prefix, without leading or trailing '/' (``""`` = the container's root)."""
        return normalize_prefix(self.parsed_location.path, "Azure")

    @property
    def file_format(self) -> FileFormat:
        """``format`` as a :class:`FileFormat` (normalized on construction)."""
        return FileFormat(self.format)
