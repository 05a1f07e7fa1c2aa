"""The runtime's lingering cleanup (#25): what a restore's caller holds is kept only while the
restore runs, whatever it raised; retained checkpoints' committables are never aborted; only the
cleanup after an epoch is routine (#29's soak)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.clock import ManualClock
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness, batch
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.checkpoint.driver_fence import DriverFence
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS
from twophase.coordinator.run.lingering_cleanup import LingeringCleanup
from twophase.coordinator.state.metrics import SinkMetricsRecorder
from twophase.coordinator.state.payload import payload_bytes
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import DriverFencedError


def cleanup() -> LingeringCleanup:
    storage = InMemoryCheckpointStorage("job")
    return LingeringCleanup("job", CompletedCheckpointStore("job", storage), SinkMetricsRecorder())


def test_what_a_restore_holds_is_kept_only_during_the_restore() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    kept = FakeCommittable("job-s-c1-p0-a0", 1, 0, 1)
    c = cleanup()
    with pytest.raises(RuntimeError), c.holding_for_restore({"s": [payload_bytes(sink.encode(kept))]}):
        assert tuple(c.held(sink, None).scope("job", "s", ALL_CHECKPOINTS).held) == (kept,)
        raise RuntimeError("the restore failed")
    assert tuple(c.held(sink, None).scope("job", "s", ALL_CHECKPOINTS).held) == ()


def test_an_abort_with_nothing_held_aborts_what_the_sink_left_open() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    system.begin("job-s-c1-p0-a0", "job", "s", 1)
    assert cleanup().abort(sink, ALL_CHECKPOINTS, None) == 1
    assert system.aborted == {"job-s-c1-p0-a0"}


class RecordingSink(FakeSink):
    """A FakeSink that records, per lingering cleanup, whether it was routine."""

    def __init__(self, name: str, system: FakeExternalSystem) -> None:
        super().__init__(name, system)
        self.routine: list[bool] = []

    def abort_lingering(self, scope: LingeringScope[FakeCommittable]) -> int:
        self.routine.append(scope.routine)
        return super().abort_lingering(scope)


@pytest.mark.parametrize(
    "end",
    [
        lambda h: h.runtime.finish(),
        lambda h: h.runtime.stop_with_savepoint(drain=True),
        lambda h: h.runtime.stop_with_savepoint(drain=False),
        lambda h: h.runtime.stop(),
        lambda h: h.runtime.cancel(),
        lambda h: h.restart_process(),
    ],
    ids=["finish", "savepoint-drain", "savepoint", "stop", "cancel", "restore"],
)
def test_only_the_cleanup_after_an_epoch_is_routine_every_end_of_a_run_is_not(
    end: Callable[[TwoPhaseHarness], object],
) -> None:
    """A sink may put a routine cleanup off (LingeringScope.routine: the Delta and Iceberg sinks
    list their tables only now and then), so every end of a run must make one that is not."""
    sink = RecordingSink("s", FakeExternalSystem())
    h = TwoPhaseHarness([sink])
    h.restore()
    assert sink.routine == [False]  # the restore's
    h.write_epoch([[batch(["a"])]], source_position={"n": 1})
    h.write_epoch([[batch(["b"])]], source_position={"n": 2})
    assert sink.routine == [False, True, True]
    end(h)
    assert sink.routine[3:] and not sink.routine[-1]


def test_a_sweep_lists_the_retained_checkpoints_once_and_checks_the_fence_as_its_bound_needs() -> None:
    """#42: the routine sweep after an epoch listed the driver fence's directory and the retained
    checkpoints once per sink; now the retained checkpoints once per sweep, and the fence once for
    a routine sweep (bounded by this driver's own checkpoint) but before each sink for one that is
    not (a restore's covers every id: a newer driver may claim between two sinks). A driver fenced
    before the sweep still aborts nothing of any sink (DESIGN.md §12, "Checked before each sink of
    a sweep")."""
    clock = ManualClock()
    storage = InMemoryCheckpointStorage("job")
    listings = {"driver_epochs": 0, "list_checkpoints": 0}
    for name in listings:
        real = getattr(storage, name)

        def counted(real: Callable[[], object] = real, name: str = name) -> object:
            listings[name] += 1
            return real()

        setattr(storage, name, counted)
    fence = DriverFence("job", storage, clock)
    fence.claim()
    c = LingeringCleanup("job", CompletedCheckpointStore("job", storage), SinkMetricsRecorder(), fence)
    system = FakeExternalSystem()
    sinks = [FakeSink(f"s{i}", system) for i in range(3)]
    for s in sinks:
        system.begin(f"job-{s.name}-c1-p0-a0", "job", s.name, 1)
    before = dict(listings)
    assert c.sweep(sinks, 1, None, routine=True) == {"s0": 1, "s1": 1, "s2": 1}
    assert {k: listings[k] - before[k] for k in listings} == {"driver_epochs": 1, "list_checkpoints": 1}
    for s in sinks:
        system.begin(f"job-{s.name}-c1-p1-a0", "job", s.name, 1)
    before = dict(listings)
    assert c.sweep(sinks, ALL_CHECKPOINTS, None) == {"s0": 1, "s1": 1, "s2": 1}
    assert {k: listings[k] - before[k] for k in listings} == {"driver_epochs": 3, "list_checkpoints": 1}

    for s in sinks:
        system.begin(f"job-{s.name}-c2-p0-a0", "job", s.name, 2)
    DriverFence("job", storage, clock).claim()  # a newer driver
    with pytest.raises(DriverFencedError):
        c.sweep(sinks, ALL_CHECKPOINTS, None)
    assert len(system.aborted) == 6 and len(system.lingering()) == 3  # the stale sweep aborted nothing
