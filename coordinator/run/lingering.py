"""What lingering cleanup may abort (DESIGN.md §5, §6).

``abort_lingering`` may touch a transaction of this job and sink only if nothing can still need
it: no retained checkpoint or savepoint references it (as a committable or as in-progress state),
the running job does not hold it in memory (pending commit, or in progress in a live subtask), and
no acknowledgement about to be recorded carries it. Aborting anything else would lose data a
checkpoint promised.

Held committables are told apart by their payload bytes (every payload is canonical JSON,
:mod:`~twophase.coordinator.state.payload`: equal bytes, the same transaction) and handed to the sink
as a :class:`HeldCommittables` sequence, which makes each one's object only when the sink reads
it, and then from wherever it is already made (a pending transaction's, the metadata cache's):
a sink whose cleanup does not look at ``scope.held`` decodes nothing (issue #42), and one that
does decodes each held transaction at most once, sharing the object with the committer. Two
ways in:

- :func:`held_of` (the runtime's, :class:`~twophase.coordinator.run.lingering_cleanup.LingeringCleanup`):
  checkpoints with their committables as the metadata cache holds them, and the running job's
  pending transactions;
- :func:`held_by` (for callers that hold only checkpoint metadata: cancel, the operator
  commands): payload bytes; :func:`lingering_scope` hands them to the sink, decoded on access.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.state.payload import DecodedOnAccess, payload_bytes
from twophase.coordinator.state.subtask_lifecycle import CommittablesOf, PendingTransaction
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
    """The :class:`~twophase.sinks.context.LingeringScope` handed to ``sink.abort_lingering``; each
    held payload is decoded when the sink reads it (a payload that does not decode raises
    ``CommittableDecodeError`` there)."""
    payloads = tuple(held.committables)
    committables = HeldCommittables[Any]([(payloads, DecodedOnAccess(sink, payloads))], ((), ()), sink.encode)
    return HeldForCleanup(committables, held.in_progress, held.max_partitions).scope(
        job_id, sink.name, up_to_checkpoint
    )


class _HasPayload(Protocol):
    @property
    def payload(self) -> bytes | None: ...


class PayloadsOf(Sequence[bytes | None]):
    """The ``payload`` of each of ``items`` (checkpoint records, pending transactions), read on
    access: a view, nothing copied."""

    __slots__ = ("_items",)

    def __init__(self, items: Sequence[_HasPayload]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> bytes | None: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes | None]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes | None] | None:
        if isinstance(index, slice):
            return tuple(x.payload for x in self._items[index])
        return self._items[index].payload

    def __iter__(self) -> Iterator[bytes | None]:
        return (x.payload for x in self._items)


Part = tuple[Sequence[bytes | None], Sequence[Any]]
"""Payload bytes (``None``: a transaction a test built from its object) and, at the same index,
the committable (made on access)."""


def transactions_part(txns: Sequence[PendingTransaction[COMM]]) -> Part:
    """``txns`` as a :data:`Part`: their payload bytes and their committables, read on access."""
    return (PayloadsOf(txns), CommittablesOf(txns))


class HeldCommittables(Sequence[COMM]):
    """Every held committable once, told apart by payload bytes, each made only when read.

    Built from ``parts`` (per checkpoint: its payload bytes and, index for index, its committables
    as the metadata cache holds them) and ``pending`` (the running job's pending transactions, as
    payload bytes and committables); the first part holding a payload gives its object. Nothing
    is looked at until the sequence is first read (``len``, an index, iteration): a sink that
    never reads ``scope.held`` costs the driver nothing per transaction. Read on the driver
    thread only (the sink's cleanup).

    Args:
        parts: see above, in checkpoint order.
        pending: the running job's pending transactions, after the checkpoints' committables: a
            part (:func:`transactions_part`; the coordinator's ``pending_of`` reads a ledger
            block's rows from its columns, making no transaction), or what gives it when the
            sequence is first read (within the sink's cleanup call: the driver thread, which alone
            changes them, is in that call).
        encode: the sink's ``encode``, for a transaction without payload bytes (tests build such).

    Raises (on reading):
        CommittableDecodeError: a held payload does not decode.
    """

    __slots__ = ("_encode", "_entries", "_parts", "_pending")

    def __init__(
        self,
        parts: Iterable[Part],
        pending: Part | Callable[[], Part],
        encode: Callable[[COMM], JsonObject],
    ) -> None:
        self._parts: tuple[Part, ...] = tuple(parts)
        self._pending = pending
        self._encode = encode
        self._entries: list[tuple[bytes, Sequence[COMM], int]] | None = None

    def _index(self) -> list[tuple[bytes, Sequence[COMM], int]]:
        entries = self._entries
        if entries is None:
            seen: dict[bytes, tuple[bytes, Sequence[COMM], int]] = {}
            given = self._pending
            pending: Part = given() if callable(given) else given
            for payloads, committables in (*self._parts, pending):
                for i, p in enumerate(payloads):
                    key = p if p is not None else payload_bytes(self._encode(committables[i]))
                    if key not in seen:
                        seen[key] = (key, committables, i)
            entries = self._entries = list(seen.values())
            self._parts, self._pending = (), ((), ())
        return entries

    @property
    def payloads(self) -> tuple[bytes, ...]:
        """The held payload bytes, in order (what tells them apart; nothing is decoded)."""
        return tuple(key for key, _, _ in self._index())

    def __len__(self) -> int:
        return len(self._index())

    @overload
    def __getitem__(self, index: int) -> COMM: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[COMM]: ...

    def __getitem__(self, index: int | slice) -> COMM | Sequence[COMM]:
        entries = self._index()
        if isinstance(index, slice):
            return tuple(c[i] for _, c, i in entries[index])
        _, committables, i = entries[index]
        return committables[i]

    def __iter__(self) -> Iterator[COMM]:
        for _, committables, i in self._index():
            yield committables[i]

    def __repr__(self) -> str:
        n = "unread" if self._entries is None else f"{len(self._entries)} held"
        return f"HeldCommittables({n})"


@dataclass(frozen=True)
class HeldForCleanup(Generic[COMM]):
    """What ``abort_lingering`` must never touch for one sink (see :func:`held_of`).

    Attributes:
        committables: every held committable once, made on reading.
        in_progress: canonical JSON → in-progress state.
        max_partitions: the largest parallelism the sink ran with in any of them.
    """

    committables: HeldCommittables[COMM]
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


def held_of(
    sink: TwoPhaseCommitSink[Any, COMM],
    checkpoints: Iterable[tuple[CheckpointMetadata, Sequence[COMM]]],
    *,
    holding: Sequence[bytes] = (),
    pending: Part | Callable[[], Part] = ((), ()),
    live_in_progress: Iterable[JsonObject] = (),
    live_parallelism: int = 0,
) -> HeldForCleanup[COMM]:
    """:func:`held_by`'s rule over what the runtime holds, nothing decoded or looked at per
    transaction until the sink reads ``scope.held``.

    Args:
        sink: the sink.
        checkpoints: the checkpoints whose promises stand, each with ``sink``'s committables in it
            in metadata order, as the metadata cache holds them (made on access; see
            :func:`held_by`).
        holding: payloads a caller still needs (a restore's: the facade writer's fresh
            acknowledgements), decoded on access.
        pending: the running job's transactions of ``sink`` not yet confirmed committed, as payload
            bytes and committables, or what gives them when ``held`` is first read (see
            :class:`HeldCommittables`).
        live_in_progress: in-progress states of the running job's live subtasks.
        live_parallelism: the running job's parallelism for the sink (0 if none).

    Returns:
        Everything held, as :func:`held_by` says.
    """
    parts: list[Part] = []
    in_progress: dict[str, JsonObject] = {}
    max_partitions = live_parallelism
    for meta, committables in checkpoints:
        snap = meta.sinks.get(sink.name)
        if snap is None:
            continue
        max_partitions = max(max_partitions, snap.num_partitions)
        parts.append((PayloadsOf(snap.committables), committables))
        for state in snap.in_progress.values():
            in_progress.setdefault(canonical(state), state)
    if holding:
        parts.append((holding, DecodedOnAccess(sink, holding)))
    for state in live_in_progress:
        in_progress.setdefault(canonical(state), state)
    return HeldForCleanup(HeldCommittables(parts, pending, sink.encode), in_progress, max_partitions)
