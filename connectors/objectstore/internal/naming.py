"""Names of the object-store file sinks' data files, as pure functions (no I/O).

Layout under the configured key prefix ``<prefix>``::

    <prefix>/<partition path>/part-<partition>-<checkpoint>-<token>-<uuid>.<ext>

- ``<partition path>`` is Hive-style (``col=value/col2=value2``, values escaped as Hive/Spark
  do, nulls as ``__HIVE_DEFAULT_PARTITION__``); empty without partition columns.
- ``<partition>`` is the subtask index (5 digits), ``<checkpoint>`` the checkpoint whose epoch
  *opened* the file (a file spanning checkpoints keeps its first name), ``<uuid>`` 32 hex digits.
- ``<token>`` is :func:`job_token` of (job id, sink name): it makes this job's and sink's files
  recognisable for lingering cleanup without listing other jobs' data, and keeps two jobs
  writing under the same prefix apart.
- ``<prefix>/_twophase/`` is reserved for a sink's own temporary objects: Spark and Hive skip
  paths starting with ``_`` when reading the prefix as a table.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from twophase.sinks.errors import ConfigError
from twophase.sinks.internal import naming as sinks_naming
from twophase.sinks.internal.naming import HIVE_DEFAULT_PARTITION

TOKEN_HEX = 12
"""Length of :func:`job_token` (hex digits, 48 bits)."""

TEMP_DIR = "_twophase"
"""Folder under the prefix reserved for the sinks' own objects; hidden from Spark readers."""

MAX_KEY_BYTES = 1024
"""S3's and Azure's limit on an object key or blob name (UTF-8 bytes, 1,024 characters on Azure)."""

MAX_PREFIX_BYTES = 512
"""Our limit on the key prefix, leaving room for partition paths and file names."""

# AWS's "safe characters" for object keys plus '=' (Hive-style folders in a prefix). Anything else
# (spaces, '\\', '{', '^', '%', '`', ']', '"', '>', '[', '~', '<', '#', '|', control characters,
# non-ASCII) needs URL encoding or breaks tools downstream, so it is refused up front.
_PREFIX_RE = re.compile(r"[A-Za-z0-9!\-_.*'()/=]*")

_TOKEN_RE = re.compile(f"[0-9a-f]{{{TOKEN_HEX}}}")
_DATA_NAME_RE = re.compile(
    r"part-(?P<partition>\d+)-(?P<checkpoint>\d+)-"
    rf"(?P<token>[0-9a-f]{{{TOKEN_HEX}}})-(?P<file_id>[0-9a-f]{{32}})\.[a-z0-9.]+"
)


def normalize_prefix(prefix: str, store: str) -> str:
    """Validate a key prefix and strip leading/trailing '/'. ``""`` writes at the bucket's root.

    Allowed: letters, digits and ``! - _ . * ' ( ) / =``; no empty, ``.`` or ``..`` segments, no
    segment named ``_twophase`` (reserved for temporary objects), at most 512 bytes.

    Raises:
        ConfigError: the prefix has an illegal character or segment, naming it.
    """
    if not isinstance(prefix, str):
        raise ConfigError(f"{store} key prefix must be a string, got {type(prefix).__name__}")
    stripped = prefix.strip("/")
    if not _PREFIX_RE.fullmatch(stripped):
        bad = sorted({c for c in stripped if not _PREFIX_RE.fullmatch(c)})
        raise ConfigError(
            f"{store} key prefix {prefix!r} has illegal characters {bad!r}; "
            "allowed: letters, digits and ! - _ . * ' ( ) / ="
        )
    if len(stripped.encode()) > MAX_PREFIX_BYTES:
        raise ConfigError(f"{store} key prefix is longer than {MAX_PREFIX_BYTES} bytes")
    if stripped:
        for segment in stripped.split("/"):
            if segment in ("", ".", ".."):
                raise ConfigError(f"{store} key prefix {prefix!r} has an empty, '.' or '..' segment")
            if segment == TEMP_DIR:
                raise ConfigError(f"{store} key prefix {prefix!r} uses the reserved segment {TEMP_DIR!r}")
    return stripped


