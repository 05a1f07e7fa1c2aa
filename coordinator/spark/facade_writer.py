"""The Python Data Source facade's stream writer: tasks write, a fresh driver-side worker commits.

See :mod:`twophase.coordinator.spark.datasource` for how Spark runs it and what happens when the
driver dies at each step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from twophase.coordinator.spark.compat import require_data_source_api
from twophase.coordinator.state.acknowledgement import Acknowledgement

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
except ImportError:  # Spark before 4.1: say which Spark is needed, by name
    require_data_source_api()
    raise
from twophase.coordinator.run.epoch import position_covers, run_epoch
from twophase.coordinator.run.fanout import EpochPlan, write_subtasks
from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.facade_options import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    FacadeSettings,
    checkpoint_id_for_batch,
    spark_position,
)
from twophase.coordinator.state.payload import decode_payload
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import JobError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class TwoPhaseCommitMessage(WriterCommitMessage):
    """What one task returns to the commit worker: its acknowledgement of the batch's checkpoint.

    Attributes:
        job_id: the job.
        query_id: Spark's query id (task local property).
        batch_id: Spark's micro-batch id.
        checkpoint_id: the checkpoint the transaction belongs to (``batch_id + 1``).
        ack: the subtask's acknowledgement (sink, partition, attempt, encoded committable, records).
        skipped: the batch was already covered by a checkpoint (a replay): nothing was written.
    """

    job_id: str
    query_id: str
    batch_id: int
    checkpoint_id: int
    ack: Acknowledgement
    skipped: bool = False


class TwoPhaseStreamWriter(DataSourceStreamArrowWriter):
    """The stream writer of :class:`TwoPhaseDataSource`; built by ``streamWriter`` in every process.

    Holds configuration only (the sink, the settings, the runtime config); every piece of
    coordinator state comes from checkpoint storage.

    Args:
        sink: the job's one sink (not an :class:`~twophase.sinks.api.InProgressSink`).
        settings: the facade's options.
        config: runtime settings (synchronous commit).
    """

    def __init__(self, sink: AnySink, settings: FacadeSettings, config: RuntimeConfig) -> None:
        self.sink = sink
        self.settings = settings
        self.config = config

    # -- executor side ----------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """In a task: skip a replayed batch, else begin → write each batch → pre-commit.

        Returns:
            A :class:`TwoPhaseCommitMessage`.

        Raises:
            JobError: not in a streaming write's task (no batch id), or our checkpoint belongs to
                another Spark query (see :func:`~twophase.coordinator.run.epoch.position_covers`).
            Whatever the sink raises, after aborting its open transaction.
        """
        from pyspark import TaskContext  # executor side: the worker has pyspark

        tc = TaskContext.get()
        if tc is None:
            raise JobError("TwoPhaseStreamWriter.write must run inside a Spark task")
        batch_id = _int_property(tc.getLocalProperty(BATCH_ID_PROPERTY), BATCH_ID_PROPERTY)
        query_id = tc.getLocalProperty(QUERY_ID_PROPERTY)
        if not query_id:
            raise JobError(f"the task has no {QUERY_ID_PROPERTY!r} local property: not a streaming write")
        partition, attempt = tc.partitionId(), tc.attemptNumber()
        checkpoint_id = checkpoint_id_for_batch(batch_id)
        message = TwoPhaseCommitMessage(
            job_id=self.settings.job_id,
            query_id=query_id,
            batch_id=batch_id,
            checkpoint_id=checkpoint_id,
            ack=Acknowledgement(self.sink.name, partition, attempt),
        )
        latest = self.settings.open_storage().latest()
        if latest is not None and position_covers(latest.source_position, spark_position(query_id, batch_id)):
            # a replay of a batch whose checkpoint is durable: its commits are the commit worker's job
            log_event(
                log,
                logging.INFO,
                "replayed batch: nothing written",
                job=self.settings.job_id,
                batch=batch_id,
                checkpoint=latest.checkpoint_id,
                partition=partition,
            )
            return replace(message, skipped=True)
        plan = EpochPlan(
            job_id=self.settings.job_id,
            checkpoint_id=checkpoint_id,
            num_partitions=partition + 1,  # a lower bound: tasks are not told the write's parallelism
            sinks=(self.sink,),
            restored={},
        )
        [ack] = write_subtasks(plan, partition, attempt, iterator)
        return replace(message, ack=ack)

    # -- driver side (a fresh commit worker) -------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Complete batch ``batchId``'s checkpoint from storage and the tasks' messages.

        Restore (re-commit the latest checkpoint, abort lingering), replay check, trigger
        checkpoint ``batchId + 1``, acknowledge every message, persist atomically, commit, abort
        lingering. Returns only when everything is committed; then Spark writes its commit log.

        Raises:
            JobError: a message is missing or of another job/sink/batch, the checkpoint ids of the
                job's storage do not follow the batch ids, or the batch was skipped by tasks but is
                not covered by a checkpoint.
            plus the errors of restoring and completing (``CorruptCheckpointError``,
            ``CheckpointStorageError``, ``TransactionLostError``, ``CommitFailedError``).
        """
        started = time.perf_counter()
        msgs = self._check_messages(messages, batchId, allow_missing=False)
        job_id = self.settings.job_id
        if not msgs:  # a batch without partitions wrote nothing: no checkpoint needed
            log_event(log, logging.INFO, "empty batch: nothing to commit", job=job_id, batch=batchId)
            return
        query_ids = {m.query_id for m in msgs}
        if len(query_ids) != 1:
            raise JobError(f"batch {batchId}: tasks report several query ids {sorted(query_ids)}")
        position = spark_position(query_ids.pop(), batchId)
        written = [m for m in msgs if not m.skipped]
        fresh = [m.ack.committable for m in written if m.ack.committable is not None]
        # one runtime per micro-batch's commit: it fences no driver (JobRuntime's fence_drivers)
        runtime = JobRuntime(
            job_id, [self.sink], self.settings.open_storage(), self.config, fence_drivers=False
        )
        try:
            restored = runtime.restore(held={self.sink.name: fresh})
            if runtime.replay_check(position):
                aborted = self._abort_unheld(runtime.storage, fresh)
                log_event(
                    log,
                    logging.INFO,
                    "replayed batch committed from checkpoint",
                    job=job_id,
                    batch=batchId,
                    checkpoint=restored.checkpoint_id,
                    aborted=aborted,
                )
                return
            if len(written) != len(msgs):
                raise JobError(
                    f"batch {batchId}: tasks skipped it as already checkpointed, but the latest checkpoint "
                    f"({restored.checkpoint_id}) does not cover it; checkpoint storage changed meanwhile"
                )
            # ids follow batch ids (the gaps are empty batches); a lower next id means another
            # writer used this checkpoint directory
            result = run_epoch(
                runtime,
                len(msgs),
                lambda plan: [m.ack for m in msgs],
                position,
                checkpoint_id=checkpoint_id_for_batch(batchId),
            )
        finally:
            runtime.close()
        metrics = result.checkpoint
        log_event(
            log,
            logging.INFO,
            "batch committed",
            job=job_id,
            batch=batchId,
            checkpoint=metrics.checkpoint_id,
            partitions=len(msgs),
            records=metrics.records,
            committed=metrics.transactions_committed,
            aborted=metrics.transactions_aborted,
            persist_ms=metrics.persist_ms,
            commit_ms=metrics.commit_ms,
            total_ms=(time.perf_counter() - started) * 1000.0,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort the batch's pre-committed transactions that no checkpoint holds.

        Spark calls this after a failed task *or a failed commit*: a commit that persisted the
        checkpoint and then crashed promised those transactions, so the ones a retained checkpoint
        holds are left for the next restore to commit. Failed tasks' leftovers (``None`` messages)
        are lingering and cleaned by the next restore.

        Raises:
            JobError: a message of another job, sink or batch.
            CorruptCheckpointError, CheckpointStorageError: storage cannot be read (nothing aborted).
        """
        msgs = self._check_messages(messages, batchId, allow_missing=True)
        payloads = [p for m in msgs if not m.skipped and (p := m.ack.committable) is not None]
        aborted = self._abort_unheld(self.settings.open_storage(), payloads) if payloads else 0
        log_event(
            log,
            logging.WARNING,
            "batch aborted",
            job=self.settings.job_id,
            batch=batchId,
            tasks=len(msgs),
            failed_tasks=sum(m is None for m in messages),
            aborted=aborted,
        )

    # -- helpers ------------------------------------------------------------------------------------

    def _check_messages(
        self, messages: Sequence[WriterCommitMessage | None], batch_id: int, *, allow_missing: bool
    ) -> list[TwoPhaseCommitMessage]:
        out: list[TwoPhaseCommitMessage] = []
        for i, m in enumerate(messages):
            if m is None:
                if allow_missing:
                    continue
                raise JobError(f"batch {batch_id}: task {i} returned no commit message")
            if not isinstance(m, TwoPhaseCommitMessage):
                raise JobError(f"batch {batch_id}: unexpected commit message {type(m).__name__}")
            if (m.job_id, m.ack.sink, m.batch_id) != (self.settings.job_id, self.sink.name, batch_id):
                raise JobError(
                    f"batch {batch_id}: message of job {m.job_id!r} sink {m.ack.sink!r} batch {m.batch_id} "
                    f"given to job {self.settings.job_id!r} sink {self.sink.name!r}"
                )
            out.append(m)
        partitions = sorted(m.ack.partition for m in out)
        if not allow_missing and partitions != list(range(len(out))):
            raise JobError(f"batch {batch_id}: partitions {partitions} are not 0..n-1")
        return out

    def _abort_unheld(self, storage: CheckpointStorage, payloads: Sequence[bytes]) -> int:
        """Abort the transactions of ``payloads`` unless a retained checkpoint holds them."""
        if not payloads:
            return 0
        held: set[bytes] = set()
        for ref in storage.list_checkpoints():
            snap = storage.load(ref).sinks.get(self.sink.name)
            if snap is not None:
                held.update(rec.payload for rec in snap.committables)
        aborted = 0
        for payload in payloads:
            if payload in held:
                continue
            try:
                self.sink.abort(decode_payload(self.sink, payload))
                aborted += 1
            except Exception:  # best effort: what is left is lingering, aborted by the next restore
                log_event(
                    log,
                    logging.ERROR,
                    "abort failed",
                    exc_info=True,
                    job=self.settings.job_id,
                    sink=self.sink.name,
                )
        return aborted


def _int_property(value: str | None, name: str) -> int:
    if value is None or not value.strip().lstrip("-").isdigit():
        raise JobError(f"the task's {name!r} local property is {value!r}: not a streaming micro-batch write")
    return int(value)
