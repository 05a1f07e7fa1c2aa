"""Benchmark: publishing and loading checkpoint metadata with 10^4 committables (local storage).

A checkpoint of a job whose Kafka sink ran with 10,000 partitions (one pre-committed transaction
each, encoded as the Kafka codec's versioned JSON: transactional id, producer id and epoch,
topic-partitions, record count), plus an S3 sink's in-progress state for 100 partitions.
For scale, the same with 10^3 committables.

Phases, each timed on its own, wall-clock ms, median of ``RUNS`` runs with min-max:

- ``encode``: ``CheckpointMetadata.dumps()`` alone;
- ``publish``: ``LocalCheckpointStorage.publish`` (encode, write a temp file, fsync, link, fsync
  the directory), one fresh checkpoint id per run;
- ``latest``: ``latest()``, i.e. list the job directory, read and decode the newest ``_metadata``;
- ``decode``: ``CheckpointMetadata.loads()`` alone.

The directory is a fresh temporary one, under ``$TWOPHASE_BENCH_DIR`` if set (fsync cost depends
on the file system; /tmp may be tmpfs). ``python -m benchmarks.bench_checkpoint_publish`` prints it.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.storage.local import LocalCheckpointStorage

RUNS = 7
SIZES = (1_000, 10_000)
JOB_ID = "bench-orders"


def kafka_committable(partition: int, checkpoint_id: int) -> CommittableRecord:
    """One subtask's pre-committed Kafka transaction, as the Kafka sink's codec encodes it."""
    return CommittableRecord(
        partition=partition,
        attempt=0,
        payload={
            "kind": "kafka.transaction",
            "version": 1,
            "body": {
                "transactional_id": f"twophase-{JOB_ID}-orders-{partition}-{checkpoint_id % 4}",
                "producer_id": 1_000_000 + partition,
                "producer_epoch": 3,
                "topic_partitions": [["orders.enriched", partition % 48]],
                "record_count": 4_096 + partition % 97,
            },
        },
    )


def build_metadata(checkpoint_id: int, committables: int) -> CheckpointMetadata:
    """A checkpoint with ``committables`` Kafka transactions and 100 S3 in-progress files."""
    in_progress = {
        p: {
            "kind": "s3.in_progress",
            "version": 1,
            "body": {
                "key": f"archive/dt=2013-01-01/part-{p}-{checkpoint_id}.jsonl",
                "upload_id": f"{p:08x}" * 8,
                "parts": [{"number": 1, "etag": f'"{p:032x}"'}],
                "bytes": 5 * 1024 * 1024,
            },
        }
        for p in range(100)
    }
    return CheckpointMetadata(
        job_id=JOB_ID,
        checkpoint_id=checkpoint_id,
        kind=CheckpointKind.CHECKPOINT,
        timestamp_ms=1_700_000_000_000 + checkpoint_id,
        sinks={
            "orders": SinkSnapshot(
                committables, tuple(kafka_committable(p, checkpoint_id) for p in range(committables))
            ),
            "archive": SinkSnapshot(100, in_progress=in_progress),
        },
        source_position={
            "engine": "spark",
            "query_id": "6a1f0c9e-5d2b-4f7a-9e61-0b3c2d1e4f50",
            "batch_id": 41,
        },
    )


def _time_ms(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e6


def bench_size(base_dir: Path, committables: int, runs: int = RUNS) -> dict[str, dict[str, object]]:
    """Time the four phases for one metadata size in a fresh job directory under ``base_dir``.

    Returns:
        phase → ``{"bytes", "median_ms", "min_ms", "max_ms"}``.
    """
    storage = LocalCheckpointStorage(base_dir / str(committables), JOB_ID)
    metas = [build_metadata(cid, committables) for cid in range(1, runs + 1)]
    data = metas[0].dumps()
    samples: dict[str, list[float]] = {"encode": [], "publish": [], "latest": [], "decode": []}
    for meta in metas:
        samples["encode"].append(_time_ms(meta.dumps))
        samples["publish"].append(_time_ms(partial(storage.publish, meta)))
        samples["latest"].append(_time_ms(storage.latest))
        samples["decode"].append(_time_ms(partial(CheckpointMetadata.loads, data)))
    if storage.latest() != metas[-1]:  # a benchmark of a broken round trip would be meaningless
        raise AssertionError("published and loaded checkpoint metadata differ")
    return {
        phase: {
            "bytes": len(data),
            "median_ms": round(statistics.median(times), 2),
            "min_ms": round(min(times), 2),
            "max_ms": round(max(times), 2),
        }
        for phase, times in samples.items()
    }


def run() -> dict[str, object]:
    """Run the benchmark for 10^3 and 10^4 committables.

    Returns:
        ``{"directory": str, "runs": n, "publish and load": {"<n> committables: <phase>":
        {"bytes", "median_ms", "min_ms", "max_ms"}}}``; times in ms, sizes in bytes.
    """
    rows: dict[str, object] = {}
    parent = os.environ.get("TWOPHASE_BENCH_DIR")
    with tempfile.TemporaryDirectory(prefix="twophase-bench-", dir=parent) as tmp:
        for n in SIZES:
            for phase, row in bench_size(Path(tmp), n).items():
                rows[f"{n:,} committables: {phase}"] = row
    return {"directory": tmp, "runs": RUNS, "publish and load": rows}


if __name__ == "__main__":
    from benchmarks.run import print_result

    print_result("checkpoint_publish", run())
