"""What lingering cleanup may abort (DESIGN.md §5, §6), as pure functions.

``abort_lingering`` may touch a transaction of this job and sink only if nothing can still need
it: no retained checkpoint or savepoint references it (as a committable or as in-progress state),
the running job does not hold it in memory (pending commit, or in progress in a live subtask), and
no acknowledgement about to be recorded carries it. Aborting anything else would lose data a
checkpoint promised.

Two forms of the same rule:

- :func:`held_decoded` (the runtime's): every committable is given decoded, as the runtime already
  holds it (decoded once, at acknowledgement or when a checkpoint is first read), and nothing is
  decoded or encoded again; :meth:`HeldCommittables.scope` hands it to the sink;
- :func:`held_by` (for callers that hold only checkpoint metadata: cancel, the operator
  commands): payload bytes, told apart as bytes (every payload is canonical JSON,
  :mod:`~twophase.coordinator.payload`); :func:`lingering_scope` decodes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from twophase.coordinator.metadata import CheckpointMetadata
from twophase.coordinator.payload import decode_payload
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, LingeringScope

AnySink = TwoPhaseCommitSink[Any, Any]
COMM = TypeVar("COMM")
ALL_CHECKPOINTS = 2**62
"""``LingeringScope.up_to_checkpoint`` meaning "every checkpoint"."""


def canonical(obj: JsonObject) -> str:
    """A JSON object as canonical text (sorted keys, no spaces): equal objects, equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Held:
    """What ``abort_lingering`` must never touch for one sink (see :func:`held_by`).

    Attributes:
        committables: payload bytes (canonical JSON) → the same, each once.
        in_progress: canonical JSON → in-progress state.
        max_partitions: the largest parallelism the sink ran with in any of them.
    """

    committables: Mapping[bytes, bytes]
    in_progress: Mapping[str, JsonObject]
    max_partitions: int


def held_by(
    sink_name: str,
    checkpoints: Iterable[CheckpointMetadata],
    *,
    pending: Iterable[bytes] = (),
    live_in_progress: Iterable[JsonObject] = (),
    live_parallelism: int = 0,
) -> Held:
    """What may NOT be aborted for ``sink_name``: this module's rule, as a pure function.

    Args:
        sink_name: the sink.
        checkpoints: the checkpoints whose promises stand — every retained checkpoint and
            savepoint, plus one being restored from elsewhere (a savepoint location); on cancel
            with delete, the savepoints only.
        pending: encoded committables the running job holds (pre-committed and not yet confirmed
            committed, or acknowledged but not yet in a checkpoint).
        live_in_progress: in-progress states of the running job's live subtasks.
        live_parallelism: the running job's parallelism for the sink (0 if none).

    Returns:
        Everything held; whatever ``abort_lingering`` finds of this job and sink outside it is
        lingering and may be aborted.
    """
    committables: dict[bytes, bytes] = {}
    in_progress: dict[str, JsonObject] = {}
    max_partitions = live_parallelism
    for meta in checkpoints:
        snap = meta.sinks.get(sink_name)
        if snap is None:
            continue
        max_partitions = max(max_partitions, snap.num_partitions)
        for rec in snap.committables:
            committables.setdefault(rec.payload, rec.payload)
        for state in snap.in_progress.values():
            in_progress.setdefault(canonical(state), state)
    for payload in pending:
        committables.setdefault(payload, payload)
    for state in live_in_progress:
        in_progress.setdefault(canonical(state), state)
    return Held(committables, in_progress, max_partitions)


def lingering_scope(job_id: str, sink: AnySink, held: Held, up_to_checkpoint: int) -> LingeringScope[Any]:
    """The :class:`~twophase.sinks.context.LingeringScope` handed to ``sink.abort_lingering``
    (each held payload decoded here).

    Raises:
        CommittableDecodeError: a held payload does not decode with the sink's codec.
    """
    decoded = tuple(decode_payload(sink, p) for p in held.committables.values())
    return HeldCommittables(decoded, held.in_progress, held.max_partitions).scope(
        job_id, sink.name, up_to_checkpoint
    )


@dataclass(frozen=True)
class HeldCommittables(Generic[COMM]):
    """What ``abort_lingering`` must never touch for one sink, committables decoded (see
    :func:`held_decoded`).

    Attributes:
        committables: every held committable once (equal ones once), decoded.
        in_progress: canonical JSON → in-progress state.
        max_partitions: the largest parallelism the sink ran with in any of them.
    """

    committables: tuple[COMM, ...]
    in_progress: Mapping[str, JsonObject]
    max_partitions: int

    def scope(
        self, job_id: str, sink_name: str, up_to_checkpoint: int, *, routine: bool = False
    ) -> LingeringScope[COMM]:
        """The :class:`~twophase.sinks.context.LingeringScope` handed to ``abort_lingering``
        (``routine``: the cleanup after an epoch of a running job)."""
        return LingeringScope(
            job_id=job_id,
            sink_name=sink_name,
            held=self.committables,
            held_in_progress=tuple(self.in_progress.values()),
            up_to_checkpoint=up_to_checkpoint,
            max_partitions=self.max_partitions,
            routine=routine,
        )


def held_decoded(
    sink: TwoPhaseCommitSink[Any, COMM],
    checkpoints: Iterable[tuple[CheckpointMetadata, Sequence[COMM]]],
    *,
    pending: Iterable[COMM] = (),
    live_in_progress: Iterable[JsonObject] = (),
    live_parallelism: int = 0,
) -> HeldCommittables[COMM]:
    """:func:`held_by`'s rule over committables already decoded: nothing is decoded or encoded.

    Args:
        sink: the sink (its codec encodes only a committable that cannot be hashed, to tell equal
            ones apart; see :func:`distinct`).
        checkpoints: the checkpoints whose promises stand, each with ``sink``'s committables in it
            decoded, in metadata order (see :func:`held_by`).
        pending: committables the running job holds, decoded.
        live_in_progress: in-progress states of the running job's live subtasks.
        live_parallelism: the running job's parallelism for the sink (0 if none).

    Returns:
        Everything held, as :func:`held_by` says.
    """
    committables: list[COMM] = []
    in_progress: dict[str, JsonObject] = {}
    max_partitions = live_parallelism
    for meta, decoded in checkpoints:
        snap = meta.sinks.get(sink.name)
        if snap is None:
            continue
        max_partitions = max(max_partitions, snap.num_partitions)
        committables.extend(decoded)
        for state in snap.in_progress.values():
            in_progress.setdefault(canonical(state), state)
    committables.extend(pending)
    for state in live_in_progress:
        in_progress.setdefault(canonical(state), state)
    return HeldCommittables(distinct(committables, sink.encode), in_progress, max_partitions)


_BY_ENCODING = object()
"""Marks the key of a committable told apart by its canonical encoding (it cannot be hashed)."""


def distinct(committables: Iterable[COMM], encode: Callable[[COMM], JsonObject]) -> tuple[COMM, ...]:
    """Each committable once, in order of first appearance. Committables are frozen dataclasses,
    equal when their fields are (as equal payloads decode to equal objects); one that cannot be
    hashed (a mapping field) is told apart by its canonical encoding instead."""
    seen: dict[object, COMM] = {}
    for c in committables:
        try:
            seen.setdefault(c, c)
        except TypeError:
            seen.setdefault((_BY_ENCODING, canonical(encode(c))), c)
    return tuple(seen.values())
