"""Checkpoint metadata as the checkpoint-storage suites publish it (S3, Azure, GCS), and the exit a
publish took."""

from __future__ import annotations

from collections.abc import Callable

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.sinks.errors import CheckpointNotPublishedError, CheckpointPublishUnknownError

CK, FIN = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL
PUBLISHED, NOT_PUBLISHED, UNKNOWN = "published", "not published", "unknown"


def publish_exit(publish: Callable[[], object]) -> str:
    """Which of the three exits of DESIGN.md §12 ``publish()`` took."""
    try:
        publish()
    except CheckpointPublishUnknownError:
        return UNKNOWN
    except CheckpointNotPublishedError:
        return NOT_PUBLISHED
    return PUBLISHED


def metadata(
    cid: int, kind: CheckpointKind = CK, *, job_id: str = "job-1", partitions: int = 2
) -> CheckpointMetadata:
    """A checkpoint with Kafka-like committables and S3-like in-progress state."""
    committables = tuple(
        CommittableRecord(
            p,
            0,
            payload_bytes(
                {
                    "kind": "kafka.transaction",
                    "version": 1,
                    "body": {
                        "transactional_id": f"tp-{job_id}-orders-{p}-0",
                        "producer_id": 10 + p,
                        "producer_epoch": cid,
                    },
                }
            ),
        )
        for p in range(partitions)
    )
    return CheckpointMetadata(
        job_id=job_id,
        checkpoint_id=cid,
        kind=kind,
        timestamp_ms=1_700_000_000_000 + cid,
        sinks={
            "orders": SinkSnapshot(partitions, committables),
            "archive": SinkSnapshot(
                partitions, in_progress={0: {"kind": "s3.in_progress", "version": 1, "body": {}}}
            ),
        },
        source_position={"engine": "spark", "query_id": "q-1", "batch_id": cid - 1},
        end_of_input=kind is FIN,
    )
