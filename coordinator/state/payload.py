"""Committable payloads as bytes: the one encoded form from the executor to the committable file.

A payload is the sink codec's versioned JSON object (``{"body", "kind", "version"}``) as canonical
UTF-8 JSON text: keys sorted, no spaces, ASCII (what :meth:`~twophase.sinks.codec.CommittableCodec.dumps`
writes). The executor encodes each committable once (:func:`payload_bytes`); the driver keeps those
bytes as they arrived, through the pending transaction and the checkpoint's committable file, and
back on restore (issue #42). Equal payloads are equal bytes, so bytes tell held transactions apart.

The sink's object is made from them only where a sink needs one — commit and abort, verification,
lingering cleanup — by :func:`decode_payload`, once per transaction
(:class:`~twophase.coordinator.state.subtask_lifecycle.PendingTransaction` keeps it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, overload

import pyarrow as pa

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import CommittableDecodeError

COMM = TypeVar("COMM")


def payload_bytes(obj: Mapping[str, Any]) -> bytes:
    """The canonical bytes of a payload object (sorted keys, compact, ASCII): equal objects give
    equal bytes, in whichever release or process they are encoded (``float`` as ``repr``)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("ascii")


def payload_object(payload: bytes) -> dict[str, Any]:
    """The JSON object of ``payload``.

    Raises:
        CommittableDecodeError: not JSON text of one object.
    """
    try:
        obj = json.loads(payload)
    except (ValueError, TypeError) as e:
        raise CommittableDecodeError(f"a committable payload is not JSON: {e}: {_head(payload)}") from e
    if type(obj) is not dict:
        raise CommittableDecodeError(f"a committable payload is not a JSON object: {_head(payload)}")
    return obj


def _head(payload: object) -> str:
    return repr(payload[:120]) if isinstance(payload, (bytes, bytearray, str)) else type(payload).__name__


def decode_payload(sink: TwoPhaseCommitSink[Any, COMM], payload: bytes) -> COMM:
    """``sink``'s committable of ``payload`` (:meth:`~twophase.sinks.api.TwoPhaseCommitSink.decode`).

    Raises:
        CommittableDecodeError: not JSON, or the sink's codec refuses it (another kind, a newer
            version, missing or mistyped fields).
    """
    return sink.decode(payload_object(payload))


def decode_payloads(
    sink: TwoPhaseCommitSink[Any, COMM], payloads: pa.Array | pa.ChunkedArray | Sequence[bytes]
) -> list[COMM]:
    """``sink``'s committables of ``payloads`` (a binary column, or byte strings), in order, in
    one pass: what the committer hands a commit call of a ledger block's rows (issue #42: the
    committables decoded in bulk from the payload column, no transaction object per row).

    Raises:
        CommittableDecodeError: a payload does not decode (the first that does not, named as
            :func:`decode_payload` names it); whatever else the sink's ``decode`` raised.
    """
    decode, loads = sink.decode, json.loads
    try:
        if not isinstance(payloads, (pa.Array, pa.ChunkedArray)):
            return [decode(loads(p)) for p in payloads]
        # a slice at a time as Python bytes: the whole column at once held every payload again
        # beside the committables made of it (issue #42: ~200 MB at 10⁵ × 3 sinks)
        out: list[COMM] = []
        for start in range(0, len(payloads), DECODE_SLICE):
            out.extend([decode(loads(p)) for p in payloads.slice(start, DECODE_SLICE).to_pylist()])
        return out
    except Exception:
        raw = payloads.to_pylist() if isinstance(payloads, (pa.Array, pa.ChunkedArray)) else payloads
        for p in raw:  # the rare path: find the payload that fails, and say what is wrong with it
            decode_payload(sink, p)
        raise  # every one decodes one by one (a decode that fails once): the bulk pass's error


DECODE_SLICE = 4_096
"""Payloads :func:`decode_payloads` turns into Python bytes at a time (a few MB at the
connectors' payload sizes; each slice costs a few microseconds)."""


class DecodedOnAccess(Sequence[COMM]):
    """``sink``'s committables of ``payloads``, each decoded on first access and kept.

    Raises (on access):
        CommittableDecodeError: that payload does not decode (every access raises it again).
    """

    __slots__ = ("_made", "_payloads", "_sink")

    def __init__(self, sink: TwoPhaseCommitSink[Any, COMM], payloads: Sequence[bytes]) -> None:
        self._sink = sink
        self._payloads = payloads
        self._made: dict[int, COMM] = {}

    def __len__(self) -> int:
        return len(self._payloads)

    @overload
    def __getitem__(self, index: int) -> COMM: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[COMM]: ...

    def __getitem__(self, index: int | slice) -> COMM | Sequence[COMM]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        i = index + len(self) if index < 0 else index
        made = self._made.get(i)
        if made is None:
            made = self._made[i] = decode_payload(self._sink, self._payloads[i])
        return made

    def __repr__(self) -> str:
        return f"DecodedOnAccess({len(self._payloads)} payloads)"
