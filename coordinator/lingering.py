"""What lingering cleanup may abort (DESIGN.md §5, §6), as pure functions.

``abort_lingering`` may touch a transaction of this job and sink only if nothing can still need
it: no retained checkpoint or savepoint references it (as a committable or as in-progress state),
the running job does not hold it in memory (pending commit, or in progress in a live subtask), and
no acknowledgement about to be recorded carries it. Aborting anything else would lose data a
checkpoint promised. :func:`held_by` computes what is held; :func:`lingering_scope` hands it to the
sink.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twophase.coordinator.metadata import CheckpointMetadata
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, LingeringScope

AnySink = TwoPhaseCommitSink[Any, Any]
ALL_CHECKPOINTS = 2**62
"""``LingeringScope.up_to_checkpoint`` meaning "every checkpoint"."""


def canonical(obj: JsonObject) -> str:
    """A JSON object as canonical text (sorted keys, no spaces): equal objects, equal text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Held:
    """What ``abort_lingering`` must never touch for one sink (see :func:`held_by`).

    Attributes:
        committables: canonical JSON → encoded committable.
        in_progress: canonical JSON → in-progress state.
        max_partitions: the largest parallelism the sink ran with in any of them.
    """

    committables: Mapping[str, JsonObject]
    in_progress: Mapping[str, JsonObject]
    max_partitions: int


def held_by(
    sink_name: str,
    checkpoints: Iterable[CheckpointMetadata],
    *,
    pending: Iterable[JsonObject] = (),
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
    committables: dict[str, JsonObject] = {}
    in_progress: dict[str, JsonObject] = {}
    max_partitions = live_parallelism
    for meta in checkpoints:
        snap = meta.sinks.get(sink_name)
        if snap is None:
            continue
        max_partitions = max(max_partitions, snap.num_partitions)
        for rec in snap.committables:
            committables.setdefault(canonical(rec.payload), rec.payload)
        for state in snap.in_progress.values():
            in_progress.setdefault(canonical(state), state)
    for payload in pending:
        committables.setdefault(canonical(payload), payload)
    for state in live_in_progress:
        in_progress.setdefault(canonical(state), state)
    return Held(committables, in_progress, max_partitions)


def lingering_scope(job_id: str, sink: AnySink, held: Held, up_to_checkpoint: int) -> LingeringScope[Any]:
    """The :class:`~twophase.sinks.context.LingeringScope` handed to ``sink.abort_lingering``.

    Raises:
        CommittableDecodeError: a held payload does not decode with the sink's codec.
    """
    return LingeringScope(
        job_id=job_id,
        sink_name=sink.name,
        held=tuple(sink.decode(p) for p in held.committables.values()),
        held_in_progress=tuple(held.in_progress.values()),
        up_to_checkpoint=up_to_checkpoint,
        max_partitions=held.max_partitions,
    )


def encoded(sink: AnySink, txns: Sequence[PendingTransaction[Any]]) -> list[JsonObject]:
    """The payloads of ``txns`` (as received, or encoded where a test built them by hand)."""
    return [t.payload if t.payload is not None else sink.encode(t.committable) for t in txns]
