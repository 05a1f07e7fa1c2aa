"""What a sink is told about where it runs (executor side) and what it may clean up (driver side)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

COMM = TypeVar("COMM")

JsonObject = Mapping[str, Any]
"""A JSON object: what in-progress state and encoded committables look like in checkpoint metadata."""


@dataclass(frozen=True)
class WriterContext:
    """Where one subtask runs: one sink writing one Spark partition in one epoch.

    Attributes:
        job_id: the job's stable id (survives restarts); part of every transaction name.
        sink_name: the sink's name, unique within the job.
        checkpoint_id: the checkpoint this epoch's transactions belong to (monotonic, ≥ 1).
        partition: the subtask index, ``0 <= partition < num_partitions``.
        attempt: Spark's task attempt number for this partition (0 for the first attempt;
            ``TaskContext.attemptNumber()``). Not unique: it starts at 0 again in a retried stage
            (SPARK-24552), so an attempt of an earlier stage attempt may run beside a later one
            with the same number; a sink's transaction names need a random token as well.
        num_partitions: the epoch's parallelism.
        restored_state: the in-progress state snapshotted for this partition by the latest
            checkpoint (``snapshot_in_progress``), or ``None``. Only sinks whose transactions span
            epochs use it.
    """

    job_id: str
    sink_name: str
    checkpoint_id: int
    partition: int
    attempt: int
    num_partitions: int
    restored_state: JsonObject | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_id < 0:
            raise ValueError(f"checkpoint_id must be >= 0, got {self.checkpoint_id}")
        if not 0 <= self.partition < max(self.num_partitions, 1):
            raise ValueError(f"partition {self.partition} outside 0..{self.num_partitions - 1}")
        if self.attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {self.attempt}")

    def log_fields(self) -> dict[str, object]:
        """Structured logging fields (job, sink, checkpoint, partition, attempt)."""
        return {
            "job": self.job_id,
            "sink": self.sink_name,
            "checkpoint": self.checkpoint_id,
            "partition": self.partition,
            "attempt": self.attempt,
        }


@dataclass(frozen=True)
class LingeringScope(Generic[COMM]):
    """What ``abort_lingering`` may touch: this job's and sink's transactions that no checkpoint holds.

    Attributes:
        job_id: the job whose transactions are considered; never touch another job's.
        sink_name: the sink whose transactions are considered.
        held: committables referenced by retained checkpoints and savepoints (and those the running
            job holds), each once. These must never be aborted: they are committed (or re-committed
            on recovery) by the runtime. A sequence whose items are decoded as they are read
            (issue #42): a cleanup that needs none (one it puts off) should not read it, and
            one that lists the service should read it only when the listing found something of
            the scope's (the runtime lets a committed checkpoint's decoded committables go, so a
            read decodes them again: ~1.5 s at 10⁵ subtasks). ``len(held)`` decodes nothing.
        held_in_progress: in-progress states referenced by retained checkpoints and savepoints
            (e.g. open multipart uploads of files that span checkpoints). Never aborted either.
        up_to_checkpoint: only transactions opened for checkpoints ``<= up_to_checkpoint`` are
            in scope; newer ones may belong to work still running. Sinks whose transaction names
            carry no checkpoint id (Kafka's pooled transactional ids) consider all of theirs.
        max_partitions: the largest parallelism this sink has run with, for sinks that probe a
            bounded pool of names (the fallback of Kafka's lingering abort).
        routine: the cleanup after an epoch of a running job
            (``RuntimeConfig.abort_lingering_each_epoch``). A sink whose cleanup costs in proportion
            to its output (the Delta and Iceberg sinks list the table's files) may put it off to a
            later routine call, but only for what no reader can see (data files no commit
            references): the runtime makes a call that is not routine at every end of a run (the
            final checkpoint, a savepoint or stop, a restore), and that call does all of it. An
            open Kafka transaction holds back every ``read_committed`` consumer, so Kafka never
            puts one off.
    """

    job_id: str
    sink_name: str
    held: Sequence[COMM] = ()
    held_in_progress: tuple[JsonObject, ...] = ()
    up_to_checkpoint: int = 2**62
    max_partitions: int = 0
    routine: bool = False
