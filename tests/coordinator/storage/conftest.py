"""Shared fixtures of the checkpoint-storage tests: realistic checkpoint metadata."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes

MakeMeta = Callable[..., CheckpointMetadata]


def kafka_payload(partition: int, checkpoint_id: int) -> dict[str, object]:
    """An encoded Kafka committable as the Kafka sink's codec writes it."""
    return {
        "kind": "kafka.transaction",
        "version": 1,
        "body": {
            "transactional_id": f"tp-job-1-orders-{partition}-{checkpoint_id % 3}",
            "producer_id": 4000 + partition,
            "producer_epoch": checkpoint_id,
            "topic_partitions": [["orders", partition]],
            "record_count": 100 + partition,
        },
    }


def s3_in_progress(partition: int) -> dict[str, object]:
    """In-progress state of an S3 row-format file spanning checkpoints."""
    body = {"key": f"out/part-{partition}.jsonl", "bytes": 17}
    return {"kind": "s3.in_progress", "version": 1, "body": body}


def build_metadata(
    checkpoint_id: int,
    kind: CheckpointKind = CheckpointKind.CHECKPOINT,
    *,
    job_id: str = "job-1",
    partitions: int = 3,
    end_of_input: bool = False,
) -> CheckpointMetadata:
    """Metadata with a Kafka sink (committables) and an S3 sink (in-progress state)."""
    return CheckpointMetadata(
        job_id=job_id,
        checkpoint_id=checkpoint_id,
        kind=kind,
        timestamp_ms=1_700_000_000_000 + checkpoint_id,
        sinks={
            "orders": SinkSnapshot(
                num_partitions=partitions,
                committables=tuple(
                    CommittableRecord(p, 0, payload_bytes(kafka_payload(p, checkpoint_id)))
                    for p in range(partitions)
                ),
            ),
            "archive": SinkSnapshot(
                num_partitions=partitions,
                in_progress={p: s3_in_progress(p) for p in range(partitions)},
            ),
        },
        source_position={"engine": "spark", "query_id": "0f1e2d3c", "batch_id": checkpoint_id - 1},
        fully_finished=("source-1",) if end_of_input else (),
        end_of_input=end_of_input,
    )


@pytest.fixture
def make_meta() -> MakeMeta:
    """``make_meta(checkpoint_id, kind=CHECKPOINT, job_id="job-1", partitions=3, end_of_input=False)``."""
    return build_metadata
