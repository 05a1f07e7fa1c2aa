"""Drive the Delta sink's executor side in this process: one subtask per list of batches."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from twophase.connectors.delta import DeltaCommittable, DeltaSink
from twophase.sinks.context import WriterContext


def write_checkpoint(
    sink: DeltaSink,
    checkpoint_id: int,
    partitions: Sequence[Sequence[pa.RecordBatch]],
    job_id: str,
    attempt: int = 0,
) -> list[DeltaCommittable]:
    """Run begin_transaction → write → pre_commit for each subtask; ``partitions[i]`` is the list
    of batches subtask i writes. Returns the non-empty committables."""
    out = []
    for p, batches in enumerate(partitions):
        ctx = WriterContext(job_id, sink.name, checkpoint_id, p, attempt, len(partitions))
        txn = sink.begin_transaction(ctx)
        for b in batches:
            sink.write(txn, b)
        c = sink.pre_commit(txn)
        if c is not None:
            out.append(c)
    return out
