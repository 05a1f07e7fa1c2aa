"""The cluster benchmark's pure parts: the task metrics summed from Spark's event log, and the
placements it accepts (no Spark, no services)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bench_modules import ROOT, load_benchmark

bench_cluster = load_benchmark("bench_cluster", ROOT / "benchmarks" / "bench_cluster.py")


def task_end(run_ms: int, fetch_wait_ms: int = 0, shuffle_write_ns: int = 0) -> dict[str, object]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Task Metrics": {
            "Executor Deserialize Time": 100,
            "Executor Run Time": run_ms,
            "JVM GC Time": 10,
            "Result Serialization Time": 1,
            "Shuffle Read Metrics": {"Fetch Wait Time": fetch_wait_ms},
            "Shuffle Write Metrics": {
                "Shuffle Write Time": shuffle_write_ns,
                "Shuffle Bytes Written": 2_000_000,
            },
            "Input Metrics": {"Bytes Read": 3_000_000},
        },
    }


def test_task_metrics_sum_every_task_of_every_log(tmp_path: Path) -> None:
    events = [
        {"Event": "SparkListenerApplicationStart", "Timestamp": 1_000_000},
        {"Event": "SparkListenerExecutorAdded", "Timestamp": 1_004_000},
        {"Event": "SparkListenerExecutorAdded", "Timestamp": 1_006_500},
        task_end(2_000, fetch_wait_ms=500, shuffle_write_ns=250_000_000),
        task_end(3_000),
        {
            "Event": bench_cluster.PROGRESS_EVENT,
            "progress": {"durationMs": {"addBatch": 1500, "walCommit": 250}},
        },
        {
            "Event": bench_cluster.PROGRESS_EVENT,
            "progress": {"durationMs": {"addBatch": 500, "walCommit": 250}},
        },
    ]
    (tmp_path / "app-1").write_text(
        "\n".join(json.dumps(e) for e in events) + '\n{"Event": "Spark'
    )  # cut off
    (tmp_path / "app-2").write_text(json.dumps(task_end(1_000)) + "\n")
    assert bench_cluster.task_metrics(tmp_path) == {
        "deserialize_s": 0.3,
        "run_s": 6.0,
        "gc_s": 0.03,
        "result_serialize_s": 0.0,
        "fetch_wait_s": 0.5,
        "shuffle_write_s": 0.25,
        "input_mb": 9.0,
        "shuffle_mb": 6.0,
        "tasks": 3,
        "executors_ready_s": 6.5,
        "stream_addBatch_s": 2.0,
        "stream_walCommit_s": 0.5,
    }


def test_no_log_no_executors(tmp_path: Path) -> None:
    assert bench_cluster.task_metrics(tmp_path)["executors_ready_s"] is None


def test_unknown_placement_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWOPHASE_BENCH_PLACEMENTS", "local,yarn")
    with pytest.raises(ValueError, match="unknown \\['yarn'\\]"):
        bench_cluster._placements()
