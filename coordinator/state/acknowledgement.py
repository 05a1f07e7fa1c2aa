"""The one acknowledgement type: what a subtask reports to its checkpoint.

A subtask (one sink writing one partition in one epoch) acknowledges its checkpoint with the
encoded committable of what it pre-committed and the in-progress state it carries into the next
epoch. The same value travels every hop: the executor loop returns it
(:func:`~twophase.coordinator.run.fanout.write_subtasks`), Spark ships it as an Arrow row
(:data:`ACK_SCHEMA`) or inside a Python data source commit message, the driver takes a whole
epoch's acknowledgements as one Arrow table (:func:`acknowledgement_table`, checked in Arrow
compute by :mod:`~twophase.coordinator.state.ack_table`), the checkpoint coordinator records it, and its
payload bytes are written to the checkpoint's committable file as received: the driver neither
parses nor decodes them at intake (:mod:`~twophase.coordinator.state.payload`; the sink's object is made
at commit). Committable and in-progress state travel as JSON text in binary columns, and Spark
never builds a ``Row`` of them (issue #42). Every row carries the executor's twophase release
(:data:`RELEASE`) and its payload's codec header (``kind`` and ``version``, read from the object
the executor encoded, not parsed from the bytes), which the driver checks for the whole table at
once, as small columns, without parsing a payload.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from twophase.coordinator.state.payload import payload_bytes
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject

RELEASE = importlib.metadata.version("twophase")
"""The twophase release this process runs; an executor stamps it on each of its rows
(:data:`ACK_SCHEMA`'s ``release``), read from the executor's own installation's metadata (not
from the root package, which sits above this module in the import graph), so the driver can
refuse the rows of another release before anything is written (their payloads may not decode)."""


@dataclass(frozen=True)
class Acknowledgement:
    """One subtask's acknowledgement of a checkpoint.

    Attributes:
        sink: the sink's name.
        partition: the subtask index.
        attempt: the task attempt that wrote it.
        committable: the encoded committable: the canonical UTF-8 JSON bytes of the sink codec's
            versioned object (:func:`~twophase.coordinator.state.payload.payload_bytes`), or ``None``
            for an empty transaction.
        in_progress: the in-progress state to carry into the next epoch, or ``None``.
        records: records written, if known.
        write_ms: time spent in begin/write/pre-commit, ms.
        kind: the payload's codec ``kind`` (its ``"kind"`` field), ``None`` without a payload or
            when the encoded object has no string ``kind``.
        version: the payload's codec ``version`` (its ``"version"`` field), ``None`` without a
            payload or when the encoded object has no integer ``version``.
    """

    sink: str
    partition: int
    attempt: int
    committable: bytes | None = None
    in_progress: JsonObject | None = None
    records: int | None = None
    write_ms: float = 0.0
    kind: str | None = None
    version: int | None = None

    @classmethod
    def of(
        cls,
        sink: TwoPhaseCommitSink[Any, Any],
        partition: int,
        attempt: int,
        committable: Any | None,
        in_progress: JsonObject | None = None,
        records: int | None = None,
        write_ms: float = 0.0,
    ) -> Acknowledgement:
        """The acknowledgement of a committable made right here (encoded once, with the sink's
        codec), with the header of the object encoded: its ``kind`` and ``version`` travel beside
        the bytes, so the driver checks them without parsing the payload (issue #42)."""
        if committable is None:
            return cls(sink.name, partition, attempt, None, in_progress, records, write_ms)
        obj = sink.encode(committable)
        kind, version = header_of(obj)
        return cls(
            sink.name, partition, attempt, payload_bytes(obj), in_progress, records, write_ms, kind, version
        )

    def to_row(self) -> dict[str, Any]:
        """A flat row of :data:`ACK_SCHEMA` (UTF-8 JSON text for the nested parts)."""
        return {
            "sink": self.sink,
            "partition": self.partition,
            "attempt": self.attempt,
            "committable": self.committable,
            "in_progress": json_bytes(self.in_progress),
            "records": self.records,
            "write_ms": self.write_ms,
            "release": RELEASE,
            "kind": self.kind,
            "version": self.version,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Acknowledgement:
        """Inverse of :meth:`to_row` (JSON text as ``bytes`` or ``str``; the payload kept as bytes)."""
        return cls(
            sink=str(row["sink"]),
            partition=int(row["partition"]),
            attempt=int(row["attempt"]),
            committable=_bytes(row["committable"]),
            in_progress=None if row["in_progress"] is None else json.loads(row["in_progress"]),
            records=None if row["records"] is None else int(row["records"]),
            write_ms=float(row["write_ms"]),
            kind=row.get("kind"),
            version=row.get("version"),
        )


def header_of(obj: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The ``kind`` (a string) and ``version`` (an integer, not a bool, within int64) of an
    encoded committable object, ``None`` for each it lacks or holds mistyped: what the codec reads
    first (:meth:`~twophase.sinks.codec.CommittableCodec.from_json`)."""
    kind, version = obj.get("kind"), obj.get("version")
    return (
        kind if type(kind) is str else None,
        version if type(version) is int and -(2**63) <= version < 2**63 else None,
    )


def json_bytes(value: JsonObject | None) -> bytes | None:
    """``value`` as compact UTF-8 JSON text (an :data:`ACK_SCHEMA` binary cell), ``None`` as null."""
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()


ACK_SCHEMA = pa.schema(
    [
        ("sink", pa.string()),
        ("partition", pa.int32()),
        ("attempt", pa.int32()),
        ("committable", pa.binary()),
        ("in_progress", pa.binary()),
        ("records", pa.int64()),
        ("write_ms", pa.float64()),
        ("release", pa.string()),
        ("kind", pa.string()),
        ("version", pa.int64()),
    ]
)
"""Arrow schema of :meth:`Acknowledgement.to_row` rows (what Spark's ``mapInArrow`` yields).

``committable`` holds the payload bytes and ``in_progress`` UTF-8 JSON text (:func:`json_bytes`),
null for none; ``release`` the executor's :data:`RELEASE`; ``kind`` and ``version`` the payload's
codec header (:func:`header_of`, null without a payload). Changed in issue #42 from ``string`` to
``binary``, and ``release`` added: an executor of an earlier release cannot hand this driver its
rows (Spark refuses a batch of another schema), and one of a later release is refused by its
stamp (a job runs one release on the driver and its executors); ``kind`` and ``version`` added
later in #42, so that the driver checks the headers without parsing the payloads (a table without
them comes from an earlier release, and is refused naming it)."""


def acknowledgement_table(acks: Iterable[Acknowledgement]) -> pa.Table:
    """``acks`` as one table of :data:`ACK_SCHEMA`, in the order given (the order the driver
    received them: the first of a (sink, partition) is the one acknowledged)."""
    return pa.Table.from_pylist([a.to_row() for a in acks], schema=ACK_SCHEMA)


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def acknowledgements_in(table: pa.Table) -> list[Acknowledgement]:
    """The rows of a table of :data:`ACK_SCHEMA` as objects, in row order: for the few rows the
    driver handles one by one (duplicates, a late acknowledgement of an aborted checkpoint)."""
    return [Acknowledgement.from_row(row) for row in table.to_pylist()]
