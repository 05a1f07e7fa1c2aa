"""The runtime's lingering cleanup (#25): what a restore's caller holds is kept only while the
restore runs, whatever it raised; retained checkpoints' committables are never aborted."""

from __future__ import annotations

import pytest
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.lingering import ALL_CHECKPOINTS
from twophase.coordinator.lingering_cleanup import LingeringCleanup
from twophase.coordinator.metrics import SinkMetricsRecorder


def cleanup() -> LingeringCleanup:
    storage = InMemoryCheckpointStorage("job")
    return LingeringCleanup("job", CompletedCheckpointStore("job", storage), SinkMetricsRecorder())


def test_what_a_restore_holds_is_kept_only_during_the_restore() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    kept = FakeCommittable("job-s-c1-p0-a0", 1, 0, 1)
    c = cleanup()
    with pytest.raises(RuntimeError), c.holding_for_restore({"s": [sink.encode(kept)]}):
        assert c.held(sink, None).scope("job", "s", ALL_CHECKPOINTS).held == (kept,)
        raise RuntimeError("the restore failed")
    assert c.held(sink, None).scope("job", "s", ALL_CHECKPOINTS).held == ()


def test_an_abort_with_nothing_held_aborts_what_the_sink_left_open() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    system.begin("job-s-c1-p0-a0", "job", "s", 1)
    assert cleanup().abort(sink, ALL_CHECKPOINTS, None) == 1
    assert system.aborted == {"job-s-c1-p0-a0"}
