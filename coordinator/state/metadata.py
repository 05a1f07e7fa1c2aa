"""Checkpoint metadata: what one completed checkpoint records, as versioned JSON (never pickle).

A checkpoint is the moment of truth of the protocol: once its ``_metadata`` is published, every
committable in it must eventually be committed (re-committed on recovery), and everything this job
opened that no retained checkpoint references is lingering and may be aborted.

``_metadata`` bytes: version 3 (written since 2026-12-02, issue #42) is a manifest: the header
below, and per sink a reference to one Arrow IPC file of its committables beside it instead of the
committables themselves (:mod:`twophase.coordinator.storage.committable_files`, which reads and
writes it through checkpoint storage). Version 2 (2026-11-27) is the whole JSON document below
compressed with zlib (RFC 1950, level 1); version 1 is the same document uncompressed. Readers
take all three, told apart by the first byte (``{`` or zlib's ``x``) and then ``version``. A
checkpoint of 10⁵ subtasks × 3 sinks is about 210 MB of JSON and 9 MB compressed (issue #29).

JSON shape (``format`` and ``version`` first, so any reader can refuse what it does not know)::

    {"format": "twophase.checkpoint", "version": 2,
     "job_id": "...", "checkpoint_id": 7, "kind": "checkpoint" | "savepoint" | "final",
     "timestamp_ms": 1700000000000,
     "source_position": {"engine": "spark", "query_id": "...", "batch_id": 6} | null,
     "fully_finished": ["<operator id>", ...],
     "end_of_input": false,
     "sinks": {"<sink>": {"num_partitions": 2,
                          "committables": [{"partition": 0, "attempt": 0, "checkpoint_id": 7,
                                            "payload": {...}}],
                          "in_progress": {"0": {...}}}}}
"""

from __future__ import annotations

import enum
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import pyarrow as pa

from twophase.coordinator.state import collector
from twophase.coordinator.state.payload import payload_bytes
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import CommittableDecodeError

FORMAT = "twophase.checkpoint"
VERSION = 2
"""The version :meth:`CheckpointMetadata.dumps` writes."""
READABLE_VERSIONS = (1, 2)
"""The versions :meth:`CheckpointMetadata.loads` reads from bytes alone (1: plain JSON; 2:
zlib-compressed JSON). Version 3 names files beside it: checkpoint storage reads it."""
MANIFEST_VERSION = 3
"""The version of a manifest: committables in files beside ``_metadata`` (issue #42)."""
ZLIB_LEVEL = 1
"""zlib's fastest level: 25× smaller at 10⁵ × 3 for about a second of one core (issue #29)."""
METADATA_MEDIA_TYPE = "application/zlib"
"""The media type of version 2 ``_metadata`` bytes (an S3 object's ``Content-Type``)."""


