"""What the runtime measures per checkpoint (exposed on ``JobRuntime.checkpoint_metrics``)."""

from __future__ import annotations

from dataclasses import dataclass

from twophase.coordinator.metadata import CheckpointKind


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
        transactions_committed: transactions committed by its notification.
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
