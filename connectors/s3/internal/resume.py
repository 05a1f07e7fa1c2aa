"""Resuming an in-progress file of a restored checkpoint that cannot be resumed.

A file that spans checkpoints keeps one multipart upload in every checkpoint it spans. When a job
is rewound to an older savepoint, a checkpoint after that savepoint may have completed the file
already: its upload and tail objects are gone and its object is visible. The file cannot be
resumed (Flink's FileSink refuses such a restore); its records up to the savepoint are visible
once, so the rewound job opens a new file instead, and writes again what the later checkpoints
added, as every sink does after a rewind. A file that is neither resumable nor complete is lost,
and the writer says so by name.
"""

from __future__ import annotations

import logging

from twophase.connectors.s3.internal.committable import InProgressFile
from twophase.connectors.s3.internal.uploads import S3Ops
from twophase.sinks.context import WriterContext
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


def completed_by_a_later_checkpoint(ops: S3Ops, restored: InProgressFile, ctx: WriterContext) -> bool:
    """True if the restored file's object exists with at least the restored bytes (parts and
    tail): a later checkpoint completed it. Logs a warning then (job, sink, checkpoint, partition,
    key). One HeadObject request.

    Raises:
        ServiceUnavailableError: S3 keeps failing (after the configured retries).
    """
    size = ops.object_size(restored.key)
    if size is None or size < restored.uploaded_bytes + restored.tail_size:
        return False
    log_event(
        log,
        logging.WARNING,
        "in-progress file completed by a later checkpoint; opening a new file",
        job=ctx.job_id,
        sink=ctx.sink_name,
        checkpoint=ctx.checkpoint_id,
        partition=ctx.partition,
        key=restored.key,
    )
    return True
