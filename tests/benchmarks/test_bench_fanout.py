"""The fan-out benchmark's pure parts: Spark's task metrics per writer and phase, read from the
event log by the job property the recipes tag their jobs with (no Spark, no services)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bench_modules import ROOT, load_benchmark

bench_fanout = load_benchmark("bench_fanout", ROOT / "benchmarks" / "bench_fanout.py")


def job_start(job: int, stages: list[int], phase: str | None, description: str = "") -> dict[str, object]:
    props = {"spark.job.description": description} if description else {}
    if phase is not None:
        props[bench_fanout.PHASE_PROPERTY] = phase
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job,
        "Submission Time": 1_000,
        "Stage IDs": stages,
        "Properties": props,
    }


def task_end(stage: int, cpu_ns: int, run_ms: int) -> dict[str, object]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Task Metrics": {
            "Executor CPU Time": cpu_ns,
            "Executor Deserialize CPU Time": 0,
            "Executor Run Time": run_ms,
            "JVM GC Time": 5,
        },
    }


def test_tasks_are_summed_under_the_phase_of_their_job(tmp_path: Path) -> None:
    events = [
        job_start(1, [1, 2], "28k/foreach_batch_expert|0|delta"),
        job_start(2, [3], "28k/foreach_batch_expert|0|delta", description="Delta: compute snapshot"),
        job_start(3, [4], None),
        task_end(1, 1_000_000_000, 1_200),
        task_end(2, 500_000_000, 600),
        task_end(3, 250_000_000, 300),
        task_end(4, 100_000_000, 100),
        {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 3_500},
    ]
    log = tmp_path / "app-1"
    log.write_text("\n".join(json.dumps(e) for e in events) + '\n{"Event": "Spark')  # cut off
    jobs = bench_fanout.job_breakdown(log)
    assert jobs["28k/foreach_batch_expert|0|delta"] == {
        "jobs": 1,
        "tasks": 2,
        "task_cpu_s": 1.5,
        "task_run_s": 1.8,
        "gc_s": 0.01,
        "job_wall_s": 2.5,
    }
    assert jobs["28k/foreach_batch_expert|0|delta/delta-log"]["task_cpu_s"] == 0.25
    assert jobs["untagged"]["tasks"] == 1


def test_phase_medians_count_a_missing_round_as_zero() -> None:
    jobs = {
        "28k/x|0|kafka": {**bench_fanout.JOB_FIELDS, "tasks": 4, "task_cpu_s": 2.0},
        "28k/x|1|kafka": {**bench_fanout.JOB_FIELDS, "tasks": 6, "task_cpu_s": 4.0},
        "28k/x|2|kafka": {**bench_fanout.JOB_FIELDS, "tasks": 8, "task_cpu_s": 3.0},
        "28k/x|0|delta": {**bench_fanout.JOB_FIELDS, "tasks": 2},
        "28k/x|-1|kafka": {**bench_fanout.JOB_FIELDS, "tasks": 100},  # the warm-up: not a round
        "28k/y|0|kafka": {**bench_fanout.JOB_FIELDS, "tasks": 100},
    }
    medians = bench_fanout.phase_medians(jobs, "28k/x", 3)
    assert medians["kafka"]["tasks"] == 6 and medians["kafka"]["task_cpu_s"] == 3.0
    assert medians["delta"]["tasks"] == 0
    assert set(medians) == {"delta", "kafka"}


def test_the_heap_for_every_writer_is_spark_s_default_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY", raising=False)
    assert bench_fanout.driver_memory() is None
    monkeypatch.setenv("TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY", "6G")
    assert bench_fanout.driver_memory() == "6g"
    monkeypatch.setenv("TWOPHASE_BENCH_FANOUT_DRIVER_MEMORY", "6 GB")
    with pytest.raises(ValueError, match="JVM memory size such as 6g"):
        bench_fanout.driver_memory()
