"""Benchmark: finish latency with k = 1, 2, 4, 8 sinks — one shared final checkpoint vs one per sink.

FLIP-147: at end of input every sink finishes, then the job waits for the first checkpoint that
completes after finish() and commits on its notification. With several 2PC sinks they all share
**one** final checkpoint, so finishing costs one checkpoint whatever k is. The comparison is
committing sink by sink: k single-sink jobs finishing one after another (k final checkpoints).

Each round, for each k and each sink family, builds fresh jobs over fresh storage, runs one epoch
of ``PARTITIONS`` partitions × ``ROWS_PER_PARTITION`` rows in-process
(``twophase.coordinator.run.fanout.write_subtasks``, the code a Spark task runs; checkpoint published and
committed), then times **end of input → FINISHED**:

- ``shared``: ``JobRuntime.finish()`` of one job holding the k sinks;
- ``sink_by_sink``: ``finish()`` of k one-sink jobs, one after another (sum of their wall times).

Sink families:

- ``file``: ``support.file_sink.JsonLinesFileSink`` (local files; its data is committed
  with the epoch's checkpoint, so the final checkpoint carries no data: the cost is the
  checkpoint itself — finish the subtasks, publish, lingering clean-up);
- ``s3_jsonl``: ``S3Sink`` writing JSON lines that span checkpoints (MinIO): each partition's file
  is still in progress at end of input, so the final checkpoint finishes it on the driver
  (uploads the tail, pre-commits) and commits it (CompleteMultipartUpload): real work per sink.

Checkpoints go to a local directory (``TWOPHASE_BENCH_DIR`` or the temp dir; fsync on publish).
Reported per (family, k, mode): median ms with min–max over ``ROUNDS`` rounds, and the shared
mode's final checkpoint ``persist_ms`` / ``commit_ms``. ``python -m benchmarks.bench_finish_latency``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import common

KS = (1, 2, 4, 8)
PARTITIONS = 2
ROWS_PER_PARTITION = 1_000
ROUNDS = 7
BUCKET = "twophase-bench"


def _batch(partition: int) -> Any:
    import pyarrow as pa

    n = ROWS_PER_PARTITION
    return pa.record_batch(
        {
            "id": pa.array(range(partition * n, (partition + 1) * n), type=pa.int64()),
            "name": [f"row-{partition}-{i}" for i in range(n)],
        }
    )


def _run_epoch(runtime: Any) -> None:
    from twophase.coordinator.run.epoch import run_epoch
    from twophase.coordinator.run.fanout import write_subtasks

    def write(plan: Any) -> list[Any]:
        return [ack for p in range(PARTITIONS) for ack in write_subtasks(plan, p, 0, [_batch(p)])]

    run_epoch(runtime, PARTITIONS, write, {"engine": "bench", "batch": 0})


def _runtime(job_id: str, sinks: Sequence[Any], chk_dir: Path) -> Any:
    from twophase.coordinator.run.runtime import JobRuntime
    from twophase.coordinator.storage import open_storage

    rt = JobRuntime(job_id, sinks, open_storage(str(chk_dir), job_id))
    rt.restore()
    _run_epoch(rt)
    return rt


def _measure(
    make_sink: Callable[[str, str], Any], k: int, scratch: Path, tag: str
) -> tuple[float, float, float, float]:
    """(shared finish ms, sink-by-sink finish ms, shared persist ms, shared commit ms)."""
    from twophase.coordinator.state.job_lifecycle import JobState

    job = f"fin-{tag}"
    shared = _runtime(job, [make_sink(f"s{i}", job) for i in range(k)], scratch / "chk")
    start = time.perf_counter()
    metrics = shared.finish()
    shared_ms = (time.perf_counter() - start) * 1000.0
    assert shared.state is JobState.FINISHED and metrics is not None
    shared.close()
    singles = [
        _runtime(f"{job}-one{i}", [make_sink(f"s{i}", f"{job}-one{i}")], scratch / "chk") for i in range(k)
    ]
    start = time.perf_counter()
    for rt in singles:
        rt.finish()
    by_sink_ms = (time.perf_counter() - start) * 1000.0
    for rt in singles:
        assert rt.state is JobState.FINISHED
        rt.close()
    return shared_ms, by_sink_ms, metrics.persist_ms, metrics.commit_ms


def _family(make_sink: Callable[[str, str], Any], rounds: int, scratch: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    run_id = uuid.uuid4().hex[:6]
    _measure(make_sink, 1, scratch, f"{run_id}-warm")
    for k in KS:
        samples = [_measure(make_sink, k, scratch, f"{run_id}-k{k}-r{r}") for r in range(rounds)]
        shared = [s[0] for s in samples]
        by_sink = [s[1] for s in samples]
        out[f"k={k}"] = {
            "shared_ms": round(statistics.median(shared), 1),
            "shared_range_ms": f"{min(shared):.1f}–{max(shared):.1f}",
            "sink_by_sink_ms": round(statistics.median(by_sink), 1),
            "sink_by_sink_range_ms": f"{min(by_sink):.1f}–{max(by_sink):.1f}",
            "sink_by_sink_over_shared": round(statistics.median(by_sink) / statistics.median(shared), 2),
            "shared_persist_ms": round(statistics.median(s[2] for s in samples), 1),
            "shared_commit_ms": round(statistics.median(s[3] for s in samples), 1),
        }
    return out


def run() -> dict[str, Any]:
    """Run both sink families; see the module docstring."""
    from support.file_sink import JsonLinesFileSink

    from twophase.connectors.s3 import S3Sink
    from twophase.integration.services import s3_service

    rounds = common.runs(ROUNDS)
    env = common.machine()
    scratch = Path(
        tempfile.mkdtemp(prefix="twophase-bench-finish-", dir=os.environ.get("TWOPHASE_BENCH_DIR"))
    )
    results: dict[str, Any] = {}
    try:
        results["file"] = _family(
            lambda name, job: JsonLinesFileSink(name, scratch / "out" / job), rounds, scratch / "file"
        )
        with s3_service() as endpoint:
            endpoint.ensure_bucket(BUCKET)
            prefix = f"finish-{uuid.uuid4().hex[:8]}"

            def s3_sink(name: str, job: str) -> Any:
                return S3Sink(
                    name,
                    endpoint.sink_config(
                        bucket=BUCKET,
                        prefix=f"{prefix}/{job}/{name}",
                        format="jsonl",
                    ),
                )

            results["s3_jsonl"] = _family(s3_sink, rounds, scratch / "s3")
            client = endpoint.boto3_client()
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for page in pages:
                objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if objs:
                    client.delete_objects(Bucket=BUCKET, Delete={"Objects": objs, "Quiet": True})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "partitions": PARTITIONS,
        "rows_per_partition": ROWS_PER_PARTITION,
        "rounds": rounds,
        **env,
        "file_sinks": results["file"],
        "s3_jsonl_sinks": results["s3_jsonl"],
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
