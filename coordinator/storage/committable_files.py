"""Checkpoint format v3: each sink's committables in one Arrow IPC file, under a small manifest
(issue #42 item 2).

A checkpoint of 10⁵ subtasks × 3 sinks held 3 × 10⁵ committables inside one JSON ``_metadata``.
Version 3 keeps them columnar: per sink with committables, one Arrow IPC file (the random-access
"file" format, zstd-compressed buffers) in the checkpoint's directory, with the columns
``partition`` (int32), ``attempt`` (int32), ``checkpoint_id`` (int64, null where the record has
none) and ``payload`` (the sink codec's versioned JSON, UTF-8, binary: the bytes the executor
encoded, written and read back as they are, never parsed here). ``_metadata`` becomes a
manifest: the checkpoint's header as before (job, id, kind, source position, fully finished
operators, in-progress states) and per sink, instead of its committables, the file's name, rows,
bytes and sha256, and the sink's parallelism (``num_partitions``)::

    "sinks": {"<sink>": {"num_partitions": 2, "in_progress": {...},
                         "committables": {"file": "committables-0-3f9a0c1e-0.arrow", "rows": 2,
                                          "bytes": 1234, "sha256": "<hex>"} | null}}

A file is named per sink (its index among the manifest's sorted sink names), driver run (a random
token per storage instance: each driver process and each stale one has its own) and attempt (the
how-many-th publish of that id by that run), so no writer ever names another's file; it is created
with the storage's conditional create (never overwritten) and made durable before the manifest is
published in the same single atomic step as before. A reader verifies each file against the
manifest (size, sha256, rows, sink and checkpoint in the file's schema metadata): a missing or
altered file is a :class:`~twophase.sinks.errors.CommittableFileError`, never an empty checkpoint.
The pure functions here encode and decode; the backends write and read the bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from twophase.coordinator.state import collector
from twophase.coordinator.state.metadata import (
    COMMITTABLE_COLUMNS,
    MANIFEST_VERSION,
    CheckpointMetadata,
    CommittableRecord,
    CommittableRows,
    document_version,
    parse_document,
)
from twophase.sinks.errors import CommittableDecodeError, CommittableFileError

ZLIB_LEVEL = 1
COMPRESSION = "zstd"
"""The IPC buffers' codec: Arrow's own, read by every Arrow implementation."""
FILE_MEDIA_TYPE = "application/vnd.apache.arrow.file"
"""The IANA media type of the Arrow IPC file format (an object's ``Content-Type``)."""
FILE_FORMAT = "twophase.committables"
FILE_VERSION = "1"
SCHEMA = COMMITTABLE_COLUMNS
"""The columns of a committable file, one row per committable, in the checkpoint's order."""

_NAME_RE = re.compile(r"committables-([0-9]+)-([0-9a-z]+)-([0-9]+)\.arrow")


def file_name(sink_index: int, run: str, attempt: int) -> str:
    """``committables-<sink index>-<run>-<attempt>.arrow``, in the checkpoint's directory."""
    return f"committables-{sink_index}-{run}-{attempt}.arrow"


def file_run(name: str) -> str | None:
    """The driver run that wrote a committable file named ``name``, or ``None`` for another name."""
    m = _NAME_RE.fullmatch(name)
    return m.group(2) if m else None


@dataclass(frozen=True)
class FileRef:
    """A manifest's reference to one committable file.

    Attributes:
        file: its name in the checkpoint's directory.
        rows: committables it holds.
        size: its length in bytes.
        sha256: the hex SHA-256 of its bytes.
    """

    file: str
    rows: int
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """``{"file", "rows", "bytes", "sha256"}``."""
        return {"file": self.file, "rows": self.rows, "bytes": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, obj: Any) -> FileRef:
        """Parse a reference; the name must be a committable file's (no path).

        Raises:
            CommittableDecodeError: missing or mistyped fields, or another name.
        """
        try:
            ref = cls(str(obj["file"]), int(obj["rows"]), int(obj["bytes"]), str(obj["sha256"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CommittableDecodeError(f"invalid committable file reference {obj!r:.120}: {e!r}") from e
        if file_run(ref.file) is None or ref.rows < 0 or ref.size < 0:
            raise CommittableDecodeError(f"invalid committable file reference {obj!r:.120}")
        return ref


@dataclass(frozen=True)
class EncodedCheckpoint:
    """What one publish writes: the committable files, then the manifest.

    Attributes:
        files: (name in the checkpoint's directory, bytes) of each file, to create first.
        manifest: the ``_metadata`` bytes (zlib-compressed JSON, version 3).
    """

    files: tuple[tuple[str, bytes], ...]
    manifest: bytes


class CheckpointWriter:
    """One storage instance's writer of version 3 checkpoints: its driver run token, and how many
    times it encoded each checkpoint id (a failed epoch's id is published again after a fail-over
    in the same process, under the next attempt's names).

    Attributes:
        run: this writer's run token, 8 hex digits (tests may set it).
    """

    def __init__(self) -> None:
        self.run = secrets.token_hex(4)
        self._attempts: dict[int, int] = {}

    def encode(self, metadata: CheckpointMetadata) -> EncodedCheckpoint:
        """The files and manifest of ``metadata``, named for this run's next attempt at its id."""
        attempt = self._attempts.get(metadata.checkpoint_id, 0)
        self._attempts[metadata.checkpoint_id] = attempt + 1
        return encode(metadata, self.run, attempt)

    def owns(self, name: str) -> bool:
        """Whether ``name`` is a committable file this run wrote."""
        return file_run(name) == self.run


def encode(metadata: CheckpointMetadata, run: str, attempt: int) -> EncodedCheckpoint:
    """The version 3 files and manifest of ``metadata``; a sink without committables gets no file.
    The same arguments always give the same bytes (a publish compares what it reads back)."""
    obj = metadata.header_json(MANIFEST_VERSION)
    files: list[tuple[str, bytes]] = []
    for index, name in enumerate(sorted(metadata.sinks)):
        records = metadata.sinks[name].committables
        # the metadata's own columns (CommittableRows) are written as they are and counted by
        # their table; other records (read back from a checkpoint, or a test's) become columns
        table = records.table if isinstance(records, CommittableRows) else records_table(records)
        rows = table.num_rows
        ref: dict[str, Any] | None = None
        if rows:
            data = encode_file(table, metadata.job_id, metadata.checkpoint_id, name)
            fname = file_name(index, run, attempt)
            files.append((fname, data))
            ref = FileRef(fname, rows, len(data), hashlib.sha256(data).hexdigest()).to_json()
        obj["sinks"][name]["committables"] = ref
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return EncodedCheckpoint(tuple(files), zlib.compress(text.encode("utf-8"), ZLIB_LEVEL))


def records_table(records: Sequence[CommittableRecord]) -> pa.Table:
    """``records`` as a committable file's columns (:data:`SCHEMA`, in order, one chunk each)."""
    return pa.table(
        [
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.attempt for r in records], pa.int32()),
            pa.array([r.checkpoint_id for r in records], pa.int64()),
            pa.array([r.payload for r in records], pa.binary()),
        ],
        schema=SCHEMA,
    )


def encode_file(table: pa.Table, job_id: str, checkpoint_id: int, sink: str) -> bytes:
    """One sink's committables, ``table`` of :data:`SCHEMA`'s columns in order (any chunking: the
    metadata's :class:`~twophase.coordinator.state.metadata.CommittableRows` table as it is, or
    :func:`records_table`), as an Arrow IPC file (zstd), the checkpoint named in its schema; the
    ``payload`` column is each committable's bytes as they are (the executor's), nothing encoded,
    and no Python pass over the rows (issue #42): one record batch (the columns combined into one
    chunk each), so the same rows give the same bytes however they were chunked."""
    table = pa.table(
        table.combine_chunks().columns,
        schema=SCHEMA.with_metadata(
            {
                "format": FILE_FORMAT,
                "version": FILE_VERSION,
                "job_id": job_id,
                "checkpoint_id": str(checkpoint_id),
                "sink": sink,
            }
        ),
    )
    out = pa.BufferOutputStream()
    with pa.ipc.new_file(out, table.schema, options=pa.ipc.IpcWriteOptions(compression=COMPRESSION)) as w:
        w.write_table(table)
    return bytes(out.getvalue().to_pybytes())


class MissingFile(Exception):
    """Raised by a backend's file reader: no file of that name beside the manifest."""


def decode(data: bytes, location: str, read_file: Callable[[str], bytes]) -> CheckpointMetadata:
    """Parse ``_metadata`` bytes of any version read at ``location``; a version 3 manifest's files
    are read with ``read_file`` (name in the manifest's directory → bytes, raising
    :class:`MissingFile` when there is none) and verified.

    Raises:
        CommittableDecodeError: invalid metadata (callers name the location).
        CommittableFileError: a file the manifest names is missing or does not match it.
        CheckpointStorageError: from ``read_file``, when storage cannot be read.
    """
    obj = parse_document(data)
    if document_version(obj) != MANIFEST_VERSION:
        return CheckpointMetadata.from_document(obj)
    try:
        sinks = obj["sinks"]
        refs = {
            str(name): None if s.get("committables") is None else FileRef.from_json(s["committables"])
            for name, s in sinks.items()
        }
        checkpoint_id = int(obj["checkpoint_id"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CommittableDecodeError(f"invalid checkpoint manifest: {e!r}") from e
    committables: dict[str, tuple[CommittableRecord, ...]] = {}
    for name, ref in refs.items():
        if ref is None:
            continue
        try:
            raw = read_file(ref.file)
        except MissingFile:
            raise CommittableFileError(
                f"checkpoint {checkpoint_id} at {location} names the committable file {ref.file} of sink "
                f"{name!r} ({ref.rows} committables), which is missing: refusing it rather than reading "
                "it as nothing to commit"
            ) from None
        committables[name] = decode_file(raw, ref, sink=name, checkpoint_id=checkpoint_id, location=location)
    return CheckpointMetadata.from_manifest(obj, committables)


def decode_file(
    data: bytes, ref: FileRef, *, sink: str, checkpoint_id: int, location: str
) -> tuple[CommittableRecord, ...]:
    """The committables of one file, checked against the manifest's ``ref``.

    Raises:
        CommittableFileError: its size, sha256, rows, schema or named sink and checkpoint differ
            from what the manifest at ``location`` recorded, or it does not parse.
    """

    def corrupt(why: str) -> CommittableFileError:
        return CommittableFileError(
            f"checkpoint {checkpoint_id} at {location}: committable file {ref.file} of sink {sink!r} is "
            f"corrupt: {why}; refusing it rather than reading it as nothing to commit"
        )

    if len(data) != ref.size:
        raise corrupt(f"{len(data)} bytes, the manifest recorded {ref.size}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise corrupt(f"sha256 {digest}, the manifest recorded {ref.sha256}")
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as e:  # a digest collision aside, a writer's bug
        raise corrupt(f"not an Arrow IPC file: {e}") from e
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    named = (meta.get("format"), meta.get("sink"), meta.get("checkpoint_id"))
    if named != (FILE_FORMAT, sink, str(checkpoint_id)) or not table.schema.equals(SCHEMA):
        raise corrupt(f"it holds {named} with columns {table.schema.names}")
    if table.num_rows != ref.rows:
        raise corrupt(f"{table.num_rows} rows, the manifest recorded {ref.rows}")
    cols = [table[n].to_pylist() for n in ("partition", "attempt", "checkpoint_id", "payload")]
    # payloads stay bytes (the sha256 above vouches for them): each is parsed and decoded by its
    # sink's codec where an object is needed, at commit (issue #42)
    with collector.paused():
        return tuple(CommittableRecord(p, a, payload, c) for p, a, c, payload in zip(*cols, strict=True))


def leftovers_to_delete(names: Sequence[str], writer: CheckpointWriter) -> list[str]:
    """Which objects of a checkpoint directory without ``_metadata``, below the newest published
    id, retention deletes: all but committable files of another driver run. That run may be a
    stale driver between its file writes and its manifest (DESIGN.md §12, one driver at a time):
    its manifest may still land, and must not name a deleted file."""
    return [n for n in names if file_run(n) is None or writer.owns(n)]
