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
from typing import ClassVar

from twophase.connectors.objectstore.internal.config import PartFileSinkConfig
from twophase.connectors.objectstore.internal.layout import FileFormat as FileFormat
from twophase.connectors.objectstore.internal.layout import MiB
from twophase.connectors.objectstore.internal.layout import RollingPolicy as RollingPolicy
from twophase.coordinator.storage.azure_blob import AzureLocation, AzureStorageOptions, parse_location
from twophase.sinks.errors import ConfigError

MIN_BLOCK_BYTES = 1 * MiB
"""Our lower bound of ``block_size_bytes`` (Azure takes any size ≥ 1 byte; tiny blocks waste requests)."""

MAX_BLOCK_BYTES = 4000 * MiB
"""Azure's maximum size of one staged block (service version 2019-12-12 and later)."""

MAX_BLOCKS = 50_000
"""Azure's maximum number of committed blocks in one block blob."""

_CONTAINER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class AzureBlobSinkConfig(PartFileSinkConfig):
    """Where and how the Azure Blob Storage file sink writes. Validated on construction.

    Every file rolls at every checkpoint (Flink's OnCheckpointRollingPolicy): a file never spans
    checkpoints, so a staged block waits at most one checkpoint interval for its Put Block List,
    far within the seven days Azure keeps uncommitted blocks. The layout fields (``format``,
    ``partition_by``, ``columns``, ``rolling``, ``max_open_files``, ``parquet_compression``,
    ``parquet_row_group_bytes``, ``csv_header``, ``json_column``, ``non_finite_floats``) are the
    object-store file sinks' own (see ``PartFileSinkConfig`` in
    ``twophase.connectors.objectstore.internal.config``).

    Attributes:
        location: ``abfss://<container>@<account>.dfs.core.windows.net/<prefix>`` or
            ``wasbs://<container>@<account>.blob.core.windows.net/<prefix>``; the container must
            exist (checked by ``AzureBlobSink.validate``). The prefix allows letters, digits and
            ``! - _ . * ' ( ) / =``.
        block_size_bytes: size of the staged blocks (bytes, 1 MiB..4000 MiB); also the memory
            buffered per open file.
        storage_options: how to reach the account (connection string, account key, SAS token,
            a ``TokenCredential``, the Blob endpoint of an emulator, timeouts).
        max_attempts: attempts per Azure request for transient errors (408, 429, 5xx, resets),
            with the SDK's exponential backoff.

    Raises:
        ConfigError: any invalid field, naming it.
    """

    STORE: ClassVar[str] = "Azure"

    block_size_bytes: int = 8 * MiB
    storage_options: AzureStorageOptions = field(default_factory=AzureStorageOptions)
    max_attempts: int = 5

    def check_place(self) -> None:
        """The location parses, and its container name is Azure's (3-63 of ``a-z 0-9 -``).

        Raises:
            ConfigError: either is wrong, naming it.
        """
        container = self.parsed_location.container
        if not set(container) <= _CONTAINER_CHARS or not 3 <= len(container) <= 63:
            raise ConfigError(
                f"invalid Azure container name {container!r}: 3-63 lower-case letters, digits and '-'"
            )

    def check_transfer(self) -> None:
        """``block_size_bytes`` within ``MIN_BLOCK_BYTES..MAX_BLOCK_BYTES``.

        Raises:
            ConfigError: out of range.
        """
        if not MIN_BLOCK_BYTES <= self.block_size_bytes <= MAX_BLOCK_BYTES:
            raise ConfigError(
                f"block_size_bytes must be within {MIN_BLOCK_BYTES}..{MAX_BLOCK_BYTES}, "
                f"got {self.block_size_bytes}"
            )

    def check_storage(self) -> None:
        """``storage_options`` an ``AzureStorageOptions``, ``max_attempts`` ≥ 1 (``ConfigError``)."""
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
    def location_path(self) -> str:
        """The blob name prefix as ``location`` spells it."""
        return self.parsed_location.path

    @property
    def container(self) -> str:
        """The container (an ADLS Gen2 file system)."""
        return self.parsed_location.container
