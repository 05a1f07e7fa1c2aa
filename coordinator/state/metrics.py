"""What the runtime measures: per checkpoint (``JobRuntime.checkpoint_metrics``) and per sink and
checkpoint (``JobRuntime.sink_metrics``: transactions committed, already committed and aborted,
records, bytes, commit time), so that jobs and tools read them without wrapping connectors.

A streaming job runs for months, so per-checkpoint figures are kept for the newest
``metrics_history`` checkpoints only (as Flink's ``web.checkpoints.history``); totals count every
checkpoint (the soak, issue #29 item 5, looks for anything that grows with time)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

from twophase.coordinator.state.metadata import CheckpointKind
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome, CommittableSize


@dataclass(frozen=True)
class CheckpointMetrics:
    """Metrics of one completed checkpoint.

    Attributes:
        job_id: the job.
        checkpoint_id: the checkpoint.
        kind: checkpoint, savepoint or final.
        location: where it was published.
        records: records written in its epoch, if every subtask said.
        acknowledgements: acknowledgements received.
        committables: committables in its metadata (its own and older ones still pending).
        persist_ms: time to build and publish the metadata, ms.
        commit_ms: time to commit (submission time only with async commit), ms.
        transactions_committed: transactions committed by its notification (handed to the
            committer thread, with asynchronous commit).
        transactions_already_committed: transactions its notification found committed earlier.
        transactions_aborted: transactions aborted by its notification and lingering cleanup.
        lingering_aborted: of those, aborted by ``abort_lingering``.
    """

    job_id: str
    checkpoint_id: int
    kind: CheckpointKind
    location: str
    records: int | None
    acknowledgements: int
    committables: int
    persist_ms: float
    commit_ms: float
    transactions_committed: int
    transactions_aborted: int
    lingering_aborted: int
    transactions_already_committed: int = 0


@dataclass(frozen=True)
class SinkCommitMetrics:
    """What the driver did for one sink's transactions: per checkpoint, or in total.

    Attributes:
        sink: the sink.
        checkpoint_id: the checkpoint the transactions were pre-committed for (lingering aborts:
            the checkpoint whose cleanup found them; 0 before the first), or ``None`` for totals.
        transactions_committed: transactions committed now (``COMMITTED``).
        transactions_already_committed: transactions found committed earlier (``ALREADY_COMMITTED``).
        transactions_aborted: pre-committed transactions aborted.
        lingering_aborted: transactions ``abort_lingering`` aborted.
        records_committed: records in the transactions committed now (as far as the sink knows).
        bytes_committed: bytes in them, or ``None`` when the sink reports no byte counts.
        commit_ms: time spent in commit calls, ms (summed over concurrent lanes).
        checkpoints: checkpoints whose transactions were committed or found committed (totals:
            those among the newest ``metrics_history`` checkpoints).
        checkpoint_count: how many checkpoints had transactions committed or found committed
            (totals: every one; 0 per checkpoint).
    """

    sink: str
    checkpoint_id: int | None
    transactions_committed: int = 0
    transactions_already_committed: int = 0
    transactions_aborted: int = 0
    lingering_aborted: int = 0
    records_committed: int = 0
    bytes_committed: int | None = None
    commit_ms: float = 0.0
    checkpoints: tuple[int, ...] = ()
    checkpoint_count: int = 0


DEFAULT_METRICS_HISTORY = 1000
"""Checkpoints whose per-checkpoint metrics are kept by default (``RuntimeConfig.metrics_history``)."""


class SinkMetricsRecorder:
    """Collects :class:`SinkCommitMetrics` per (sink, checkpoint) for the newest ``history``
    checkpoints, and per sink in total; thread-safe (commit lanes run concurrently). One per job
    runtime, shared by every committer it starts.

    Raises:
        ConfigError: ``history`` < 1.
    """

    def __init__(self, history: int = DEFAULT_METRICS_HISTORY) -> None:
        if history < 1:
            raise ConfigError(f"metrics_history must be >= 1, got {history}")
        self._history = history
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, int], SinkCommitMetrics] = {}
        self._checkpoints: dict[int, None] = {}  # the kept checkpoint ids, oldest first
        self._totals: dict[str, SinkCommitMetrics] = {}

    def _update(self, sink: str, checkpoint_id: int, **delta: Any) -> None:
        with self._lock:
            m = self._by_key.get((sink, checkpoint_id)) or SinkCommitMetrics(sink, checkpoint_id)
            updated = _added(m, delta)
            self._by_key[(sink, checkpoint_id)] = updated
            total = _added(self._totals.get(sink) or SinkCommitMetrics(sink, None), delta)
            if _done(updated) and not _done(m):
                total = replace(total, checkpoint_count=total.checkpoint_count + 1)
            self._totals[sink] = total
            self._checkpoints[checkpoint_id] = None
            while len(self._checkpoints) > self._history:
                oldest = next(iter(self._checkpoints))
                del self._checkpoints[oldest]
                for key in [k for k in self._by_key if k[1] == oldest]:
                    del self._by_key[key]

    def committed(
        self, sink: str, checkpoint_id: int, outcome: CommitOutcome, sizes: list[CommittableSize], ms: float
    ) -> None:
        """One commit call's outcome for ``len(sizes)`` transactions of ``checkpoint_id``."""
        if outcome is CommitOutcome.COMMITTED:
            known = [s.bytes for s in sizes if s.bytes is not None]
            self._update(
                sink,
                checkpoint_id,
                transactions_committed=len(sizes),
                records_committed=sum(s.records or 0 for s in sizes),
                bytes_committed=sum(known) if known else None,
                commit_ms=ms,
            )
        elif outcome is CommitOutcome.ALREADY_COMMITTED:
            self._update(sink, checkpoint_id, transactions_already_committed=len(sizes), commit_ms=ms)
        else:
            self._update(sink, checkpoint_id, commit_ms=ms)

    def aborted(self, sink: str, checkpoint_id: int) -> None:
        """One pre-committed transaction aborted."""
        self._update(sink, checkpoint_id, transactions_aborted=1)

    def lingering(self, sink: str, checkpoint_id: int, count: int) -> None:
        """``count`` lingering transactions aborted by the cleanup after ``checkpoint_id``."""
        if count:
            self._update(sink, checkpoint_id, lingering_aborted=count)

    def per_checkpoint(self) -> list[SinkCommitMetrics]:
        """Every (sink, checkpoint) recorded, ordered by checkpoint then sink."""
        with self._lock:
            return sorted(self._by_key.values(), key=lambda m: (m.checkpoint_id or 0, m.sink))

    def totals(self) -> dict[str, SinkCommitMetrics]:
        """Per sink, everything recorded summed (``checkpoint_id`` ``None``): every checkpoint
        counted, ``checkpoints`` naming those kept."""
        with self._lock:
            kept = sorted(self._by_key.values(), key=lambda m: (m.checkpoint_id or 0, m.sink))
            return {
                sink: replace(
                    t, checkpoints=tuple(m.checkpoint_id or 0 for m in kept if m.sink == sink and _done(m))
                )
                for sink, t in self._totals.items()
            }


def _done(m: SinkCommitMetrics) -> bool:
    return bool(m.transactions_committed or m.transactions_already_committed)


def _added(m: SinkCommitMetrics, delta: dict[str, Any]) -> SinkCommitMetrics:
    """``m`` with ``delta`` added field by field (a ``None`` byte count takes the new value)."""
    changes: dict[str, Any] = {}
    for name, value in delta.items():
        old = getattr(m, name)
        changes[name] = value if old is None else (old if value is None else old + value)
    return replace(m, **changes)
