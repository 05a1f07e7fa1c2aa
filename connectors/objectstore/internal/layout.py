"""The file layout options every object-store file sink takes: format, rolling policy,
partitioning, projection and encoder settings, and their checks (one line per error, naming the
field). Each sink's config dataclass has these fields and calls :func:`check_layout` on
construction; :class:`FileLayout` is the shape the shared encoders read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from twophase.sinks.errors import ConfigError

MiB = 1024 * 1024

PARQUET_COMPRESSIONS = frozenset({"none", "snappy", "gzip", "brotli", "lz4", "zstd"})
"""Parquet codecs ``pyarrow.parquet.ParquetWriter`` writes."""


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
      :class:`RollingPolicy` (where the sink supports it).
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


class FileLayout(Protocol):
    """The layout fields of a file sink's config, as the shared encoders and checks read them
    (see :class:`~twophase.connectors.s3.config.S3SinkConfig` for their meaning)."""

    @property
    def format(self) -> FileFormat | str: ...
    @property
    def partition_by(self) -> tuple[str, ...]: ...
    @property
    def columns(self) -> tuple[str, ...] | None: ...
    @property
    def rolling(self) -> RollingPolicy: ...
    @property
    def max_open_files(self) -> int: ...
    @property
    def parquet_compression(self) -> str: ...
    @property
    def parquet_row_group_bytes(self) -> int: ...
    @property
    def csv_header(self) -> bool: ...
    @property
    def json_column(self) -> str | None: ...
    @property
    def non_finite_floats(self) -> str: ...
    @property
    def file_format(self) -> FileFormat: ...


def check_layout(config: FileLayout, store: str) -> None:
    """Check and normalize (in place, on a frozen dataclass) the layout fields of ``config``.

    ``format`` becomes a :class:`FileFormat`, ``partition_by`` and ``columns`` tuples.

    Args:
        config: a sink config dataclass with the :class:`FileLayout` fields.
        store: the store's name in messages (``"S3"``, ``"Azure"``).

    Raises:
        ConfigError: any invalid layout field, naming it.
    """
    try:
        object.__setattr__(config, "format", FileFormat(config.format))
    except ValueError:
        allowed = [f.value for f in FileFormat]
        raise ConfigError(f"unknown {store} file format {config.format!r}; one of {allowed}") from None
    partition_by = config.partition_by
    if isinstance(partition_by, str) or not all(isinstance(c, str) for c in partition_by):
        raise ConfigError("partition_by must be a tuple of column names")
    partition_by = tuple(partition_by)
    object.__setattr__(config, "partition_by", partition_by)
    if any(not c for c in partition_by) or len(set(partition_by)) != len(partition_by):
        raise ConfigError(f"partition_by must be distinct non-empty names, got {partition_by!r}")
    if config.columns is not None:
        columns = validate_columns(config.columns)
        object.__setattr__(config, "columns", columns)
        outside = [c for c in partition_by if c not in columns]
        if outside:
            raise ConfigError(f"partition columns {outside} are not among columns {list(columns)}")
        if config.json_column is not None and config.json_column not in columns:
            raise ConfigError(f"json_column {config.json_column!r} is not among columns {list(columns)}")


def check_encoding(config: FileLayout) -> None:
    """Check the rolling, open-file and encoder fields of ``config`` (after :func:`check_layout`).

    Raises:
        ConfigError: any invalid field, naming it.
    """
    if not isinstance(config.rolling, RollingPolicy):
        raise ConfigError("rolling must be a RollingPolicy")
    if config.max_open_files < 1:
        raise ConfigError(f"max_open_files must be >= 1, got {config.max_open_files}")
    if config.parquet_compression not in PARQUET_COMPRESSIONS:
        raise ConfigError(
            f"parquet_compression {config.parquet_compression!r} not one of {sorted(PARQUET_COMPRESSIONS)}"
        )
    if config.parquet_row_group_bytes < 1:
        raise ConfigError(f"parquet_row_group_bytes must be >= 1, got {config.parquet_row_group_bytes}")
    if config.non_finite_floats not in ("null", "error"):
        raise ConfigError(f"non_finite_floats must be 'null' or 'error', got {config.non_finite_floats!r}")
    if config.json_column is not None and config.file_format is not FileFormat.JSON_LINES:
        raise ConfigError("json_column applies to the JSON lines format only")
    if config.json_column is not None and config.json_column in config.partition_by:
        raise ConfigError("json_column cannot be a partition column")
