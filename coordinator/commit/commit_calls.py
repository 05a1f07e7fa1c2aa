"""Commit calls: which pending transactions one commit call covers, and the calls of a batch per sink.

The committer works on :class:`~twophase.coordinator.state.subtask_lifecycle.PendingTransaction` s and
nothing else: a commit call is a sequence of them, every pending transaction of one sink and one
checkpoint (:func:`commit_calls` groups them into :class:`TxnCall` s; a ledger block's rows are
:class:`~twophase.coordinator.state.subtask_lifecycle.BlockRows`), and names its sink and
checkpoint. A per-committable sink commits it with ONE
``commit_batch`` call, which answers per transaction (issue #42 item 3); a
:class:`~twophase.sinks.api.CheckpointCommitSink` (Delta: one table commit per checkpoint,
idempotent through ``txn(appId, version)``) with ONE ``commit_checkpoint`` call, which answers for
all (Flink Sink V2's global committer). A batch is handed to the committer per sink
(:data:`CallsBySink`), as the coordinator's per-sink ledgers hold it: within a batch the sinks
commit concurrently, one lane per sink; a sink's own calls run checkpoint after checkpoint, in
order, and the sink's ``commit_batch`` decides how many of one checkpoint's transactions it
commits at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twophase.coordinator.state.subtask_lifecycle import BlockRows, PendingTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError

AnySink = TwoPhaseCommitSink[Any, Any]
CommitCall = Sequence[PendingTransaction[Any]]
"""The transactions one commit call covers: every one of one sink and one checkpoint, ascending by
partition (a tuple, or a ledger block's rows,
:class:`~twophase.coordinator.state.subtask_lifecycle.BlockRows`, whose transactions are made as the
committer reads them: issue #42)."""


class TxnCall(tuple[PendingTransaction[Any], ...]):
    """A commit call of transactions already made (:func:`commit_calls`; the coordinator's merge of
    a block's rows with a lifecycle's transactions): a tuple of them, ascending by partition, that
    names its sink and checkpoint as plain attributes, its first transaction's, as a ledger
    block's rows do (:class:`~twophase.coordinator.state.subtask_lifecycle.BlockRows`; issue #42).

    Raises:
        ValueError: ``txns`` is empty.
    """

    sink_name: str
    checkpoint_id: int

    def __new__(cls, txns: Iterable[PendingTransaction[Any]]) -> TxnCall:
        self = super().__new__(cls, txns)
        if not self:
            raise ValueError("an empty commit call")
        self.sink_name = self[0].sink_name
        self.checkpoint_id = self[0].checkpoint_id
        return self


NamedCall = BlockRows | TxnCall
"""A commit call that names its sink and checkpoint (``sink_name``, ``checkpoint_id``): what the
committer's submissions and lanes take."""

CallsBySink = Mapping[str, Sequence[NamedCall]]
"""A batch of commit calls per sink: sink name → its calls in commit order (checkpoint after
checkpoint), each call of that sink. What the committer's submissions take: one lane per sink,
as handed (issue #42: the coordinator's ledgers are per sink; nothing regroups the calls)."""


def check_call(sink: AnySink, call: Sequence[PendingTransaction[Any]]) -> None:
    """Check that ``call`` is one commit call of ``sink``.

    Raises:
        ValueError: an empty call, or transactions of another sink or of several checkpoints.
    """
    if not call:
        raise ValueError(f"an empty commit call for sink {sink.name!r}")
    if {t.sink_name for t in call} != {sink.name}:
        raise ValueError(f"commit call for sink {sink.name!r} holds transactions of other sinks")
    if len({t.checkpoint_id for t in call}) != 1:
        raise ValueError(f"commit call for sink {sink.name!r} spans several checkpoints")


def commit_calls(
    sinks: Mapping[str, AnySink], txns: Iterable[PendingTransaction[Any]]
) -> dict[str, list[TxnCall]]:
    """Group pending transactions into commit calls per sink (:data:`CallsBySink`), keeping their
    order.

    The transactions of one (sink, checkpoint) are ONE call, ascending by partition; a sink's calls
    are in the order of their first transactions, and the sinks in the order of theirs: so
    transactions given in checkpoint order yield each sink's calls in checkpoint order.

    Raises:
        KeyError: a transaction of a sink not in ``sinks``.
    """
    out: dict[str, list[list[PendingTransaction[Any]]]] = {}
    groups: dict[tuple[str, int], list[PendingTransaction[Any]]] = {}
    for t in txns:
        if t.sink_name not in sinks:
            raise KeyError(t.sink_name)
        key = (t.sink_name, t.checkpoint_id)
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
            out.setdefault(t.sink_name, []).append(group)
        group.append(t)
    return {
        name: [TxnCall(sorted(g, key=lambda t: (t.partition, t.attempt))) for g in calls]
        for name, calls in out.items()
    }


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
