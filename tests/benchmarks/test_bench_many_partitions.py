"""The N-partition cluster benchmark (issue #42): its pure parts (micro-batches and their Spark
jobs from the event log, the points it accepts), and the whole harness at a tiny N on the
standalone cluster (``long``: it starts Kafka, MinIO and the cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bench_modules import ROOT, load_benchmark

bench = load_benchmark("bench_many_partitions", ROOT / "benchmarks" / "bench_many_partitions.py")

T0 = 1_764_752_400_000  # 2025-12-03T09:00:00Z, ms


def progress(batch: int, at_ms: int, trigger_ms: int, rows: int) -> dict[str, object]:
    stamp = f"2025-12-03T09:{at_ms // 60_000:02d}:{at_ms % 60_000 / 1000:06.3f}Z"
    return {
        "Event": bench.PROGRESS_EVENT,
        "progress": {
            "batchId": batch,
            "timestamp": stamp,
            "sources": [{"numInputRows": rows}],
            "durationMs": {"triggerExecution": trigger_ms, "addBatch": trigger_ms - 100},
        },
    }


def job(job_id: int, at_ms: int, stages: list[int]) -> dict[str, object]:
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job_id,
        "Submission Time": T0 + at_ms,
        "Stage IDs": stages,
    }


def task(stage: int, run_ms: int, cpu_ns: int) -> dict[str, object]:
    metrics = {"Executor Run Time": run_ms, "Executor CPU Time": cpu_ns, "Executor Deserialize CPU Time": 0}
    return {"Event": "SparkListenerTaskEnd", "Stage ID": stage, "Task Metrics": metrics}


def test_batches_take_the_jobs_submitted_while_they_ran(tmp_path: Path) -> None:
    events = [
        progress(1, 10_000, 2_000, 50),  # runs 10.0–12.0 s: jobs 1 and 2
        progress(0, 0, 5_000, 100),  # runs 0–5 s: job 0 (listed out of order)
        progress(0, 60_000, 1_000, 7),  # another run's batch, outside every window
        job(0, 1_000, [0]),
        job(1, 10_500, [1, 2]),
        job(2, 11_900, [3]),
        job(3, 20_000, [4]),  # between batches: the final checkpoint's, say
        task(0, 1_000, 500_000_000),
        task(1, 2_000, 1_000_000_000),
        task(2, 500, 0),
        task(3, 500, 250_000_000),
        task(4, 9_000, 0),
    ]
    log = tmp_path / "app-1"
    log.write_text("\n".join(json.dumps(e) for e in events) + '\n{"Event": "Spar')  # cut off
    found = bench.batches(log, [("N4/twophase|0", T0 - 1, T0 + 30_000)])
    assert found == {
        "N4/twophase|0": [
            {
                "batch": 0,
                "rows": 100,
                "wall_s": 5.0,
                "add_batch_s": 4.9,
                "jobs": 1,
                "tasks": 1,
                "task_run_s": 1.0,
                "task_cpu_s": 0.5,
            },
            {
                "batch": 1,
                "rows": 50,
                "wall_s": 2.0,
                "add_batch_s": 1.9,
                "jobs": 2,
                "tasks": 3,
                "task_run_s": 3.0,
                "task_cpu_s": 1.25,
            },
        ]
    }


def test_points_are_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWOPHASE_BENCH_PARTITIONS", "10,100")
    assert bench.partitions() == [10, 100]
    monkeypatch.setenv("TWOPHASE_BENCH_PARTITIONS", "0")
    with pytest.raises(ValueError, match="positive integers"):
        bench.partitions()


@pytest.mark.long
def test_the_harness_at_four_partitions_on_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sides at N=4, one epoch each, on a temporary cluster; each run read back exactly (the
    harness raises otherwise) and its micro-batch found in the event log with its 4 tasks."""
    monkeypatch.setenv("TWOPHASE_BENCH_PARTITIONS", "4")
    monkeypatch.setenv("TWOPHASE_BENCH_EPOCHS", "1")
    monkeypatch.setenv("TWOPHASE_BENCH_RUNS", "1")
    result = bench.run()
    runs = result["points"]["N=4"]["runs"]
    ours, theirs = runs["twophase|0"], runs["spark_expert|0"]
    assert [e["partitions"] for e in ours["epochs"]] == [4]
    assert ours["records"] == theirs["records"] == {"kafka": 27_004, "s3": 27_004, "delta": 27_004}
    assert len(ours["batches"]) == len(theirs["batches"]) == 1
    assert ours["batches"][0]["tasks"] >= 4