def job_token(job_id: str, sink_name: str) -> str:
    """The job-and-sink token in every key: the first 12 hex digits of SHA-256(job id NUL sink name).

    Stable across restarts (the job id is), distinct per sink of a job, and free of the
    characters a job id may contain.
    """
    return hashlib.sha256(f"{job_id}\0{sink_name}".encode()).hexdigest()[:TOKEN_HEX]


def join_key(*parts: str) -> str:
    """``parts`` joined with '/', empty ones left out."""
    return "/".join(p for p in parts if p)


def format_partition_value(value: Any) -> str:
    """A partition value as Spark writes it in a Hive-style path, before escaping.

    ``None`` and ``""`` → ``__HIVE_DEFAULT_PARTITION__``; booleans ``true``/``false``; dates ISO;
    timestamps ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (UTC offset dropped, as Spark prints them in the
    session time zone, which we take to be UTC).
    """
    if value is None or value == "":
        return HIVE_DEFAULT_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def hive_partition_path(columns: tuple[str, ...], values: tuple[Any, ...]) -> str:
    """The Hive-style path of one partition: ``col=value/col2=value2`` (``""`` without columns).

    Raises:
        ValueError: ``columns`` and ``values`` differ in length.
    """
    return sinks_naming.hive_partition_path(columns, [format_partition_value(v) for v in values])


def data_key(
    prefix: str, partition_path: str, partition: int, checkpoint_id: int, token: str, file_id: str, ext: str
) -> str:
    """The key of one data file.

    ``<prefix>/<partition path>/part-<partition>-<checkpoint>-<token>-<uuid>.<ext>``.

    Args:
        prefix: a prefix normalized by :func:`normalize_prefix`.
        partition_path: from :func:`hive_partition_path` (may be ``""``).
        partition: the subtask index (≥ 0).
        checkpoint_id: the checkpoint whose epoch opens the file (≥ 0).
        token: :func:`job_token`.
        file_id: 32 lower-case hex digits (``uuid4().hex``).
        ext: the format's extension without dot (``parquet``, ``jsonl``, ``csv``).

    Raises:
        ValueError: a malformed argument, or the key is longer than 1024 bytes.
    """
    if partition < 0 or checkpoint_id < 0:
        raise ValueError("partition and checkpoint_id must be >= 0")
    if not re.fullmatch(r"[0-9a-f]{32}", file_id):
        raise ValueError(f"file_id must be 32 hex digits, got {file_id!r}")
    if not _TOKEN_RE.fullmatch(token):
        raise ValueError(f"token must be {TOKEN_HEX} hex digits, got {token!r}")
    key = join_key(prefix, partition_path, f"part-{partition:05d}-{checkpoint_id}-{token}-{file_id}.{ext}")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"object key longer than {MAX_KEY_BYTES} bytes: {key[:80]}...")
    return key


@dataclass(frozen=True)
class DataKey:
    """The parts of a data file's key (see :func:`parse_data_key`)."""

    partition_path: str
    partition: int
    checkpoint_id: int
    token: str
    file_id: str


def parse_data_key(prefix: str, key: str) -> DataKey | None:
    """Parse a key made by :func:`data_key` under ``prefix``; ``None`` if it is not one of ours."""
    if prefix:
        if not key.startswith(prefix + "/"):
            return None
        rest = key[len(prefix) + 1 :]
    else:
        rest = key
    folder, _, name = rest.rpartition("/")
    if folder.split("/", 1)[0] == TEMP_DIR:
        return None
    m = _DATA_NAME_RE.fullmatch(name)
    if m is None:
        return None
    return DataKey(
        partition_path=folder,
        partition=int(m["partition"]),
        checkpoint_id=int(m["checkpoint"]),
        token=m["token"],
        file_id=m["file_id"],
    )
