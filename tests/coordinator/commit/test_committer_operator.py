"""The committer: outcomes, retries (tenacity), LOST only ignored on recovery when opted in,
pending-transaction age warnings, ordered asynchronous commit, metrics."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from support.clock import ManualClock
from support.fakes import (
    FakeCheckpointSink,
    FakeCommittable,
    FakeExternalSystem,
    FakeSink,
)
from support.polling import eventually

from twophase.coordinator.commit.commit_calls import CommitCall, commit_calls
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.sinks.errors import (
    CommitFailedError,
    ConfigError,
    ServiceUnavailableError,
    TransactionLostError,
)
from twophase.sinks.outcome import CommitOutcome


def prepared(system: FakeExternalSystem, txn_id: str, t_ms: int = 0) -> PendingTransaction[FakeCommittable]:
    system.begin(txn_id, "job", "s", 1)
    system.prepared[txn_id] = [*system.open.pop(txn_id), txn_id]
    return PendingTransaction("s", 0, 0, 1, FakeCommittable(txn_id, 1, 0, 1), t_ms)


def committer(
    *sinks: FakeSink, policy: CommitPolicy | None = None, clock: ManualClock | None = None
) -> CommitterOperator:
    clock = clock or ManualClock()
    return CommitterOperator("job", {s.name: s for s in sinks}, policy, clock=clock, sleep=clock.sleep)


def test_commit_and_recommit() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    c = committer(sink)
    t = prepared(system, "t1")
    assert c.commit([t]) is CommitOutcome.COMMITTED
    assert c.commit([t], recovery=True) is CommitOutcome.ALREADY_COMMITTED
    assert set(system.committed) == {"t1"}
    m = c.metrics
    assert (m.committed, m.already_committed, m.aborted) == (1, 1, 0)


def test_retry_with_backoff_then_commit() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    clock = ManualClock()
    c = committer(
        sink, policy=CommitPolicy(max_attempts=5, initial_backoff_ms=100, max_backoff_ms=1000), clock=clock
    )
    t = prepared(system, "t1")
    system.script("t1", CommitOutcome.RETRY, CommitOutcome.RETRY, CommitOutcome.RETRY)
    start = clock()
    assert c.commit([t]) is CommitOutcome.COMMITTED
    assert system.commit_calls == ["t1"] * 4
    assert clock() - start == 100 + 200 + 400  # exponential backoff, slept on the injected clock
    assert c.metrics.retries == 3


def test_service_unavailable_counts_as_retry() -> None:
    system = FakeExternalSystem()
    t = prepared(system, "t1")
    calls = []

    class Flaky(FakeSink):
        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            calls.append(1)
            if len(calls) < 3:
                raise ServiceUnavailableError("broker down")
            return super().commit(committable)

    c = committer(Flaky("s", system), policy=CommitPolicy(max_attempts=3))
    assert c.commit([t]) is CommitOutcome.COMMITTED


def test_retry_budget_exhausted_fails() -> None:
    system = FakeExternalSystem()
    c = committer(FakeSink("s", system), policy=CommitPolicy(max_attempts=3))
    t = prepared(system, "t1")
    system.script("t1", *[CommitOutcome.RETRY] * 5)
    with pytest.raises(CommitFailedError, match="past the retry budget"):
        c.commit([t])
    assert system.commit_calls == ["t1"] * 3
    assert set(system.committed) == set()


def test_fatal_fails() -> None:
    system = FakeExternalSystem()
    t = prepared(system, "t1")
    system.script("t1", CommitOutcome.FATAL)
    with pytest.raises(CommitFailedError, match="FATAL"):
        committer(FakeSink("s", system)).commit([t])


def test_sink_exception_becomes_commit_failed() -> None:
    class Broken(FakeSink):
        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            raise KeyError("bug")

    system = FakeExternalSystem()
    with pytest.raises(CommitFailedError, match="raised"):
        committer(Broken("s", system)).commit([prepared(system, "t1")])


@pytest.mark.parametrize("opted_in", [False, True])
def test_lost_during_normal_commit_always_fails(opted_in: bool) -> None:
    system = FakeExternalSystem()
    t = prepared(system, "t1")
    system.script("t1", CommitOutcome.LOST)
    c = committer(FakeSink("s", system), policy=CommitPolicy(ignore_lost_on_recovery=opted_in))
    with pytest.raises(TransactionLostError, match=r"sink 's'.*t1"):
        c.commit([t])


def test_lost_during_recovery_fails_unless_opted_in(caplog: pytest.LogCaptureFixture) -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    t = prepared(system, "t1")
    system.script("t1", CommitOutcome.LOST)
    with pytest.raises(TransactionLostError, match="t1"):
        committer(sink).commit([t], recovery=True)
    c = committer(sink, policy=CommitPolicy(ignore_lost_on_recovery=True))
    with caplog.at_level(logging.ERROR, logger="twophase.coordinator.commit.committer_operator"):
        assert c.commit([t], recovery=True) is CommitOutcome.LOST
    assert any("LOST on recovery" in r.message and "t1" in r.message for r in caplog.records)
    assert c.metrics.lost_ignored == 1
    assert set(system.committed) == set()
    assert system.aborted == {"t1"}


def test_a_recovery_names_every_lost_transaction_and_commits_the_others() -> None:
    """Issue #16 case 5: after the driver was down past the transaction timeout, the restart names
    every lost transaction (not only the first), says the way forward, and still commits the rest."""
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    txns = [prepared(system, t) for t in ("t1", "t2", "t3")]
    system.script("t1", CommitOutcome.LOST)
    system.script("t3", CommitOutcome.LOST)
    with pytest.raises(TransactionLostError) as raised:
        committer(sink).commit_all(txns, recovery=True)
    message = str(raised.value)
    assert message.startswith("2 transactions lost") and "t1" in message and "t3" in message
    assert message.count("ignore_lost_on_recovery=True") == 1
    assert set(system.committed) == {"t2"}


def test_pending_transaction_warns_once_at_80_percent_of_timeout(caplog: pytest.LogCaptureFixture) -> None:
    system = FakeExternalSystem()
    clock = ManualClock()
    c = committer(policy=CommitPolicy(transaction_timeout_ms=10_000), clock=clock)
    t = prepared(system, "t1", t_ms=clock())
    with caplog.at_level(logging.WARNING, logger="twophase.coordinator.commit.committer_operator"):
        clock.advance(7_999)
        assert c.ages.check([t]) == []
        clock.advance(1)
        assert c.ages.check([t]) == [t]
        clock.advance(1_000)
        assert c.ages.check([t]) == []  # warned once
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "near its timeout" in warnings[0].message and "age_ms=8000" in warnings[0].message
    assert vars(warnings[0])["sink"] == "s"  # a structured field of the record


def test_no_age_warnings_without_a_timeout() -> None:
    system = FakeExternalSystem()
    clock = ManualClock()
    c = committer(policy=CommitPolicy(), clock=clock)
    t = prepared(system, "t1")
    clock.advance(10**9)
    assert c.ages.check([t]) == []


def test_abort_and_recover_and_abort() -> None:
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    c = committer(sink)
    c.abort(prepared(system, "t1"))
    c.abort(prepared(system, "t2"), recovery=True)
    assert system.aborted == {"t1", "t2"}
    assert c.metrics.aborted == 2


def test_async_commit_is_ordered_and_surfaces_errors_on_the_next_call() -> None:
    system = FakeExternalSystem()
    gate = threading.Event()

    class Slow(FakeSink):
        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            gate.wait(60)
            return super().commit(committable)

    sink = Slow("s", system)
    c = committer(sink, policy=CommitPolicy(async_commit=True, max_attempts=1))
    t1, t2, t3 = (prepared(system, f"t{i}") for i in (1, 2, 3))
    c.submit([t1, t2])
    c.submit([t3])
    assert c.busy  # the commits overlap whatever the caller does next
    gate.set()
    c.drain(60)
    assert system.commit_calls == ["t1", "t2", "t3"]
    assert [t.committable.txn_id for t in c.poll_completed()] == ["t1", "t2", "t3"]
    t4, t5 = prepared(system, "t4"), prepared(system, "t5")
    system.script("t4", CommitOutcome.FATAL)
    c.submit([t4])
    c.submit([t5])  # may or may not see the error yet
    with pytest.raises(CommitFailedError, match="FATAL"):
        c.drain(60)
    with pytest.raises(CommitFailedError):
        c.submit([])  # the error stays raised
    assert "t5" not in system.committed  # after an error later commits are skipped: order is kept
    c.shutdown()


def test_by_default_a_large_commit_goes_to_the_committer_thread_and_every_later_one_follows() -> None:
    """#42 item 3: ``async_commit=None`` (the default) commits small checkpoints at once and one of
    more than ``async_commit_above`` transactions on the committer thread; a small one after it
    queues behind it, so that checkpoints still commit in order."""
    assert CommitPolicy().async_commit is None
    system = FakeExternalSystem()
    gate = threading.Event()

    class Slow(FakeSink):
        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            if committable.txn_id != "t1":
                gate.wait(60)
            return super().commit(committable)

    c = committer(Slow("s", system), policy=CommitPolicy(async_commit_above=2, max_attempts=1))
    t1, t2, t3, t4, t5 = (prepared(system, f"t{i}") for i in range(1, 6))
    c.submit([t1])
    assert system.committed == {"t1": ["t1"]} and not c.asynchronous  # at once: 1 is not above 2
    c.submit([t2, t3, t4])
    assert c.asynchronous and c.busy  # 3 is above 2: queued, overlapping what the caller does next
    c.submit([t5])  # small, but behind a queued batch
    assert c.busy and "t5" not in system.committed
    gate.set()
    c.drain(60)
    assert system.commit_calls == ["t1", "t2", "t3", "t4", "t5"]
    c.shutdown()


def test_async_commit_says_always_or_never_whatever_the_size() -> None:
    assert CommitPolicy(async_commit=True).commits_async(1)
    assert not CommitPolicy(async_commit=False).commits_async(10**6)
    assert not CommitPolicy().commits_async(128) and CommitPolicy().commits_async(129)
    with pytest.raises(ConfigError, match="async_commit_above must be >= 1"):
        CommitPolicy(async_commit_above=0)


def test_on_landed_runs_on_the_thread_that_lands_the_batch_and_never_after_a_failure() -> None:
    """#26 item 2: the committed marker follows the commit onto the committer thread."""
    system = FakeExternalSystem()
    sink = FakeSink("s", system)
    c = committer(sink, policy=CommitPolicy(async_commit=True, max_attempts=1))
    landed: list[tuple[str, list[str]]] = []

    def on_landed() -> None:
        landed.append((threading.current_thread().name, sorted(system.committed)))

    t1, t2 = prepared(system, "t1"), prepared(system, "t2")
    c.submit([t1, t2], on_landed=on_landed)
    c.submit([], on_landed=on_landed)  # nothing new: lands once the earlier batch did
    assert eventually(lambda: not c.busy, timeout_s=60, every_s=0.001)
    assert [commits for _, commits in landed] == [["t1", "t2"], ["t1", "t2"]]
    assert all(name.startswith("committer-job") for name, _ in landed)
    t3, t4 = prepared(system, "t3"), prepared(system, "t4")
    system.script("t3", CommitOutcome.FATAL)
    c.submit([t3], on_landed=on_landed)
    c.submit([t4], on_landed=on_landed)
    with pytest.raises(CommitFailedError):
        c.drain(60)
    assert len(landed) == 2  # neither the failed batch nor the skipped one after it
    c.shutdown()
    sync = committer(sink)
    t5 = prepared(system, "t5")
    sync.submit([t5], on_landed=on_landed)
    assert landed[-1] == (threading.current_thread().name, ["t1", "t2", "t5"])


