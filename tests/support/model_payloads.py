"""Rules of the model-based protocol test (tests/coordinator/test_protocol_model.py) for committable
payloads as the executors' bytes (issue #42): the bytes a checkpoint's committable file holds are
the bytes the executors acknowledged, a checkpoint read back (version 3, or written as version 1
or 2 by a previous release) gives the same bytes, and a payload that fails to decode only when
the committer decodes it is never counted as committed."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from support.model_settle import arm_once
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import CommittableDecodeError

UNDECODABLE_SINKS = ("d", "i")
"""Sinks whose next decode a rule makes fail: the Delta model and Iceberg sinks verify nothing
before persist, so their first decode of a new payload is the committer's."""


class ModelDecodeFailure(CommittableDecodeError):
    """A payload that does not decode, once, where the sink's object is first made (the model's
    stand-in for a codec bug that shows only at commit time)."""


_encoded: set[bytes] = set()
_of = Acknowledgement.of.__func__  # type: ignore[attr-defined]


def _recording_of(cls: type[Acknowledgement], *args: Any, **kwargs: Any) -> Acknowledgement:
    ack: Acknowledgement = _of(cls, *args, **kwargs)
    if ack.committable is not None:
        _encoded.add(ack.committable)
    return ack


Acknowledgement.of = classmethod(_recording_of)  # type: ignore[method-assign,assignment]
"""Every acknowledgement is made by ``Acknowledgement.of`` — an executor's task, or the driver's
own at end of input (``driver_finish``) — the one place a committable is encoded: what it
encoded is what any checkpoint may hold (tests only: this module is the model's)."""


def acknowledged_payloads() -> set[bytes]:
    """The payloads encoded since the last call (and forgets them): the model's set, per life."""
    out = set(_encoded)
    _encoded.clear()
    return out


def payloads_of(meta: CheckpointMetadata) -> dict[str, list[bytes]]:
    """Sink → the payload bytes of its committables in ``meta``, in order."""
    return {name: [r.payload for r in snap.committables] for name, snap in meta.sinks.items()}


def foreign_payloads(landed: Iterable[CheckpointMetadata], acknowledged: set[bytes]) -> list[str]:
    """Every committable of a published checkpoint whose bytes no executor acknowledged: a payload
    altered (parsed and encoded again, re-ordered, re-escaped) between intake and the file."""
    return [
        f"checkpoint {m.checkpoint_id} sink {name}: {p[:80]!r}"
        for m in landed
        for name, ps in payloads_of(m).items()
        for p in ps
        if p not in acknowledged
    ]


def read_back_differs(storage: CheckpointStorage, landed: Iterable[CheckpointMetadata]) -> list[str]:
    """Every retained checkpoint whose payload bytes, read back (version 3: its committable files),
    differ from what was published; and the newest published checkpoint written as version 1
    (plain JSON) or 2 (zlib) by the previous release, whose payloads must read back as the same
    canonical bytes."""
    published = {m.checkpoint_id: m for m in landed}
    bad: list[str] = []
    for ref in storage.list_checkpoints():
        meta = published.get(ref.checkpoint_id)
        if meta is None:
            continue  # a lineage start or a savepoint of an earlier storage: its own publish
        if payloads_of(storage.load(ref)) != payloads_of(meta):
            bad.append(f"v3 read back of checkpoint {ref.checkpoint_id} at {ref.location}")
    if published:
        meta = published[max(published)]
        v1 = CheckpointMetadata.loads(json.dumps(meta.to_json()).encode())
        v2 = CheckpointMetadata.loads(meta.dumps())
        for version, back in (("v1", v1), ("v2", v2)):
            if payloads_of(back) != payloads_of(meta):
                bad.append(f"{version} read back of checkpoint {meta.checkpoint_id}")
    return bad


def undecodable_once(sink: TwoPhaseCommitSink[Any, Any]) -> None:
    """Make ``sink``'s next ``decode`` raise :class:`ModelDecodeFailure`; later ones decode."""

    def decode(payload: Any) -> Any:
        raise ModelDecodeFailure(f"model: sink {sink.name!r}'s payload does not decode this once")

    arm_once(sink, "decode", decode)
