"""Failing over while a service is still down: the restore itself fails and is retried."""

from __future__ import annotations

import pytest
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness, batch

from twophase.coordinator.job_lifecycle import JobState
from twophase.coordinator.restart import RestartStrategy
from twophase.coordinator.restart_loop import fail_over, finish_with_restarts
from twophase.coordinator.runtime_config import RuntimeConfig
from twophase.sinks.errors import JobError, ServiceUnavailableError


def harness(restarts: int) -> tuple[TwoPhaseHarness, FakeExternalSystem, list[str]]:
    """A job whose epoch 2 failed after pre-commit (its transaction lingers), and whose external
    system refuses the next ``outages`` aborts (set by the test)."""
    system = FakeExternalSystem()
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(restarts, 0))
    h = TwoPhaseHarness([FakeSink("k", system)], config=cfg)
    h.restore()
    h.write_epoch([[batch(["a"])]])
    epoch = h.write_epoch([[batch(["b"])]], complete=False)
    assert epoch is not None
    refused: list[str] = []
    return h, system, refused


def test_a_restore_that_fails_while_the_service_is_down_is_retried_by_the_strategy() -> None:
    """Found by the fault suite (broker killed mid-write): the restore's lingering cleanup met the
    broker still down, and the streaming job died instead of failing over again."""
    h, system, refused = harness(restarts=5)
    outage = [2]

    def abort(txn_id: str) -> None:
        if outage[0] > 0:
            outage[0] -= 1
            refused.append(txn_id)
            raise ServiceUnavailableError("brokers stopped answering")

    system.abort_hook = abort
    fail_over(h.runtime, RuntimeError("a task failed"))
    assert h.runtime.state is JobState.RUNNING
    assert len(refused) == 2 and system.lingering() == set()
    h.write_epoch([[batch(["b"])]])
    h.runtime.finish()
    assert sorted(r for recs in system.committed.values() for r in recs) == ["a", "b"]


def test_failing_over_gives_up_when_the_strategy_is_exhausted() -> None:
    h, system, _ = harness(restarts=2)

    def abort(txn_id: str) -> None:
        raise ServiceUnavailableError("brokers stopped answering")

    system.abort_hook = abort
    with pytest.raises(JobError, match="restart strategy exhausted"):
        fail_over(h.runtime, RuntimeError("a task failed"))
    assert h.runtime.state is JobState.FAILED


def test_a_finish_whose_lingering_cleanup_fails_fails_over_and_finishes() -> None:
    """Found by the fault suite (broker killed during the final checkpoint): the final checkpoint
    committed, its lingering cleanup met the broker down, and the streaming job died. It fails
    over (restored from the final checkpoint) and finishes with nothing left to do."""
    system = FakeExternalSystem()
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(5, 0), abort_lingering_each_epoch=False)
    h = TwoPhaseHarness([FakeSink("k", system)], config=cfg)
    h.restore()
    epoch = h.begin_epoch(1)
    h.run_subtask(epoch, "k", 0, [batch(["a"])])
    h.run_subtask(epoch, "k", 0, [batch(["a"])], attempt=1, acknowledge=False)  # lingers
    h.complete(epoch)
    outage = [2]

    def abort(txn_id: str) -> None:
        if outage[0] > 0:
            outage[0] -= 1
            raise ServiceUnavailableError("brokers stopped answering")

    system.abort_hook = abort
    finish_with_restarts(h.runtime, None)
    assert h.runtime.state is JobState.FINISHED
    assert system.lingering() == set()
    assert sorted(r for recs in system.committed.values() for r in recs) == ["a"]
