"""Drive the Delta sink from Spark without the coordinator: one epoch = mapInArrow write + commit.

Used by the integration tests and the benchmark. The coordinator's Spark execution does the same
with checkpoints in between (DESIGN.md §6); this helper only exists to exercise the connector.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from twophase.connectors.delta import DeltaCommittable, DeltaSink
from twophase.sinks.context import WriterContext
from twophase.sinks.outcome import CommitOutcome

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COMMITTABLE_ROWS = "partition int, attempt int, payload string"
"""Schema of the rows each task yields: one per non-empty committable."""


def write_epoch(df: DataFrame, sink: DeltaSink, job_id: str, checkpoint_id: int) -> list[DeltaCommittable]:
    """Write ``df`` through ``sink`` on the executors; return the decoded committables (one per task).

    The sink validates ``df``'s schema on the driver first (SchemaError/ConfigError before any write).

    Each task runs begin_transaction → write every Arrow batch → pre_commit, aborting its open
    transaction if anything fails; its committable travels back as versioned JSON.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    sink.validate(to_arrow_schema(df.schema, timezone="UTC"))
    num_partitions = df.rdd.getNumPartitions()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None
        ctx = WriterContext(
            job_id, sink.name, checkpoint_id, task.partitionId(), task.attemptNumber(), num_partitions
        )
        txn = sink.begin_transaction(ctx)
        try:
            for batch in batches:
                sink.write(txn, batch)
            committable = sink.pre_commit(txn)
        except BaseException:
            sink.abort_open(txn)
            raise
        if committable is not None:
            payload = json.dumps(sink.encode(committable))
            yield pa.record_batch(
                {
                    "partition": pa.array([ctx.partition], pa.int32()),
                    "attempt": pa.array([ctx.attempt], pa.int32()),
                    "payload": pa.array([payload]),
                }
            )

    rows = df.mapInArrow(run, COMMITTABLE_ROWS).collect()
    return [sink.decode(json.loads(row.payload)) for row in rows]


def write_and_commit(df: DataFrame, sink: DeltaSink, job_id: str, checkpoint_id: int) -> CommitOutcome:
    """:func:`write_epoch` then :meth:`DeltaSink.commit_checkpoint` of all its committables."""
    return sink.commit_checkpoint(checkpoint_id, write_epoch(df, sink, job_id, checkpoint_id))
