"""Property test: random interleavings — concurrent checkpoints, late/lost/out-of-order
notifications, rescaling, and crashes at random fault points followed by restarts in a new
process — always end with every record committed exactly once and nothing lingering."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.fakes import FakeExternalSystem, FakeInProgressSink, FakeSink
from support.harness import SimulatedCrash, TwoPhaseHarness, batch

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.epoch import Epoch
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.faults import POINTS
from twophase.coordinator.state.job_lifecycle import JobState

CRASH_POINTS = sorted(POINTS - {"during_cancel", "during_stop_with_savepoint"})


def pos(n: int) -> dict[str, object]:
    return {"engine": "spark", "query_id": "q", "batch_id": n}


def epoch_data(n: int, parts: int) -> list[list[pa.RecordBatch]]:
    return [[batch([f"e{n}p{p}r{r}" for r in range(p + 1)])] for p in range(parts)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_interleavings_are_exactly_once(data: st.DataObject) -> None:
    spec = data.draw(st.sampled_from([("k",), ("f",), ("k", "f"), ("k1", "k2", "f1")]), label="sinks")
    max_conc = data.draw(st.integers(1, 3), label="max_concurrent")
    retained = data.draw(st.integers(1, 3), label="retained")
    n_epochs = data.draw(st.integers(1, 5), label="epochs")
    parts = {n: data.draw(st.integers(1, 3), label=f"partitions[{n}]") for n in range(1, n_epochs + 1)}
    crashes = data.draw(
        st.lists(st.tuples(st.sampled_from(CRASH_POINTS), st.integers(1, 3)), max_size=2), label="crashes"
    )
    system = FakeExternalSystem()
    sinks = [
        FakeInProgressSink(s, system, roll_records=data.draw(st.integers(1, 4), label="roll"))
        if s.startswith("f")
        else FakeSink(s, system)
        for s in spec
    ]
    cfg = RuntimeConfig(
        checkpoint=CheckpointConfig(max_concurrent_checkpoints=max_conc, retained_checkpoints=retained)
    )
    h = TwoPhaseHarness(sinks, config=cfg)
    h.restore()
    pending_crashes = list(crashes)
    if pending_crashes:
        h.crash_at(*pending_crashes.pop(0))
    for _ in range(len(crashes) + 1):
        try:
            pending: list[Epoch] = []
            for n in range(1, n_epochs + 1):
                if not pending and h.runtime.replay_check(pos(n)):
                    continue
                pending.append(h.write_epoch(epoch_data(n, parts[n]), source_position=pos(n), complete=False))
                while pending and (
                    len(pending) >= max_conc or data.draw(st.booleans(), label="complete now")
                ):
                    h.complete(pending.pop(0), notify=data.draw(st.booleans(), label="notify"))
                    done = sorted(h.runtime.coordinator.completed_ids)
                    late: bool = bool(done) and data.draw(st.booleans(), label="late notify")
                    if late:
                        h.notify(data.draw(st.sampled_from(done), label="late id"))
            for e in pending:
                h.complete(e, notify=data.draw(st.booleans(), label="notify last"))
            h.runtime.finish()
            break
        except SimulatedCrash as crash:
            event(f"crash at {crash.point}")
            h.restart_process()
            if pending_crashes:
                h.crash_at(*pending_crashes.pop(0))
    else:  # every armed crash fired and the last run did not finish: one clean run
        h.faults.disarm()
        for n in range(1, n_epochs + 1):
            if not h.runtime.replay_check(pos(n)):
                h.write_epoch(epoch_data(n, parts[n]), source_position=pos(n))
        h.runtime.finish()
    assert h.runtime.state is JobState.FINISHED
    want = sorted(f"e{n}p{p}r{r}" for n in parts for p in range(parts[n]) for r in range(p + 1))
    for s in spec:
        got = sorted(r for t, recs in system.committed.items() if t.startswith(s + "-") for r in recs)
        assert got == want, s
    assert system.lingering() == set()
    assert system.violations == []
