"""The coordinator-at-scale benchmark runs against the current runtime (issue #42): one size, tiny,
local storage, every step measured (no Spark, no services)."""

from __future__ import annotations

from pathlib import Path

from support.bench_modules import ROOT, load_benchmark

from twophase.coordinator.storage.local import LocalCheckpointStorage

bench = load_benchmark("bench_coordinator_scale", ROOT / "benchmarks" / "bench_coordinator_scale.py")


def test_one_size_measures_every_step_of_an_epoch_and_a_restore(tmp_path: Path) -> None:
    runs = iter(range(100))

    def storage() -> LocalCheckpointStorage:
        return LocalCheckpointStorage(tmp_path / f"run-{next(runs)}", bench.JOB_ID)

    rows = bench.bench_size(10, 2, storage, lambda location: Path(location).stat().st_size)
    for step in (*bench.STEPS, "epoch", "drain", "epoch+drain", "restore"):
        assert rows[step]["n"] >= 2, step
        assert rows[step]["cpu_ms"] >= 0, step
    for step in ("trigger", "acknowledge", "epoch", "epoch driver thread"):  # the first epoch, apart
        assert rows[bench.FIRST + step]["n"] == 1, step
    for memory in ("driver memory", "driver memory at start", "driver memory released"):
        assert rows[memory]["rss_mb"] > 0 and rows[memory]["arrow_mb"] >= 0, memory
    assert rows["driver memory"]["hwm_mb"] >= rows["driver memory"]["rss_mb"]
