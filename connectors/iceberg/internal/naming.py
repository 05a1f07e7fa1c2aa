"""Where the Iceberg sink's data files go, as pure functions.

Data file (absolute, under the table's location), in two parts::

    <table location>/data/twophase-<token>                                       (the job's data prefix)
    [<partition path>/]part-<subtask:05d>-<checkpoint>-<attempt>-<uuid>.parquet   (below it)

- ``token`` is 12 hex digits of SHA-256 over ``job id NUL sink name`` (:func:`job_token`): the
  folder ``data/twophase-<token>/`` is the job's *data prefix*, the only place lingering cleanup
  lists, so it never sees other writers' files (Spark, Flink, other jobs) nor stores the job id in
  clear;
- ``subtask``, ``checkpoint`` and ``attempt`` are the writing subtask's Spark partition index, the
  checkpoint id and Spark's task attempt number;
- ``uuid`` is 32 random hex digits, so that retried and speculative attempts never collide;
- the partition path is pyiceberg's ``PartitionKey.to_path()`` (``field=value`` per partition
  field, URL-escaped). It is cosmetic: Iceberg readers take partition values from the manifest,
  never from paths (Iceberg table spec, "Manifests").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

TOKEN_HEX_DIGITS = 12
"""Length of :func:`job_token`."""

DATA_FOLDER = "data"
"""The table's data folder (Iceberg's default ``write.data.path`` is ``<location>/data``)."""

_FILE_NAME = re.compile(
    r"^part-(?P<subtask>\d{5,})-(?P<checkpoint>\d+)-(?P<attempt>\d+)-(?P<uuid>[0-9a-f]{32})\.parquet$"
)


@dataclass(frozen=True)
class DataFileName:
    """The parts of one of our data file names (see the module docstring).

    Attributes:
        subtask: the writing subtask's partition index (≥ 0).
        checkpoint_id: the checkpoint the file was written for (≥ 0).
        attempt: Spark's task attempt number (≥ 0).
        file_id: 32 lowercase hex digits.
    """

    subtask: int
    checkpoint_id: int
    attempt: int
    file_id: str


def job_token(job_id: str, sink_name: str) -> str:
    """12 lowercase hex digits identifying (job, sink) in data paths.

    Raises:
        ValueError: an empty job id or sink name.
    """
    if not job_id or not sink_name:
        raise ValueError("job_id and sink_name must be non-empty")
    return hashlib.sha256(f"{job_id}\x00{sink_name}".encode()).hexdigest()[:TOKEN_HEX_DIGITS]


def job_data_prefix(table_location: str, token: str) -> str:
    """``<table location>/data/twophase-<token>``: every data file this job's sink writes is under it.

    Raises:
        ValueError: an empty location or a malformed token.
    """
    if not table_location or re.fullmatch(r"[0-9a-f]{12}", token) is None:
        raise ValueError(f"invalid table location or token: {table_location!r}, {token!r}")
    return f"{table_location.rstrip('/')}/{DATA_FOLDER}/twophase-{token}"


def data_file_name(subtask: int, checkpoint_id: int, attempt: int, file_id: str) -> str:
    """``part-<subtask:05d>-<checkpoint>-<attempt>-<uuid>.parquet``.

    Raises:
        ValueError: a negative number or a malformed file id.
    """
    name = f"part-{subtask:05d}-{checkpoint_id}-{attempt}-{file_id}.parquet"
    if min(subtask, checkpoint_id, attempt) < 0 or _FILE_NAME.match(name) is None:
        raise ValueError(f"invalid data file name parts: {subtask}, {checkpoint_id}, {attempt}, {file_id!r}")
    return name


def data_file_path(prefix: str, partition_path: str, name: str) -> str:
    """The file's full location: ``<prefix>/[<partition path>/]<name>``."""
    return f"{prefix}/{partition_path}/{name}" if partition_path else f"{prefix}/{name}"


def parse_data_file_name(name: str) -> DataFileName | None:
    """The parts of a base name written by :func:`data_file_name`, or ``None`` for any other file."""
    m = _FILE_NAME.match(name)
    if m is None:
        return None
    return DataFileName(int(m["subtask"]), int(m["checkpoint"]), int(m["attempt"]), m["uuid"])


def parse_data_file_path(path: str) -> DataFileName | None:
    """:func:`parse_data_file_name` of the last segment of ``path``."""
    return parse_data_file_name(path.rsplit("/", 1)[-1])
