"""One pass over a partition's data, writing every sink: the executor side of an epoch.

For one subtask set (all sinks of one partition in one epoch) it runs, per sink,
``begin_transaction`` → ``write`` for every Arrow batch → ``pre_commit`` (and, for
:class:`~twophase.sinks.api.InProgressSink`, ``snapshot_in_progress`` — or ``finish`` at end of input), and
returns one :class:`Acknowledgement` per sink. Engine-agnostic: Spark's ``mapInArrow`` calls it
with the task's partition id and attempt number, and the test harness calls it directly.

On any failure every transaction still open is aborted (best effort) before the error propagates;
whatever is left is lingering and cleaned by ``abort_lingering`` after the next checkpoint.

Spark's tasks pre-commit their sinks at once, one thread each: every pre-commit mostly waits on
its own service (Kafka's flush and statistics, the last parts' uploads, a file written), and a
task waited for them one after another. The sinks are independent (the driver commits each on its
own), so which of them had pre-committed when a task fails does not matter: any that had are
aborted or left lingering as before. The test harness keeps them in order, so that a model's
histories replay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.faults import fault_point
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, WriterContext
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


@dataclass(frozen=True)
class EpochPlan:
    """What every task of one epoch needs to know; shipped to executors (picklable, no secrets in logs).

    Attributes:
        job_id: the job's stable id.
        checkpoint_id: the checkpoint this epoch's transactions belong to.
        num_partitions: the epoch's parallelism.
        sinks: the sinks to write, in order; names are unique.
        restored: sink name → partition → in-progress state restored from the latest checkpoint.
        end_of_input: the epoch is the last one; spanning sinks ``finish`` instead of snapshotting.
    """

    job_id: str
    checkpoint_id: int
    num_partitions: int
    sinks: tuple[AnySink, ...]
    restored: Mapping[str, Mapping[int, JsonObject]]
    end_of_input: bool = False


def write_subtasks(
    plan: EpochPlan,
    partition: int,
    attempt: int,
    batches: Iterable[pa.RecordBatch],
    *,
    fault: Callable[[str], None] = fault_point,
    pre_commit_at_once: bool = False,
) -> list[Acknowledgement]:
    """Write one partition's batches to every sink of ``plan`` and pre-commit them.

    Args:
        plan: the epoch's plan.
        partition: this task's partition index, ``0 <= partition < plan.num_partitions``.
        attempt: this task's attempt number.
        batches: the partition's data, consumed once.
        fault: fault-point hook (``before_write``, ``mid_write``, ``after_pre_commit``); the
            default follows ``TWOPHASE_FAULT``, the harness injects its own.
        pre_commit_at_once: pre-commit the sinks at once, one thread each (Spark's tasks);
            every pre-commit has ended before this returns or raises.

    Returns:
        One acknowledgement per sink, in ``plan.sinks`` order.

    Raises:
        Whatever a sink raises (``RecordError``, ``ServiceUnavailableError``, ...), after aborting
        every transaction still open.
    """
    started = time.perf_counter()
    open_txns: list[tuple[AnySink, Any]] = []
    try:
        for sink in plan.sinks:
            ctx = WriterContext(
                job_id=plan.job_id,
                sink_name=sink.name,
                checkpoint_id=plan.checkpoint_id,
                partition=partition,
                attempt=attempt,
                num_partitions=plan.num_partitions,
                restored_state=plan.restored.get(sink.name, {}).get(partition),
            )
            open_txns.append((sink, sink.begin_transaction(ctx)))
        fault("before_write")
        records = 0
        for i, batch in enumerate(batches):
            for sink, txn in open_txns:
                sink.write(txn, batch)
            records += batch.num_rows
            if i == 0:
                fault("mid_write")
        acks = _close_subtasks(plan, open_txns, partition, attempt, records, started, pre_commit_at_once)
        open_txns.clear()
        fault("after_pre_commit")
        return acks
    except BaseException:
        for sink, txn in open_txns:
            try:
                sink.abort_open(txn)
            except Exception:  # the original error matters more; leftovers are lingering
                log_event(
                    log,
                    logging.ERROR,
                    "abort_open failed",
                    exc_info=True,
                    job=plan.job_id,
                    sink=sink.name,
                    partition=partition,
                )
        raise


def _close_subtasks(
    plan: EpochPlan,
    open_txns: Sequence[tuple[AnySink, Any]],
    partition: int,
    attempt: int,
    records: int,
    started: float,
    at_once: bool,
) -> list[Acknowledgement]:
    """Every sink's acknowledgement, in ``open_txns``' order; at once, the first failure in that
    order is raised once every pre-commit has ended (none is left running under an abort)."""
    if not at_once or len(open_txns) < 2:
        return [
            _close_subtask(plan, sink, txn, partition, attempt, records, started) for sink, txn in open_txns
        ]
    with ThreadPoolExecutor(len(open_txns), thread_name_prefix=f"pre-commit-{partition}") as pool:
        closing = [
            pool.submit(_close_subtask, plan, sink, txn, partition, attempt, records, started)
            for sink, txn in open_txns
        ]
    return [c.result() for c in closing]


def _close_subtask(
    plan: EpochPlan, sink: AnySink, txn: Any, partition: int, attempt: int, records: int, started: float
) -> Acknowledgement:
    in_progress: JsonObject | None = None
    if isinstance(sink, InProgressSink):
        if plan.end_of_input:
            committable = sink.finish(txn)
        else:
            committable = sink.pre_commit(txn)
            in_progress = sink.snapshot_in_progress(txn)
    else:
        committable = sink.pre_commit(txn)
    write_ms = (time.perf_counter() - started) * 1000.0
    return Acknowledgement.of(sink, partition, attempt, committable, in_progress, records, write_ms)


def sink_names_unique(sinks: Sequence[AnySink]) -> None:
    """Check that sink names are unique within a job.

    Raises:
        ConfigError: a name is used twice.
    """
    seen: set[str] = set()
    for s in sinks:
        if s.name in seen:
            raise ConfigError(f"sink name {s.name!r} is used twice in one job; names must be unique")
        seen.add(s.name)
