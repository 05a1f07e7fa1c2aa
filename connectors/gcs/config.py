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
from typing import ClassVar

from twophase.connectors.objectstore.internal.config import PartFileSinkConfig
from twophase.connectors.objectstore.internal.layout import FileFormat as FileFormat
from twophase.connectors.objectstore.internal.layout import MiB
from twophase.connectors.objectstore.internal.layout import RollingPolicy as RollingPolicy
from twophase.coordinator.storage.gcs import GcsStorageOptions, parse_location
from twophase.sinks.errors import ConfigError

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
class GcsFileSinkConfig(PartFileSinkConfig):
    """Where and how the GCS file sink writes. Validated on construction.

    Every file rolls at every checkpoint: a file never spans checkpoints, so its resumable upload
    session waits at most one checkpoint interval for the driver to finalize it, far within the
    seven days GCS keeps a session. The layout fields (``format``, ``partition_by``, ``columns``,
    ``rolling``, ``max_open_files``, ``parquet_compression``, ``parquet_row_group_bytes``,
    ``csv_header``, ``json_column``, ``non_finite_floats``) are the object-store file sinks' own
    (see ``PartFileSinkConfig`` in ``twophase.connectors.objectstore.internal.config``).

    Attributes:
        location: ``gs://<bucket>/<prefix>``; the bucket must exist (checked by
            ``GcsFileSink.validate``). The prefix allows letters, digits and ``! - _ . * ' ( ) / =``.
        chunk_size_bytes: size of the chunks uploaded into a session by the task (bytes, a multiple
            of 256 KiB within 1 MiB..1 GiB); also the memory buffered per open file.
        storage_options: how to reach GCS (project, credentials, an emulator's URL, timeout).

    Raises:
        ConfigError: any invalid field, naming it.
    """

    STORE: ClassVar[str] = "GCS"

    chunk_size_bytes: int = 8 * MiB
    storage_options: GcsStorageOptions = field(default_factory=GcsStorageOptions)

    def check_place(self) -> None:
        """The location parses, and its bucket name is GCS's (``a-z 0-9 - _ .``, 3-63 characters,
        222 with dots).

        Raises:
            ConfigError: either is wrong, naming it.
        """
        bucket = self.bucket
        if not set(bucket) <= _BUCKET_CHARS or not 3 <= len(bucket) <= 222:
            raise ConfigError(
                f"invalid GCS bucket name {bucket!r}: lower-case letters, digits, '-', '_' and '.' "
                "(3-63 characters, 222 with dots)"
            )

    def check_transfer(self) -> None:
        """``chunk_size_bytes`` a multiple of 256 KiB within ``MIN_CHUNK_BYTES..MAX_CHUNK_BYTES``.

        Raises:
            ConfigError: out of range.
        """
        if (
            not MIN_CHUNK_BYTES <= self.chunk_size_bytes <= MAX_CHUNK_BYTES
            or self.chunk_size_bytes % CHUNK_QUANTUM
        ):
            raise ConfigError(
                f"chunk_size_bytes must be a multiple of 256 KiB within "
                f"{MIN_CHUNK_BYTES}..{MAX_CHUNK_BYTES}, got {self.chunk_size_bytes}"
            )

    def check_storage(self) -> None:
        """``storage_options`` a ``GcsStorageOptions``, ``timeout_s`` > 0 (``ConfigError``)."""
        if not isinstance(self.storage_options, GcsStorageOptions):
            raise ConfigError("storage_options must be a GcsStorageOptions (twophase.GcsStorageOptions)")
        if self.storage_options.timeout_s <= 0:
            raise ConfigError(f"storage_options.timeout_s must be > 0, got {self.storage_options.timeout_s}")

    @property
    def bucket(self) -> str:
        """The bucket.

        Raises:
            ConfigError: ``location`` is not a ``gs://<bucket>/...`` URL.
        """
        return parse_location(self.location)[0]

    @property
    def location_path(self) -> str:
        """The object name prefix as ``location`` spells it."""
        return parse_location(self.location)[1]