def test_bad_policy_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        CommitPolicy(max_attempts=0)
    with pytest.raises(ConfigError):
        CommitPolicy(timeout_warning_ratio=1.5)
    with pytest.raises(ConfigError):
        CommitPolicy(initial_backoff_ms=10, max_backoff_ms=1)


def _pending(
    system: FakeExternalSystem, sink: str, txn_id: str, checkpoint: int = 1
) -> PendingTransaction[Any]:
    system.begin(txn_id, "job", sink, checkpoint)
    system.prepared[txn_id] = [*system.open.pop(txn_id), txn_id]
    return PendingTransaction(sink, 0, 0, checkpoint, FakeCommittable(txn_id, checkpoint, 0, 1), 0)


def test_commit_calls_per_sink_in_checkpoint_order_and_concurrency_refused_before_any_commit() -> None:
    system = FakeExternalSystem()
    a, b, d = FakeSink("a", system), FakeSink("b", system), FakeCheckpointSink("d", system)
    b.commit_concurrency = 4
    d.commit_concurrency = 4  # ignored: checkpoints commit one after another
    # b's concurrency applies within one batch (its default commit_batch), not across checkpoints
    sinks = {s.name: s for s in (a, b, d)}
    txns = [
        _pending(system, "a", "a1"),
        _pending(system, "b", "b1"),
        _pending(system, "d", "d1", 1),
        _pending(system, "a", "a2"),
        _pending(system, "d", "d2", 2),
        _pending(system, "b", "b2", 2),
    ]
    calls = commit_calls(sinks, txns)  # one lane per sink, as the committer runs them
    assert {name: [[t.committable.txn_id for t in call] for call in cs] for name, cs in calls.items()} == {
        "a": [["a1", "a2"]],  # one checkpoint: one batch
        "b": [["b1"], ["b2"]],
        "d": [["d1"], ["d2"]],
    }
    assert list(calls) == ["a", "b", "d"]  # the sinks in the order of their first transactions
    assert commit_calls(sinks, []) == {}
    # a sink declaring no concurrency is refused before any sink commits anything
    a.commit_concurrency = 0
    with pytest.raises(ConfigError, match="commit_concurrency"):
        committer(a, b, d).commit_all(txns)
    assert system.committed == {} and system.checkpoint_calls == []
    a.commit_concurrency = 1
    committer(a, b, d).commit_all(txns)
    assert [c.checkpoint_id for c in system.checkpoint_calls] == [1, 2]  # d's in checkpoint order
    assert set(system.committed) == {"a1", "a2", "b1", "b2", "d1", "d2"}


