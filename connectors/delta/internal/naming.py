"""Names of the Delta sink's data files and partition folders, as pure functions.

Data file (relative to the table root)::

    [<col>=<escaped value>/...]part-<partition:05d>-<checkpoint>-<token>-<uuid>.parquet

- ``partition`` and ``checkpoint`` are the writing subtask's Spark partition and checkpoint id;
- ``token`` is 12 hex digits of SHA-256 over ``job id NUL sink name`` (:func:`job_token`): it is what
  lets ``abort_lingering`` recognise this job's and sink's files among those of other writers of
  the same table (delta-spark, other jobs), without storing the job id in clear;
- ``uuid`` is 32 random hex digits, so that retried and speculative attempts never collide.

Partition folders follow Hive/Spark (``ExternalCatalogUtils.escapePathName``): control
characters and ``"#%'*/:=?\\{[]^`` plus DEL become ``%XX``; a null value is
``__HIVE_DEFAULT_PARTITION__``. The folder name is cosmetic for Delta: readers take partition
values from the Add action. The path stored in the Add action is the relative path URI-encoded
(Delta PROTOCOL.md, "Add File and Remove File": ``path`` is a URI relative to the table root).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

from twophase.sinks.internal.naming import hive_partition_path

"""Folder value of a null partition value (Hive, Spark, delta-spark)."""

TOKEN_HEX_DIGITS = 12

_FILE_NAME = re.compile(
    r"^part-(?P<partition>\d{5,})-(?P<checkpoint>\d+)-(?P<token>[0-9a-f]{12})-(?P<uuid>[0-9a-f]{32})\.parquet$"
)


@dataclass(frozen=True)
class DataFileName:
    """The parts of one of our data file names (see the module docstring)."""

    partition: int
    checkpoint_id: int
    token: str
    file_id: str


def app_id(job_id: str, sink_name: str) -> str:
    """The Delta ``txn.appId`` of a job's sink: ``"<job-id>:<sink>"``.

    PROTOCOL.md, "Transaction Identifiers": ``txn(appId, version)`` records the latest version an
    application committed.
    """
    return f"{job_id}:{sink_name}"


def job_token(job_id: str, sink_name: str) -> str:
    """12 lowercase hex digits identifying (job, sink) in data file names.

    Raises:
        ValueError: an empty job id or sink name.
    """
    if not job_id or not sink_name:
        raise ValueError("job_id and sink_name must be non-empty")
    digest = hashlib.sha256(f"{job_id}\x00{sink_name}".encode()).hexdigest()
    return digest[:TOKEN_HEX_DIGITS]


def data_file_name(partition: int, checkpoint_id: int, token: str, file_id: str) -> str:
    """``part-<partition:05d>-<checkpoint>-<token>-<uuid>.parquet``.

    Args:
        partition: the subtask's partition index (≥ 0).
        checkpoint_id: the checkpoint the file belongs to (≥ 0).
        token: :func:`job_token` of the job and sink.
        file_id: 32 lowercase hex digits (``uuid.uuid4().hex``).

    Raises:
        ValueError: a negative number or a malformed token or file id.
    """
    name = f"part-{partition:05d}-{checkpoint_id}-{token}-{file_id}.parquet"
    if partition < 0 or checkpoint_id < 0 or _FILE_NAME.match(name) is None:
        raise ValueError(
            f"invalid data file name parts: {partition}, {checkpoint_id}, {token!r}, {file_id!r}"
        )
    return name


def parse_data_file_name(name: str) -> DataFileName | None:
    """The parts of a base name written by :func:`data_file_name`, or ``None`` for any other file."""
    m = _FILE_NAME.match(name)
    if m is None:
        return None
    return DataFileName(int(m["partition"]), int(m["checkpoint"]), m["token"], m["uuid"])


def partition_directory(columns: Sequence[str], values: Sequence[str | None]) -> str:
    """``col1=v1/col2=v2`` for serialized partition values (``None`` → the Hive default partition).

    Raises:
        ValueError: ``columns`` and ``values`` differ in length.
    """
    return hive_partition_path(columns, values)


def data_file_path(directory: str, name: str) -> str:
    """The file's path relative to the table root (``/``-separated, not URI-encoded)."""
    return f"{directory}/{name}" if directory else name


def encode_add_path(relative_path: str) -> str:
    """The Add action's ``path``: the relative path as a URI (percent-encoded UTF-8; ``/`` and ``=`` kept)."""
    return quote(relative_path, safe="/=")


def decode_add_path(add_path: str) -> str:
    """Inverse of :func:`encode_add_path`: the file's relative path on storage."""
    return unquote(add_path)
