"""The executor side on Spark: the function ``mapInArrow`` runs in every task of an epoch.

Each task writes its partition to every sink in one pass (:func:`twophase.coordinator.fanout.write_subtasks`)
and yields its acknowledgements as one Arrow batch of :data:`twophase.coordinator.fanout.ACK_SCHEMA`.
Collecting those rows on the driver is the checkpoint's acknowledgement: Spark returns exactly one
successful attempt per partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from twophase.coordinator.fanout import ACK_SCHEMA, EpochPlan, write_subtasks


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
        acks = write_subtasks(plan, tc.partitionId(), tc.attemptNumber(), batches)
        yield pa.RecordBatch.from_pylist([a.to_row() for a in acks], schema=ACK_SCHEMA)

    return run