def _overlap_sink(name: str, system: FakeExternalSystem, parties: int) -> tuple[FakeSink, list[str]]:
    """A sink whose commits wait until ``parties`` commits run at the same time (or 60 s: room
    for a loaded machine, #45 item 7)."""
    barrier = threading.Barrier(parties, timeout=60)
    seen: list[str] = []

    class Overlapping(FakeSink):
        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            try:
                barrier.wait()
                seen.append("together")
            except threading.BrokenBarrierError:
                seen.append("alone")
            return super().commit(committable)

    return Overlapping(name, system), seen


def test_commit_all_runs_sinks_and_independent_committables_concurrently() -> None:
    system = FakeExternalSystem()
    s3like, seen = _overlap_sink("s", system, parties=3)
    s3like.commit_concurrency = 3
    done: list[CommitCall] = []
    committer(s3like).commit_all([_pending(system, "s", f"s{i}") for i in range(3)], on_done=done.append)
    assert seen == ["together"] * 3  # all three were in commit() at once
    assert set(system.committed) == {"s0", "s1", "s2"}
    assert [t.committable.txn_id for call in done for t in call] == ["s0", "s1", "s2"]  # one batch

    # two sinks of parallelism 1 (one lane each): their commits run at the same time
    system = FakeExternalSystem()
    barrier = threading.Barrier(2, timeout=60)
    together: list[str] = []

    class Lane(FakeSink):
        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            barrier.wait()
            together.append(committable.txn_id)
            return super().commit(committable)

    x, y = Lane("x", system), Lane("y", system)
    committer(x, y).commit_all([_pending(system, "x", "x1"), _pending(system, "y", "y1")])
    assert sorted(together) == ["x1", "y1"]


def test_commit_all_keeps_a_sinks_order_and_stops_after_an_error() -> None:
    system = FakeExternalSystem()
    d = FakeCheckpointSink("d", system)
    k = FakeSink("k", system)
    txns = [
        _pending(system, "d", "d1", 1),
        _pending(system, "k", "k1", 1),
        _pending(system, "d", "d2", 2),
        _pending(system, "d", "d3", 3),
    ]
    system.scripted_checkpoints[("d", 2)].append(CommitOutcome.FATAL)
    with pytest.raises(CommitFailedError, match="FATAL"):
        committer(d, k, policy=CommitPolicy(max_attempts=1)).commit_all(txns)
    assert [c.checkpoint_id for c in system.checkpoint_calls] == [1, 2]  # 3 never before 2
    assert "d3" not in system.committed and "d3" in system.prepared  # left for recovery
    assert "k1" not in system.aborted  # the other lane committed it or left it pre-committed
    assert system.violations == []