class CheckpointKind(enum.Enum):
    """Why a checkpoint was taken. Savepoints are retained until the user deletes them."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"
    FINAL = "final"


@dataclass(frozen=True)
class CommittableRecord:
    """One pre-committed transaction of one subtask: (partition, attempt, encoded committable).

    ``payload`` is the sink codec's versioned JSON object (``{"kind", "version", "body"}``) as the
    executor encoded it: canonical UTF-8 JSON bytes (:mod:`~twophase.coordinator.state.payload`), kept
    as bytes from the acknowledgement to the committable file and back (issue #42); a version 1
    or 2 checkpoint's embedded objects are turned into the same canonical bytes when read.
    ``checkpoint_id`` is the checkpoint it was pre-committed for, which may be older than the
    checkpoint holding it (a transaction stays in every checkpoint until its commit is confirmed);
    ``None`` in metadata written before it was recorded (readers then assume the holding
    checkpoint). Checkpoint-commit sinks need it to commit each checkpoint as its own group.
    """

    partition: int
    attempt: int
    payload: bytes
    checkpoint_id: int | None = None


COMMITTABLE_COLUMNS = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("checkpoint_id", pa.int64()),
        pa.field("payload", pa.binary(), nullable=False),
    ]
)
"""One sink's committables as columns, one row per :class:`CommittableRecord` (a committable
file's columns, :mod:`~twophase.coordinator.storage.committable_files`)."""


class CommittableRows(Sequence[CommittableRecord]):
    """One sink's committables held as an Arrow table of :data:`COMMITTABLE_COLUMNS` (issue #42):
    what the coordinator's metadata carries, built from its ledger's columns without a Python
    object per row. Readers get the sequence of :class:`CommittableRecord` they always did, each
    made on access; the committable file is written from :attr:`table` as it is. Equal to any
    sequence of the same records (a tuple of them included).

    Args:
        table: the rows, in the checkpoint's order (any chunking; columns by name).

    Raises:
        ValueError: ``table``'s columns are not :data:`COMMITTABLE_COLUMNS`' names and types.
    """

    __slots__ = ("_records", "table")

    def __init__(self, table: pa.Table) -> None:
        if table.schema.names != COMMITTABLE_COLUMNS.names or table.schema.types != COMMITTABLE_COLUMNS.types:
            raise ValueError(f"committable columns {table.schema} are not {COMMITTABLE_COLUMNS}")
        self.table = table
        self._records: tuple[CommittableRecord, ...] | None = None

    def records(self) -> tuple[CommittableRecord, ...]:
        """Every row as a record (made once, on first call: a reader's pass)."""
        if self._records is None:
            cols = [self.table[n].to_pylist() for n in COMMITTABLE_COLUMNS.names]
            with collector.paused():
                self._records = tuple(
                    CommittableRecord(p, a, payload, c) for p, a, c, payload in zip(*cols, strict=True)
                )
        return self._records

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @overload
    def __getitem__(self, index: int) -> CommittableRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[CommittableRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> CommittableRecord | tuple[CommittableRecord, ...]:
        return self.records()[index]

    def __iter__(self) -> Iterator[CommittableRecord]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CommittableRows):
            return self is other or self.records() == other.records()
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self.records() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.records())

    def __repr__(self) -> str:
        return f"CommittableRows({len(self)} rows)"


