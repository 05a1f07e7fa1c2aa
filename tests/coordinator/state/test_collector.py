"""The cyclic garbage collector is paused for the driver's bulk passes and only for them (issue
#29): ``collector.paused`` restores the state it found, and an epoch's acknowledgement intake
runs inside it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness
from support.runtime_scenarios import data, expected, pos

from twophase.coordinator.state import collector
from twophase.sinks.context import JsonObject


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_disables_then_enables() -> None:
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_nests_and_restores_after_an_error() -> None:
    with pytest.raises(RuntimeError), collector.paused():
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause did not enable it under the outer one
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_paused_keeps_a_users_disabled_collector_disabled() -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


class WatchingSink(FakeSink):
    """A fake sink noting whether the collector ran while each committable was decoded."""

    def __init__(self, name: str, system: FakeExternalSystem) -> None:
        super().__init__(name, system)
        self.enabled_at_decode: list[bool] = []

    def decode(self, payload: JsonObject) -> FakeCommittable:
        self.enabled_at_decode.append(gc.isenabled())
        return super().decode(payload)


def test_the_intake_decodes_nothing_and_commits_decode_with_the_collector_on() -> None:
    system = FakeExternalSystem()
    sink = WatchingSink("k", system)
    h = TwoPhaseHarness([sink], job_id="paused-intake")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))  # run_epoch: Epoch.acknowledge_all
    # one decode per partition, and none at the intake (issue #42): the committer's, which runs
    # with the collector on (a sink's commit is user code)
    assert sink.enabled_at_decode == [True, True]
    assert gc.isenabled()
    assert system.committed_records() == expected([1])
