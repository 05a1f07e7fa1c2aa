"""Commit requests: what one commit call covers, and how a batch of them splits into lanes.

A per-committable sink's transaction is a request of its own. A
:class:`~twophase.sinks.api.CheckpointCommitSink` (Delta: one table commit per checkpoint,
idempotent through ``txn(appId, version)``) commits every pending transaction of one checkpoint
with ONE ``commit_checkpoint`` call (Flink Sink V2's global committer): :func:`commit_requests`
groups them. Within a batch the sinks commit concurrently, one lane per sink
(:func:`commit_lanes`); a sink's own requests stay in order unless it declares
``commit_concurrency`` > 1, and a checkpoint-commit sink always commits checkpoint after checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twophase.coordinator.lanes import Lane, group_lanes
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import CheckpointCommitSink, TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True, init=False)
class CommitRequest:
    """One commit call: one transaction of a per-committable sink, or every pending transaction of
    one checkpoint of a :class:`~twophase.sinks.api.CheckpointCommitSink` (committed together with one
    ``commit_checkpoint`` call).

    Args:
        sink: the sink that commits it.
        txns: the pending transaction, or a sequence of them (non-empty; exactly one for a
            per-committable sink; for a checkpoint-commit sink all of that sink and of one
            checkpoint, ascending by partition).
        recovery: True when recovering after a restore (``recover_and_commit[_checkpoint]``).

    Raises:
        ValueError: an empty request, several transactions for a per-committable sink, or
            transactions of another sink or of several checkpoints.
    """

    sink: AnySink
    txns: tuple[PendingTransaction[Any], ...]
    recovery: bool

    def __init__(
        self,
        sink: AnySink,
        txns: PendingTransaction[Any] | Sequence[PendingTransaction[Any]],
        recovery: bool = False,
    ) -> None:
        group = (txns,) if isinstance(txns, PendingTransaction) else tuple(txns)
        if not group:
            raise ValueError(f"an empty commit request for sink {sink.name!r}")
        if len(group) > 1 and not isinstance(sink, CheckpointCommitSink):
            raise ValueError(f"sink {sink.name!r} commits one transaction per request, got {len(group)}")
        if {t.sink_name for t in group} != {sink.name}:
            raise ValueError(f"commit request for sink {sink.name!r} holds transactions of other sinks")
        if len({t.checkpoint_id for t in group}) != 1:
            raise ValueError(f"commit request for sink {sink.name!r} spans several checkpoints")
        object.__setattr__(self, "sink", sink)
        object.__setattr__(self, "txns", group)
        object.__setattr__(self, "recovery", recovery)

    @property
    def txn(self) -> PendingTransaction[Any]:
        """The first transaction (the only one for a per-committable sink)."""
        return self.txns[0]

    @property
    def checkpoint_id(self) -> int:
        """The checkpoint every transaction of the request was pre-committed for."""
        return self.txns[0].checkpoint_id

    @property
    def per_checkpoint(self) -> bool:
        """True when committed with ``commit_checkpoint`` (the sink is a CheckpointCommitSink)."""
        return isinstance(self.sink, CheckpointCommitSink)


def commit_requests(
    sinks: Mapping[str, AnySink], txns: Iterable[PendingTransaction[Any]], *, recovery: bool = False
) -> list[CommitRequest]:
    """Turn pending transactions into commit requests, keeping their order.

    A per-committable sink's transaction becomes a request of its own. The transactions of one
    (sink, checkpoint) of a :class:`~twophase.sinks.api.CheckpointCommitSink` become ONE request, placed
    where its first transaction was, holding them ascending by partition; so transactions given
    in checkpoint order yield requests in checkpoint order.

    Raises:
        KeyError: a transaction of a sink not in ``sinks``.
    """
    out: list[CommitRequest | list[PendingTransaction[Any]]] = []
    groups: dict[tuple[str, int], list[PendingTransaction[Any]]] = {}
    for t in txns:
        sink = sinks[t.sink_name]
        if not isinstance(sink, CheckpointCommitSink):
            out.append(CommitRequest(sink, t, recovery))
            continue
        key = (t.sink_name, t.checkpoint_id)
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
            out.append(group)
        group.append(t)
    return [
        r
        if isinstance(r, CommitRequest)
        else CommitRequest(sinks[r[0].sink_name], sorted(r, key=lambda t: (t.partition, t.attempt)), recovery)
        for r in out
    ]


def commit_lanes(requests: Sequence[CommitRequest]) -> list[Lane[CommitRequest]]:
    """Split ``requests`` into one lane per sink (named after it), in order of first appearance,
    keeping each sink's requests in their given order.

    A :class:`~twophase.sinks.api.CheckpointCommitSink`'s lane always has parallelism 1: its checkpoints
    commit one after another, in order. Another sink's lane has its ``commit_concurrency``, capped
    at the number of its requests.

    Raises:
        ConfigError: a sink declares ``commit_concurrency`` < 1.
    """
    sinks = {r.sink.name: r.sink for r in requests}

    def parallelism(name: str) -> int:
        sink = sinks[name]
        return 1 if isinstance(sink, CheckpointCommitSink) else sink_concurrency(sink)

    return group_lanes(requests, lambda r: r.sink.name, parallelism)


def sink_concurrency(sink: AnySink) -> int:
    """The sink's ``commit_concurrency``, checked.

    Raises:
        ConfigError: it is not an int ≥ 1.
    """
    declared = getattr(sink, "commit_concurrency", 1)
    if not isinstance(declared, int) or declared < 1:
        raise ConfigError(
            f"sink {sink.name!r} declares commit_concurrency={declared!r}; it must be an int >= 1"
        )
    return declared
