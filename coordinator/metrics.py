"""What the runtime measures: per checkpoint (``JobRuntime.checkpoint_metrics``) and per sink and
checkpoint (``JobRuntime.sink_metrics``: transactions committed, already committed and aborted,
records, bytes, commit time), so that jobs and tools read them without wrapping connectors."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

from twophase.coordinator.metadata import CheckpointKind
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
        checkpoints: checkpoints whose transactions were committed or found committed (totals).
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


class SinkMetricsRecorder:
    """Collects :class:`SinkCommitMetrics` per (sink, checkpoint); thread-safe (commit lanes run
    concurrently). One per job runtime, shared by every committer it starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, int], SinkCommitMetrics] = {}

    def _update(self, sink: str, checkpoint_id: int, **delta: Any) -> None:
        with self._lock:
            m = self._by_key.get((sink, checkpoint_id)) or SinkCommitMetrics(sink, checkpoint_id)
            changes: dict[str, Any] = {}
            for name, value in delta.items():
                old = getattr(m, name)
                changes[name] = value if old is None else old + value
            self._by_key[(sink, checkpoint_id)] = replace(m, **changes)

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
        """Per sink, everything recorded summed (``checkpoint_id`` ``None``)."""
        out: dict[str, SinkCommitMetrics] = {}
        for m in self.per_checkpoint():
            t = out.get(m.sink) or SinkCommitMetrics(m.sink, None)
            done = m.transactions_committed or m.transactions_already_committed
            out[m.sink] = replace(
                t,
                transactions_committed=t.transactions_committed + m.transactions_committed,
                transactions_already_committed=t.transactions_already_committed
                + m.transactions_already_committed,
                transactions_aborted=t.transactions_aborted + m.transactions_aborted,
                lingering_aborted=t.lingering_aborted + m.lingering_aborted,
                records_committed=t.records_committed + m.records_committed,
                bytes_committed=m.bytes_committed
                if t.bytes_committed is None
                else t.bytes_committed + (m.bytes_committed or 0),
                commit_ms=t.commit_ms + m.commit_ms,
                checkpoints=t.checkpoints + ((m.checkpoint_id or 0,) if done else ()),
            )
        return out
