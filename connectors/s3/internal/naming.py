"""Object keys of the S3 sink, as pure functions (no I/O).

Data files are named as every object-store file sink names them
(:mod:`twophase.connectors.objectstore.internal.naming`)::

    <prefix>/<partition path>/part-<partition>-<checkpoint>-<token>-<uuid>.<ext>   data files
    <prefix>/_twophase/<token>/tails/<uuid>/<checkpoint>-<attempt>-<nonce>.tail      temporary tails

Tails (the sub-5 MiB rest of an in-progress file, DESIGN.md §7) are S3's own: they live under
``_twophase/``, which Spark and Hive skip when reading the prefix as a table, so readers never
see them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from twophase.connectors.objectstore.internal import naming as files_naming
from twophase.connectors.objectstore.internal.naming import TEMP_DIR as TEMP_DIR
from twophase.connectors.objectstore.internal.naming import DataKey as DataKey
from twophase.connectors.objectstore.internal.naming import data_key as data_key
from twophase.connectors.objectstore.internal.naming import format_partition_value as format_partition_value
from twophase.connectors.objectstore.internal.naming import hive_partition_path as hive_partition_path
from twophase.connectors.objectstore.internal.naming import job_token as job_token
from twophase.connectors.objectstore.internal.naming import parse_data_key as parse_data_key
from twophase.sinks.errors import ConfigError

_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_IPV4_RE = re.compile(r"\d+\.\d+\.\d+\.\d+")
_TAIL_NAME_RE = re.compile(r"(?P<checkpoint>\d+)-(?P<attempt>\d+)-(?P<nonce>[0-9a-f]+)\.tail")


def validate_bucket(bucket: str) -> str:
    """Check an S3 bucket name (3-63 chars: lower-case letters, digits, '.', '-').

    Raises:
        ConfigError: the name is not a valid bucket name.
    """
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket or _IPV4_RE.fullmatch(bucket):
        raise ConfigError(
            f"invalid S3 bucket name {bucket!r}: 3-63 characters, lower-case letters, digits, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    return bucket


def normalize_prefix(prefix: str) -> str:
    """An S3 key prefix checked and stripped
    (:func:`~twophase.connectors.objectstore.internal.naming.normalize_prefix`).

    Raises:
        ConfigError: the prefix has an illegal character or segment, naming it.
    """
    return files_naming.normalize_prefix(prefix, "S3")


def tails_root(prefix: str, token: str) -> str:
    """The folder holding every tail object of one job and sink (ends with '/')."""
    return files_naming.join_key(prefix, TEMP_DIR, token, "tails") + "/"


def tail_prefix(prefix: str, token: str, file_id: str) -> str:
    """The folder holding the tail objects of one data file (ends with '/'); deleted after commit."""
    return tails_root(prefix, token) + file_id + "/"


def tail_key(prefix: str, token: str, file_id: str, checkpoint_id: int, attempt: int, nonce: str) -> str:
    """The key of one tail object: written by ``snapshot_in_progress`` of checkpoint ``checkpoint_id``.

    One object per (file, checkpoint, attempt, nonce): a tail is never overwritten, so every
    retained checkpoint's in-progress state keeps pointing at the bytes it saw.
    """
    if not re.fullmatch(r"[0-9a-f]+", nonce):
        raise ValueError(f"nonce must be hex, got {nonce!r}")
    return f"{tail_prefix(prefix, token, file_id)}{checkpoint_id}-{attempt}-{nonce}.tail"


@dataclass(frozen=True)
class TailKey:
    """The parts of a tail object's key (see :func:`parse_tail_key`)."""

    file_id: str
    checkpoint_id: int
    attempt: int


def parse_tail_key(prefix: str, token: str, key: str) -> TailKey | None:
    """Parse a key made by :func:`tail_key`; ``None`` if it is not one of this job's and sink's tails."""
    root = tails_root(prefix, token)
    if not key.startswith(root):
        return None
    file_id, _, name = key[len(root) :].partition("/")
    m = _TAIL_NAME_RE.fullmatch(name)
    if m is None or not re.fullmatch(r"[0-9a-f]{32}", file_id):
        return None
    return TailKey(file_id=file_id, checkpoint_id=int(m["checkpoint"]), attempt=int(m["attempt"]))
