"""Batch commit (#42 item 3): one ``commit_batch`` call per sink and checkpoint, outcomes per
transaction, the ``RETRY`` ones retried as a smaller batch, partial batches reported as they are,
and the committed marker only once every transaction is confirmed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from support.clock import ManualClock
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness, batch

from twophase.coordinator.commit.commit_calls import CommitCall
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.sinks.api import commit_each
from twophase.sinks.errors import CommitFailedError, ServiceUnavailableError, TransactionLostError
from twophase.sinks.outcome import CommitOutcome, checked_outcomes


class BatchSink(FakeSink):
    """A fake sink that records every ``commit_batch`` call; ``answer`` may replace its outcomes."""

    def __init__(self, name: str, system: FakeExternalSystem) -> None:
        super().__init__(name, system)
        self.batches: list[list[str]] = []
        self.answer: Any = None

    def commit_batch(self, committables: Sequence[FakeCommittable]) -> list[CommitOutcome]:
        self.batches.append([c.txn_id for c in committables])
        outcomes = super().commit_batch(committables)
        return self.answer if self.answer is not None else outcomes

    def recover_and_commit_batch(self, committables: Sequence[FakeCommittable]) -> list[CommitOutcome]:
        return self.commit_batch(committables)


def txn(
    system: FakeExternalSystem, txn_id: str, partition: int, checkpoint: int = 1
) -> PendingTransaction[Any]:
    system.begin(txn_id, "job", "s", checkpoint)
    system.prepared[txn_id] = [*system.open.pop(txn_id), txn_id]
    return PendingTransaction(
        "s", partition, 0, checkpoint, FakeCommittable(txn_id, checkpoint, partition, 1), 0
    )


def batch_of(
    n: int, **scripted: Sequence[CommitOutcome]
) -> tuple[FakeExternalSystem, BatchSink, list[PendingTransaction[Any]]]:
    """A batch sink over a new system holding ``n`` prepared transactions ``t0``…, one per
    partition; each transaction named in ``scripted`` answers those outcomes first."""
    system = FakeExternalSystem()
    sink = BatchSink("s", system)
    txns = [txn(system, f"t{p}", p) for p in range(n)]
    for txn_id, outcomes in scripted.items():
        system.script(txn_id, *outcomes)
    return system, sink, txns


def operator(sink: FakeSink, policy: CommitPolicy | None = None) -> CommitterOperator:
    clock = ManualClock()
    return CommitterOperator("job", {sink.name: sink}, policy, clock=clock, sleep=clock.sleep)


def ids(calls: Sequence[CommitCall]) -> list[list[str]]:
    return [[t.committable.txn_id for t in call] for call in calls]


def test_one_batch_per_sink_and_checkpoint_in_checkpoint_order() -> None:
    system = FakeExternalSystem()
    sink = BatchSink("s", system)
    txns = [txn(system, f"c{c}p{p}", p, c) for c in (1, 2) for p in range(3)]
    landed: list[str] = []
    c = operator(sink)
    c.submit(txns, on_landed=lambda: landed.append("marker"))
    assert sink.batches == [["c1p0", "c1p1", "c1p2"], ["c2p0", "c2p1", "c2p2"]]
    assert landed == ["marker"]
    assert [t.committable.txn_id for t in c.poll_completed()] == [t.committable.txn_id for t in txns]
    assert c.metrics.committed == 6


def test_the_retry_rows_of_a_partial_batch_are_retried_alone_then_the_marker() -> None:
    system, sink, txns = batch_of(4)
    system.committed["t3"] = system.prepared.pop("t3")  # committed before a crash
    system.script("t1", CommitOutcome.RETRY, CommitOutcome.RETRY)
    system.script("t2", CommitOutcome.RETRY)
    landed: list[str] = []
    c = operator(sink)
    c.submit(txns, on_landed=lambda: landed.append("marker"))
    assert sink.batches == [["t0", "t1", "t2", "t3"], ["t1", "t2"], ["t1"]]
    assert set(system.committed) == {"t0", "t1", "t2", "t3"}
    assert landed == ["marker"]
    m = c.metrics
    assert (m.committed, m.already_committed, m.retries) == (3, 1, 2)


def test_a_failed_row_fails_the_call_but_what_committed_is_confirmed_and_no_marker() -> None:
    _, sink, txns = batch_of(3, t1=[CommitOutcome.FATAL], t2=[CommitOutcome.RETRY])
    landed: list[str] = []
    c = operator(sink)
    with pytest.raises(CommitFailedError, match=r"FATAL.*partition 1 .*t1"):
        c.submit(txns, on_landed=lambda: landed.append("marker"))
    assert sink.batches == [["t0", "t1", "t2"]]  # after an error nothing new starts
    assert landed == []
    assert [t.committable.txn_id for t in c.poll_completed()] == ["t0"]  # dropped: never


def test_lost_rows_fail_outside_recovery_and_name_each_one() -> None:
    system, sink, txns = batch_of(3, t0=[CommitOutcome.LOST], t2=[CommitOutcome.LOST])
    landed: list[str] = []
    with pytest.raises(TransactionLostError, match="2 transactions lost") as raised:
        operator(sink).submit(txns, on_landed=lambda: landed.append("marker"))
    assert "t0" in str(raised.value) and "t2" in str(raised.value) and landed == []
    assert set(system.committed) == {"t1"}


def test_lost_rows_on_recovery_opted_in_are_skipped_and_the_others_commit() -> None:
    system, sink, txns = batch_of(3, t0=[CommitOutcome.LOST], t2=[CommitOutcome.RETRY])
    c = operator(sink, CommitPolicy(ignore_lost_on_recovery=True))
    done: list[CommitCall] = []
    c.commit_all(txns, recovery=True, on_done=done.append)
    assert sink.batches == [["t0", "t1", "t2"], ["t2"]]
    assert set(system.committed) == {"t1", "t2"} and ids(done) == [["t1", "t2"]]
    assert c.metrics.lost_ignored == 1


@pytest.mark.parametrize(
    "answer",
    [
        [CommitOutcome.COMMITTED],  # a row dropped
        [CommitOutcome.COMMITTED] * 3,  # a row too many
        [CommitOutcome.COMMITTED, "committed"],  # not typed
        CommitOutcome.COMMITTED,  # not a list
    ],
)
def test_outcomes_that_do_not_match_the_batch_confirm_nothing(answer: Any) -> None:
    _, sink, txns = batch_of(2)
    sink.answer = answer
    landed: list[str] = []
    c = operator(sink)
    with pytest.raises(CommitFailedError, match="commit_batch"):
        c.submit(txns, on_landed=lambda: landed.append("marker"))
    assert landed == [] and c.poll_completed() == []


def test_a_batch_that_cannot_reach_the_service_is_retried_whole() -> None:
    system = FakeExternalSystem()
    refusals = [ServiceUnavailableError("down")]

    class Flaky(BatchSink):
        def commit_batch(self, committables: Sequence[FakeCommittable]) -> list[CommitOutcome]:
            if refusals:
                self.batches.append([])
                raise refusals.pop()
            return super().commit_batch(committables)

    sink = Flaky("s", system)
    txns = [txn(system, f"t{p}", p) for p in range(2)]
    operator(sink).submit(txns)
    assert sink.batches == [[], ["t0", "t1"]] and set(system.committed) == {"t0", "t1"}


def test_asynchronous_batches_mark_only_after_every_row_landed() -> None:
    system, sink, txns = batch_of(3, t2=[CommitOutcome.RETRY])
    landed: list[str] = []
    c = operator(sink, CommitPolicy(async_commit=True))
    try:
        c.submit(txns, on_landed=lambda: landed.append(",".join(sorted(system.committed))))
        c.drain(60)
    finally:
        c.shutdown()
    assert landed == ["t0,t1,t2"]


def test_the_default_commit_batch_loops_commit_up_to_the_concurrency() -> None:
    seen: list[str] = []

    def commit(c: str) -> CommitOutcome:
        seen.append(c)
        if c == "down":
            raise ServiceUnavailableError("unreachable")
        return CommitOutcome.COMMITTED

    assert commit_each(commit, ["a", "down", "b"]) == [
        CommitOutcome.COMMITTED,
        CommitOutcome.RETRY,  # as the committer counts a single commit's ServiceUnavailableError
        CommitOutcome.COMMITTED,
    ]
    assert commit_each(commit, ["x", "y", "z"], concurrency=3) == [CommitOutcome.COMMITTED] * 3
    assert sorted(seen) == ["a", "b", "down", "x", "y", "z"]


def test_checked_outcomes_names_what_is_wrong() -> None:
    assert checked_outcomes((CommitOutcome.LOST,), 1) == [CommitOutcome.LOST]
    with pytest.raises(ValueError, match="1 outcomes for 2 committables"):
        checked_outcomes([CommitOutcome.LOST], 2)
    with pytest.raises(ValueError, match="outcome 0 is 'lost'"):
        checked_outcomes(["lost"], 1)
    with pytest.raises(ValueError, match="returned str"):
        checked_outcomes("lost", 4)


def test_the_runtime_commits_each_sink_once_per_checkpoint_and_a_restore_once_per_sink() -> None:
    """Through the production epoch loop (notification) and a restore (recovery): one
    ``commit_batch`` per sink and checkpoint, with every partition's committable."""
    system = FakeExternalSystem()
    a, b = BatchSink("a", system), BatchSink("b", system)
    h = TwoPhaseHarness([a, b])
    h.restore()
    h.write_epoch([[batch([f"e1p{p}"])] for p in range(3)], source_position={"batch_id": 1})
    assert [len(x) for x in a.batches] == [3] and [len(x) for x in b.batches] == [3]
    h.write_epoch([[batch([f"e2p{p}"])] for p in range(3)], source_position={"batch_id": 2}, notify=False)
    result = h.restart_process()  # the new driver recovers checkpoint 2: one batch per sink
    assert result is not None and result.recommitted == 6
    assert [len(x) for x in a.batches] == [3, 3] and [len(x) for x in b.batches] == [3, 3]
    assert system.committed_records() == sorted(f"e{n}p{p}" for n in (1, 2) for p in range(3) for _ in "ab")
