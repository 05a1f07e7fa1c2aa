"""Spark epochs: the function ``mapInArrow`` runs in every task, and the driver's run of one epoch.

Each task writes its partition to every sink in one pass
(:func:`~twophase.coordinator.run.fanout.write_subtasks`) and yields its acknowledgements as one Arrow
batch of :data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA`. Collecting those rows on the
driver, as one Arrow table (:func:`~twophase.coordinator.spark.compat.collect_arrow`: no ``Row``
per acknowledgement), is the checkpoint's acknowledgement: Spark returns exactly one successful
attempt per partition. Above ``RuntimeConfig.gather_acknowledgements_above`` partitions the rows are
first gathered into one partition by a shuffle (:func:`acknowledgements_of`), so that the driver
receives a few large batches rather than one per task (DESIGN.md §6, "The gather").
:func:`run_spark_epoch` is the engine's write step around the one epoch loop
(:func:`~twophase.coordinator.run.epoch.run_epoch`). Before ``mapInArrow`` the DataFrame is projected,
in the JVM, to the columns the sinks read (:func:`sink_input`): Python receives nothing no sink
reads. In a batch write Catalyst's column pruning also drops whatever computes only the other
columns; a streaming micro-batch reaches ``foreachBatch`` already computed whole (Spark hands it
over as an RDD of the query's output), so there only the hand-off is projected. The stream itself
is not projected before ``writeStream``: pruning would reach into stateful operators and tie the
state's schema in Spark's checkpoint to the sinks' configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from twophase.coordinator.run.epoch import run_epoch
from twophase.coordinator.run.fanout import EpochPlan, write_subtasks
from twophase.coordinator.spark.compat import collect_arrow
from twophase.coordinator.spark.results import EpochMetrics
from twophase.coordinator.state.acknowledgement import ACK_SCHEMA, Acknowledgement
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.spark_staging import SparkStagedSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from twophase.coordinator.run.runtime import JobRuntime

log = logging.getLogger(__name__)


def ack_struct_type() -> StructType:
    """Spark's type of :data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA`
    (``mapInArrow``'s result)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(ACK_SCHEMA)


def read_columns(names: Iterable[str], sinks: Iterable[TwoPhaseCommitSink[Any, Any]]) -> list[str] | None:
    """The union of ``sinks``' read columns (:meth:`~twophase.sinks.api.TwoPhaseCommitSink.read_columns`),
    in the order of ``names`` (the data's columns); ``None`` when a sink reads every column, when
    the union is every column (no projection needed) or when the data repeats a name (a projection
    by name would be ambiguous). A declared name the data lacks is left out: the sink's own
    ``validate`` names it."""
    names = list(names)
    if len(set(names)) != len(names):
        return None
    wanted: set[str] = set()
    for sink in sinks:
        declared = sink.read_columns()
        if declared is None:
            return None
        wanted.update(declared)
    picked = [n for n in names if n in wanted]
    return None if len(picked) == len(names) else picked


def sink_input(df: DataFrame, sinks: Iterable[TwoPhaseCommitSink[Any, Any]]) -> DataFrame:
    """``df`` projected to the columns ``sinks`` read (:func:`read_columns`), or ``df`` itself.

    The projection is a ``select`` of the DataFrame, so it happens in the JVM before ``mapInArrow``
    hands the rows to Python, and the optimizer prunes every expression only the dropped columns
    needed (in a batch write; see the module docstring for a streaming micro-batch). Names are
    quoted (a dot or a backtick in a name is taken literally).
    """
    from pyspark.sql import functions as F

    picked = read_columns(df.columns, sinks)
    if picked is None:
        return df
    return df.select(*(F.col("`" + name.replace("`", "``") + "`") for name in picked))


def epoch_task(plan: EpochPlan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function for one epoch; ``plan`` is pickled into the closure.

    Args:
        plan: the epoch's plan (sinks, checkpoint id, restored in-progress state).

    Returns:
        A function from the partition's Arrow batches to one batch of acknowledgements.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # executor-side import: the worker has pyspark

        tc = TaskContext.get()
        if tc is None:  # pragma: no cover - only reachable outside a Spark task
            raise RuntimeError("epoch_task must run inside a Spark task")
        acks = write_subtasks(plan, tc.partitionId(), tc.attemptNumber(), batches, pre_commit_at_once=True)
        yield pa.RecordBatch.from_pylist([a.to_row() for a in acks], schema=ACK_SCHEMA)

    return run


def acknowledgements_of(written: DataFrame, partitions: int, gather_above: int | None) -> DataFrame:
    """The DataFrame whose collection is the epoch's acknowledgement: ``written`` (the write's
    ``mapInArrow``, one row per subtask), gathered into one partition by a shuffle
    (``repartition(1)``) when it has more than ``gather_above`` partitions.

    Spark's Arrow collection hands the driver one batch per task of the collected plan, and the
    intake pays per batch and column (``ack_table.normalized``'s join, ~1.8 µs each: 1.5 s at 10⁵
    tasks × 3 sinks). Gathered, the write keeps its ``partitions`` tasks (they become the shuffle's
    map side; ``coalesce`` would merge them) and the driver receives
    ``ceil(rows / spark.sql.execution.arrow.maxRecordsPerBatch)`` batches, at the price of one more
    stage (a shuffle of small rows and one task); below the threshold that stage costs more than the
    chunks it saves (BENCHMARKS.md, "The acknowledgements gathered"). The gathered rows are sorted by
    (sink, partition) in that one task (``sortWithinPartitions``), so that the driver groups them
    per sink by slicing Spark's buffers (``ack_table.in_key_order``) rather than sorting and copying
    every payload (issue #42: each copy was ~200 MB of a 10⁵ × 3 driver's memory).

    Args:
        written: the write's acknowledgement rows (``mapInArrow`` of :func:`epoch_task`).
        partitions: ``written``'s number of partitions (the epoch's parallelism).
        gather_above: gather above this many partitions; ``None``: never.
    """
    if gather_above is None or partitions <= gather_above:
        return written
    return written.repartition(1).sortWithinPartitions("sink", "partition")


def staged_sink(sinks: Iterable[TwoPhaseCommitSink[Any, Any]]) -> TwoPhaseCommitSink[Any, Any] | None:
    """The job's sink when it is the only one and stages its epochs with Spark's writer
    (:class:`~twophase.sinks.spark_staging.SparkStagedSink`); ``None``: the one Python pass. With
    two or more sinks the rows are handed to Python once for all of them."""
    listed = list(sinks)
    if len(listed) != 1:
        return None
    only = listed[0]
    if isinstance(only, SparkStagedSink) and only.stages_with_spark():
        return only
    return None


def staged_acknowledgements(
    sink: TwoPhaseCommitSink[Any, Any], df: DataFrame, plan: EpochPlan, partitions: int
) -> pa.Table:
    """The epoch written by ``sink``'s Spark writer, as the acknowledgement table of its
    ``partitions`` subtasks (one row each): each staged task's attempt, committable and records
    (Spark's commit coordination let one attempt of each partition commit its output, and the
    sink hands back only theirs); a partition that wrote nothing acknowledges an empty transaction.

    Raises:
        ValueError: the write staged a partition outside ``0..partitions-1``.
        Exception: whatever the sink's staged write raises.
    """
    assert isinstance(sink, SparkStagedSink)
    staged = sink.stage_with_spark(df, plan.job_id, plan.checkpoint_id)
    stray = sorted(p for p in staged if not 0 <= p < partitions)
    if stray:
        raise ValueError(f"sink {sink.name!r}: the staged write reported partitions {stray} of {partitions}")
    acks = []
    for p in range(partitions):
        task = staged.get(p)
        if task is None:
            acks.append(Acknowledgement.of(sink, p, 0, None, records=0))
        else:
            acks.append(Acknowledgement.of(sink, p, task.attempt, task.committable, records=task.records))
    return pa.Table.from_pylist([a.to_row() for a in acks], schema=ACK_SCHEMA)


def run_spark_epoch(
    runtime: JobRuntime, df: DataFrame, position: JsonObject, batch_id: int | None
) -> EpochMetrics:
    """Run one epoch of ``df`` through every sink: the epoch loop with ``mapInArrow`` as its write step
    (its acknowledgements gathered into one partition above the runtime's
    ``gather_acknowledgements_above`` partitions, :func:`acknowledgements_of`).

    Raises:
        Whatever the Spark job or the runtime raise; the epoch's checkpoint is aborted first.
    """
    df = sink_input(df, runtime.sinks.values())
    partitions = df.rdd.getNumPartitions()
    if partitions == 0:
        df, partitions = df.repartition(1), 1  # an empty input still acknowledges its checkpoint

    gather_above = runtime.config.gather_acknowledgements_above
    staged = staged_sink(runtime.sinks.values())

    def write(plan: EpochPlan) -> pa.Table:
        if staged is not None:
            return staged_acknowledgements(staged, df, plan, partitions)
        written = df.mapInArrow(epoch_task(plan), ack_struct_type())
        return collect_arrow(acknowledgements_of(written, partitions, gather_above))

    result = run_epoch(runtime, partitions, write, position)
    cm = result.checkpoint
    metrics = EpochMetrics(
        checkpoint_id=cm.checkpoint_id,
        batch_id=batch_id,
        partitions=partitions,
        records=result.records,
        epoch_ms=result.epoch_ms,
        write_ms=result.write_ms,
        persist_ms=cm.persist_ms,
        commit_ms=cm.commit_ms,
        transactions_committed=cm.transactions_committed,
        transactions_aborted=cm.transactions_aborted,
    )
    log_event(
        log,
        logging.INFO,
        "epoch done",
        job=runtime.job_id,
        checkpoint=metrics.checkpoint_id,
        batch=batch_id,
        partitions=partitions,
        records=metrics.records,
        epoch_ms=metrics.epoch_ms,
        write_ms=metrics.write_ms,
        persist_ms=metrics.persist_ms,
        commit_ms=metrics.commit_ms,
    )
    return metrics
