"""What a job on Spark reports: per epoch, and once it has finished."""

from __future__ import annotations

from dataclasses import dataclass

from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metrics import CheckpointMetrics


@dataclass(frozen=True)
class EpochMetrics:
    """What one epoch (micro-batch or batch write) cost.

    Attributes:
        checkpoint_id: the epoch's checkpoint.
        batch_id: Spark's batch id (streaming), or ``None`` for a batch write.
        partitions: the epoch's parallelism.
        records: records written (each sink receives all of them).
        epoch_ms: wall time of the whole epoch on the driver, ms.
        write_ms: wall time of the Spark job that wrote and pre-committed, ms.
        persist_ms: time to publish the checkpoint, ms.
        commit_ms: time to commit (submission time with async commit), ms.
        transactions_committed: transactions committed by this checkpoint's notification.
        transactions_aborted: transactions aborted (including lingering ones).
    """

    checkpoint_id: int
    batch_id: int | None
    partitions: int
    records: int
    epoch_ms: float
    write_ms: float
    persist_ms: float
    commit_ms: float
    transactions_committed: int
    transactions_aborted: int

    @property
    def coordinator_share(self) -> float:
        """(persist + commit) / epoch time: the coordinator's overhead as a share of the batch."""
        return (self.persist_ms + self.commit_ms) / self.epoch_ms if self.epoch_ms > 0 else 0.0


@dataclass(frozen=True)
class EpochTotals:
    """Every epoch a job handle ran, counted (its ``metrics`` keep the newest only).

    Attributes:
        epochs: epochs run by this handle (replayed ones skipped).
        records: records they wrote (each sink received all of them).
    """

    epochs: int = 0
    records: int = 0

    def add(self, epoch: EpochMetrics) -> EpochTotals:
        """These totals with ``epoch`` counted."""
        return EpochTotals(self.epochs + 1, self.records + epoch.records)


@dataclass(frozen=True)
class JobResult:
    """The outcome of a finished job.

    Attributes:
        job_id: the job.
        state: the final job state (FINISHED after a batch write or bounded stream).
        epochs: metrics of the epochs this process ran, the newest ``RuntimeConfig.metrics_history``
            of them (replayed epochs are skipped).
        final: the final checkpoint's metrics, or ``None`` if nothing was left to finish.
    """

    job_id: str
    state: JobState
    epochs: tuple[EpochMetrics, ...]
    final: CheckpointMetrics | None