@dataclass(frozen=True)
class SinkSnapshot:
    """One sink's part of a checkpoint.

    Attributes:
        num_partitions: the parallelism the sink ran with in this checkpoint's epoch.
        committables: pre-committed transactions to commit once this checkpoint completes (a
            tuple of records, or :class:`CommittableRows`: the same records as columns).
        in_progress: partition → in-progress state of transactions that span checkpoints.
    """

    num_partitions: int
    committables: Sequence[CommittableRecord] = ()
    in_progress: Mapping[int, JsonObject] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointMetadata:
    """Everything one completed checkpoint records. See the module docstring for the JSON shape.

    Attributes:
        job_id: the job's stable id.
        checkpoint_id: monotonically increasing, ≥ 1.
        kind: checkpoint, savepoint or final.
        timestamp_ms: when the checkpoint completed, ms since the epoch.
        sinks: sink name → its snapshot.
        source_position: engine position the checkpoint covers (Spark: query id and batch id).
        fully_finished: operator ids all of whose subtasks had finished (FLIP-147); skipped on restore.
        end_of_input: the job had reached end of input; restoring from it replays nothing.
    """

    job_id: str
    checkpoint_id: int
    kind: CheckpointKind
    timestamp_ms: int
    sinks: Mapping[str, SinkSnapshot]
    source_position: JsonObject | None = None
    fully_finished: tuple[str, ...] = ()
    end_of_input: bool = False

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON object described in the module docstring."""
        return self._to_json(copy=True)

    def _to_json(self, *, copy: bool) -> dict[str, Any]:
        """:meth:`to_json` (each payload parsed from its bytes: the embedded form of versions 1
        and 2, written only for what reads them)."""
        obj = self.header_json()
        for name, snap in self.sinks.items():
            obj["sinks"][name]["committables"] = [
                {"partition": c.partition, "attempt": c.attempt, "payload": json.loads(c.payload)}
                | ({} if c.checkpoint_id is None else {"checkpoint_id": c.checkpoint_id})
                for c in snap.committables
            ]
        return obj

    def committable_count(self) -> int:
        """How many committables the checkpoint holds, every sink's (what its log line and
        metrics report): a sink's :class:`CommittableRows` counted by its table, not asked their
        length (issue #42)."""
        n = 0
        for snap in self.sinks.values():
            rows = snap.committables
            n += rows.table.num_rows if isinstance(rows, CommittableRows) else len(rows)
        return n

    def header_json(self, version: int = VERSION) -> dict[str, Any]:
        """The JSON object of this checkpoint without its committables: everything but each sink's
        ``committables`` (a version 3 manifest adds its file references there)."""
        return {
            "format": FORMAT,
            "version": version,
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind.value,
            "timestamp_ms": self.timestamp_ms,
            "source_position": dict(self.source_position) if self.source_position is not None else None,
            "fully_finished": list(self.fully_finished),
            "end_of_input": self.end_of_input,
            "sinks": {
                name: {
                    "num_partitions": snap.num_partitions,
                    "in_progress": {str(p): dict(s) for p, s in sorted(snap.in_progress.items())},
                }
                for name, snap in sorted(self.sinks.items())
            },
        }

    def dumps(self) -> bytes:
        """The bytes of a version 2 ``_metadata`` file: UTF-8 JSON, keys sorted, zlib-compressed
        (what the previous release published; checkpoint storage publishes version 3 now).

        Payloads are not copied first, and the cyclic garbage collector is paused meanwhile
        (:func:`~twophase.coordinator.state.collector.paused`). The same metadata always gives the same
        bytes (S3's publish compares an object it finds with these)."""
        with collector.paused():
            text = json.dumps(
                self._to_json(copy=False), sort_keys=True, separators=(",", ":"), check_circular=False
            )
        return zlib.compress(text.encode("utf-8"), ZLIB_LEVEL)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CheckpointMetadata:
        """Parse and validate a metadata object.

        Raises:
            CommittableDecodeError: wrong format, unsupported version, or missing/mistyped fields.
        """
        return cls._from_json(obj, copy=True)

    @classmethod
    def _from_json(
        cls,
        obj: Mapping[str, Any],
        *,
        copy: bool,
        committables: Mapping[str, tuple[CommittableRecord, ...]] | None = None,
    ) -> CheckpointMetadata:
        """:meth:`from_json`; ``copy=False`` keeps the payload dicts of ``obj`` (fresh from
        ``json.loads``, owned by nobody else) instead of copying each. ``committables``: a version
        3 manifest's, per sink, read from its files (the manifest holds none)."""
        version = document_version(obj)
        if version == MANIFEST_VERSION and committables is None:
            raise CommittableDecodeError(
                "checkpoint metadata version 3 is a manifest whose committables are in files beside it: "
                "read it through checkpoint storage"
            )
        try:
            sinks = {
                str(name): SinkSnapshot(
                    num_partitions=_int(s["num_partitions"]),
                    committables=committables.get(str(name), ())
                    if committables is not None
                    else tuple(
                        CommittableRecord(
                            _int(c["partition"]),
                            _int(c["attempt"]),
                            payload_bytes(_obj(c["payload"], False)),
                            None if c.get("checkpoint_id") is None else _int(c["checkpoint_id"]),
                        )
                        for c in s["committables"]
                    ),
                    in_progress={int(p): dict(v) for p, v in s["in_progress"].items()},
                )
                for name, s in obj["sinks"].items()
            }
            pos = obj.get("source_position")
            return cls(
                job_id=str(obj["job_id"]),
                checkpoint_id=_int(obj["checkpoint_id"]),
                kind=CheckpointKind(obj["kind"]),
                timestamp_ms=_int(obj["timestamp_ms"]),
                sinks=sinks,
                source_position=dict(pos) if pos is not None else None,
                fully_finished=tuple(str(o) for o in obj.get("fully_finished", ())),
                end_of_input=bool(obj.get("end_of_input", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CommittableDecodeError(f"invalid checkpoint metadata: {e!r}") from e

    @classmethod
    def loads(cls, data: bytes | str) -> CheckpointMetadata:
        """Parse ``_metadata`` bytes of version 1 or 2 (plain or zlib-compressed JSON).

        Raises:
            CommittableDecodeError: neither JSON nor a complete zlib stream of JSON (a truncated
                or altered stream fails zlib's Adler-32 check), not valid metadata, or a version 3
                manifest (its files are read through checkpoint storage).
        """
        return cls.from_document(parse_document(data))

    @classmethod
    def from_document(cls, obj: dict[str, Any]) -> CheckpointMetadata:
        """The checkpoint of a version 1 or 2 object fresh from :func:`parse_document` (its payload
        dicts are kept, not copied).

        Raises:
            CommittableDecodeError: not valid metadata, or a version 3 manifest.
        """
        with collector.paused():
            return cls._from_json(obj, copy=False)

    @classmethod
    def from_manifest(
        cls, obj: Mapping[str, Any], committables: Mapping[str, tuple[CommittableRecord, ...]]
    ) -> CheckpointMetadata:
        """The checkpoint a version 3 manifest ``obj`` (a :func:`parse_document` result)
        describes, with ``committables`` (sink → its records, read from the files it names).

        Raises:
            CommittableDecodeError: not a manifest, or missing/mistyped fields.
        """
        if document_version(obj) != MANIFEST_VERSION:
            raise CommittableDecodeError(f"not a version {MANIFEST_VERSION} checkpoint manifest")
        return cls._from_json(obj, copy=False, committables=committables)


def parse_document(data: bytes | str) -> dict[str, Any]:
    """The JSON object of ``_metadata`` bytes (plain JSON, or zlib-compressed since version 2),
    not yet validated beyond being an object.

    Raises:
        CommittableDecodeError: neither JSON nor a complete zlib stream of JSON, or not an object.
    """
    if isinstance(data, (bytes, bytearray)) and data[:1] == b"x":
        try:
            data = zlib.decompress(data)
        except zlib.error as e:
            raise CommittableDecodeError(f"checkpoint metadata is not a complete zlib stream: {e}") from e
    with collector.paused():
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise CommittableDecodeError(f"checkpoint metadata is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise CommittableDecodeError(f"not a {FORMAT} object")
    return obj


def document_version(obj: Mapping[str, Any]) -> int:
    """The ``version`` of a checkpoint metadata object: 1–3 are read; a later one is refused by
    name, so a release that does not know a newer format never reads it as something else.

    Raises:
        CommittableDecodeError: not a ``twophase.checkpoint`` object, or an unknown version.
    """
    if not isinstance(obj, Mapping) or obj.get("format") != FORMAT:
        raise CommittableDecodeError(f"not a {FORMAT} object")
    version = obj.get("version")
    if type(version) is not int or version not in (*READABLE_VERSIONS, MANIFEST_VERSION):  # not bool
        raise CommittableDecodeError(
            f"unsupported checkpoint metadata version {version!r}: this twophase reads versions 1 to "
            f"{MANIFEST_VERSION}; a newer release wrote it, so restore it with that release or a later one"
        )
    return version


def _obj(value: Any, copy: bool) -> dict[str, Any]:
    """``value`` as a dict: a copy if asked or if it is another mapping, else itself."""
    return value if not copy and type(value) is dict else dict(value)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {v!r:.40}")
    return v
