"""The coordinator-at-scale benchmark runs against the current runtime (issue #42): one size, tiny,
local storage, every step measured (no Spark, no services)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.bench_modules import ROOT, load_benchmark

from twophase.coordinator.state import ack_table
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


def test_the_collections_table_steps_run_on_an_intake_table() -> None:
    """The intake's checks that ``bench_collection`` times alone run on what a collection hands
    the driver (they drifted from the intake's signatures once: a step called a removed name)."""
    sinks = bench.make_sinks()
    table = bench.Executors(sinks, 4).table(1, gather_above=2)  # gathered: sorted, as the gather's task
    joined = normalized(table)
    for name, fn in bench.TABLE_STEPS:
        out = fn(joined)
        if name == "in_key_order":
            assert out is True
    unsorted = bench.Executors(sinks, 4).table(1, gather_above=None)  # one batch per task
    assert bench._in_key_order(normalized(unsorted)) is False


def normalized(table: pa.Table) -> pa.Table:
    """:func:`ack_table.normalized` as the intake calls it: handed ``table`` without its payloads."""
    return ack_table.normalized(table.drop_columns([ack_table.PAYLOAD]), table.schema)


def test_the_collections_plans_are_chosen_by_name(monkeypatch: Any) -> None:
    """``TWOPHASE_BENCH_COLLECT_PLANS`` picks plans (10⁵ real tasks take ~45 min per plan); an
    unknown name is refused before any Spark job, naming the known ones."""
    monkeypatch.delenv("TWOPHASE_BENCH_COLLECT_PLANS", raising=False)
    assert bench._collect_plans() == bench.COLLECT_PLANS
    monkeypatch.setenv("TWOPHASE_BENCH_COLLECT_PLANS", "gathered")
    assert bench._collect_plans() == ("gathered",)
    monkeypatch.setenv("TWOPHASE_BENCH_COLLECT_PLANS", "gathered,sideways")
    with pytest.raises(ValueError, match="sideways"):
        bench._collect_plans()
