"""A run's checkpoint completion returns the Arrow memory an epoch freed once its checkpoint is
large (issue #42: the driver's high-water mark at 10⁵ subtasks × 3 sinks)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness
from support.runtime_scenarios import data, expected, pos

from twophase.coordinator.run import run_steps


@pytest.mark.parametrize(("above", "returned"), [(3, 1), (4, 0)])
def test_a_published_checkpoint_above_the_threshold_returns_the_freed_arrow_memory_once(
    monkeypatch: pytest.MonkeyPatch, above: int, returned: int
) -> None:
    calls: list[None] = []
    monkeypatch.setattr(run_steps, "RETURN_FREED_ABOVE", above)
    monkeypatch.setattr(run_steps, "return_freed_arrow_memory", lambda: calls.append(None))
    system = FakeExternalSystem()
    h = TwoPhaseHarness([FakeSink("a", system), FakeSink("b", system)], job_id="release")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))  # 2 partitions × 2 sinks: 4 committables
    assert len(calls) == returned
    assert sorted(system.committed_records()) == sorted(expected([1]) * 2)  # once per sink


def test_returning_the_freed_memory_leaves_the_pools_live_buffers_alone() -> None:
    live = pa.array([b"x" * 1000] * 1000, pa.binary())
    before = pa.default_memory_pool().bytes_allocated()
    run_steps.return_freed_arrow_memory()
    assert pa.default_memory_pool().bytes_allocated() == before
    assert live.to_pylist()[-1] == b"x" * 1000
