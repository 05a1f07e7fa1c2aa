"""Checkpoint-commit sinks (``twophase.sinks.api.CheckpointCommitSink``, like Delta): the runtime commits all
of one sink's transactions of one checkpoint with ONE ``commit_checkpoint`` call, in checkpoint
order, through every path that commits (notify, subsumed notify, restore, replay check, cancel
with DELETE, async commit), with retries, LOST handling and metrics as for per-committable sinks."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest
from support.clock import ManualClock
from support.fakes import (
    CheckpointCommitCall,
    FakeCheckpointSink,
    FakeCommittable,
    FakeExternalSystem,
    FakeInProgressSink,
    FakeSink,
)
from support.harness import TwoPhaseHarness, batch

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit.commit_calls import TxnCall, check_call, commit_calls
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.runtime_config import CleanupMode, RuntimeConfig
from twophase.coordinator.state.faults import POINTS
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.sinks import CheckpointCommitSink
from twophase.sinks.errors import CommitFailedError, JobError, TransactionLostError
from twophase.sinks.outcome import CommitOutcome


def pos(n: int) -> dict[str, object]:
    return {"engine": "spark", "query_id": "q1", "batch_id": n}


def data(n: int, parts: int = 3, per: int = 2) -> list[list[pa.RecordBatch]]:
    return [[batch([f"e{n}p{p}r{r}" for r in range(per)])] for p in range(parts)]


def expected(epochs: Sequence[int], parts: int = 3, per: int = 2) -> list[str]:
    return sorted(f"e{n}p{p}r{r}" for n in epochs for p in range(parts) for r in range(per))


def harness(*spec: str, config: RuntimeConfig | None = None) -> tuple[TwoPhaseHarness, FakeExternalSystem]:
    """Sinks by name: ``g…`` checkpoint-commit, ``f…`` in-progress (rolls at 3), others per-committable."""
    system = FakeExternalSystem()
    sinks = [
        FakeCheckpointSink(n, system)
        if n.startswith("g")
        else FakeInProgressSink(n, system, roll_records=3)
        if n.startswith("f")
        else FakeSink(n, system)
        for n in spec
    ]
    cfg = config or RuntimeConfig(checkpoint=CheckpointConfig(retained_checkpoints=2))
    return TwoPhaseHarness(sinks, config=cfg), system


def call(c: int, parts: int = 3, *, sink: str = "g", recovery: bool = False) -> CheckpointCommitCall:
    return CheckpointCommitCall(sink, c, tuple(f"{sink}-c{c}-p{p}-a0" for p in range(parts)), recovery)


def records_of(system: FakeExternalSystem, sink: str) -> list[str]:
    return sorted(r for t, recs in system.committed.items() if t.startswith(sink + "-") for r in recs)


def clean(system: FakeExternalSystem) -> bool:
    return system.lingering() == set() and system.violations == []


# -- commit calls ------------------------------------------------------------------------------------


def pending(sink: str, c: int, p: int) -> PendingTransaction[FakeCommittable]:
    return PendingTransaction(sink, p, 0, c, FakeCommittable(f"{sink}-c{c}-p{p}-a0", c, p, 1), 0)


def test_commit_calls_group_per_sink_and_checkpoint_keeping_order() -> None:
    system = FakeExternalSystem()
    sinks = {"k": FakeSink("k", system), "g": FakeCheckpointSink("g", system)}
    txns = [pending(s, c, p) for c in (1, 2) for s in ("k", "g") for p in (1, 0)]
    by_sink = commit_calls(sinks, txns)  # per sink (one lane each), each sink's in checkpoint order
    assert list(by_sink) == ["k", "g"]
    calls = [call for name in by_sink for call in by_sink[name]]
    assert [(call[0].sink_name, call[0].checkpoint_id, [t.partition for t in call]) for call in calls] == [
        ("k", 1, [0, 1]),  # one batch per sink and checkpoint (#42 item 3), ascending by partition
        ("k", 2, [0, 1]),
        ("g", 1, [0, 1]),  # one call, ascending by partition
        ("g", 2, [0, 1]),
    ]
    for name, sink_calls in by_sink.items():
        for call in sink_calls:
            check_call(sinks[name], call)
    # each call names its sink and checkpoint, and is its tuple
    assert [(call.sink_name, call.checkpoint_id) for call in calls] == [
        ("k", 1),
        ("k", 2),
        ("g", 1),
        ("g", 2),
    ]
    assert calls[0] == tuple(sorted(txns[:2], key=lambda t: t.partition))
    with pytest.raises(ValueError, match="an empty commit call"):
        TxnCall([])
    assert isinstance(sinks["g"], CheckpointCommitSink) and not isinstance(sinks["k"], CheckpointCommitSink)


def test_a_malformed_commit_call_is_refused() -> None:
    system = FakeExternalSystem()
    k, g = FakeSink("k", system), FakeCheckpointSink("g", system)
    with pytest.raises(ValueError, match="empty"):
        check_call(g, [])
    check_call(k, [pending("k", 1, 0), pending("k", 1, 1)])  # a batch (#42 item 3)
    with pytest.raises(ValueError, match="several checkpoints"):
        check_call(k, [pending("k", 1, 0), pending("k", 2, 1)])
    with pytest.raises(ValueError, match="several checkpoints"):
        check_call(g, [pending("g", 1, 0), pending("g", 2, 1)])
    with pytest.raises(ValueError, match="other sinks"):
        check_call(g, [pending("k", 1, 0)])
    check_call(k, [pending("k", 1, 0)])  # a single transaction
    committer = CommitterOperator("job", {"k": k, "g": g})
    with pytest.raises(ValueError, match="several checkpoints"):
        committer.commit([pending("k", 1, 0), pending("k", 2, 1)])  # checked before any call
    assert system.commit_calls == []


def test_committer_one_call_for_the_group_and_metrics_per_transaction() -> None:
    system = FakeExternalSystem()
    g = FakeCheckpointSink("g", system)
    txns = []
    for p in range(3):
        name = system.begin(f"g-c1-p{p}-a0", "job", "g", 1)
        system.prepared[name] = [name]
        system.open.pop(name)
        txns.append(pending("g", 1, p))
    clock = ManualClock()
    c = CommitterOperator("job", {"g": g}, clock=clock, sleep=clock.sleep)
    c.submit(list(reversed(txns)))
    assert system.checkpoint_calls == [call(1)]
    assert c.poll_completed() == txns  # every transaction confirmed, ascending by partition
    assert (c.metrics.committed, c.metrics.already_committed) == (3, 0)
    assert c.commit(txns, recovery=True) is CommitOutcome.ALREADY_COMMITTED
    assert c.metrics.already_committed == 3
    assert system.checkpoint_calls[-1] == call(1, recovery=True)


# -- notify -----------------------------------------------------------------------------------------


def test_one_commit_checkpoint_call_per_sink_and_checkpoint_with_all_partitions() -> None:
    h, system = harness("g")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    assert system.checkpoint_calls == [call(1)]
    h.write_epoch(data(2), source_position=pos(2))
    assert system.checkpoint_calls == [call(1), call(2)]
    assert h.runtime.checkpoint_metrics[0].transactions_committed == 3
    h.runtime.finish()  # the final checkpoint holds no committable of g: no call
    assert system.checkpoint_calls == [call(1), call(2)]
    assert system.commit_calls == []  # never per committable
    assert system.committed_records() == expected([1, 2])
    assert h.runtime.committer_metrics.committed == 6
    assert clean(system) and h.runtime.state is JobState.FINISHED


def test_subsumed_notification_commits_each_checkpoint_as_one_call_in_order() -> None:
    cfg = RuntimeConfig(checkpoint=CheckpointConfig(max_concurrent_checkpoints=3, retained_checkpoints=1))
    h, system = harness("g", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    e2 = h.write_epoch(data(2), source_position=pos(2), complete=False)
    e3 = h.write_epoch(data(3), source_position=pos(3), complete=False)
    h.complete(e2, notify=False)
    h.complete(e3, notify=False)
    h.notify(3)  # subsumes 2
    assert system.checkpoint_calls == [call(1), call(2), call(3)]
    h.notify(2)  # late: nothing left
    assert len(system.checkpoint_calls) == 3
    assert system.committed_records() == expected([1, 2, 3]) and clean(system)


def test_mixing_a_per_committable_sink_and_a_checkpoint_commit_sink() -> None:
    h, system = harness("k", "g")
    h.restore()
    for n in (1, 2):
        h.write_epoch(data(n), source_position=pos(n))
    h.runtime.finish()
    assert records_of(system, "k") == records_of(system, "g") == expected([1, 2])
    assert system.commit_calls == [f"k-c{c}-p{p}-a0" for c in (1, 2) for p in range(3)]
    assert system.checkpoint_calls == [call(1), call(2)]
    assert h.runtime.committer_metrics.committed == 12
    assert clean(system)


def test_async_commit_keeps_checkpoint_order() -> None:
    cfg = RuntimeConfig(
        commit=CommitPolicy(async_commit=True),
        checkpoint=CheckpointConfig(max_concurrent_checkpoints=2, retained_checkpoints=1),
    )
    h, system = harness("k", "g", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    e2 = h.write_epoch(data(2), source_position=pos(2), complete=False)
    e3 = h.write_epoch(data(3), source_position=pos(3), complete=False)
    h.complete(e2, notify=False)
    h.complete(e3)  # notify(3): checkpoints 2 and 3 queued on the committer thread
    h.write_epoch(data(4), source_position=pos(4))
    h.runtime.await_commits(10)
    assert [c.checkpoint_id for c in system.checkpoint_calls] == [1, 2, 3, 4]
    assert system.checkpoint_calls == [call(c) for c in (1, 2, 3, 4)]
    h.runtime.finish()
    assert records_of(system, "k") == records_of(system, "g") == expected([1, 2, 3, 4])
    assert h.runtime.committer_metrics.committed == 24
    assert clean(system)


# -- retries and LOST ---------------------------------------------------------------------------------


def test_retry_then_committed_is_retried_as_one_group() -> None:
    cfg = RuntimeConfig(commit=CommitPolicy(max_attempts=5, initial_backoff_ms=10))
    h, system = harness("g", config=cfg)
    h.restore()
    system.script_checkpoint("g", 1, CommitOutcome.RETRY, CommitOutcome.RETRY)
    h.write_epoch(data(1), source_position=pos(1))
    assert system.checkpoint_calls == [call(1)] * 3
    m = h.runtime.committer_metrics
    assert (m.retries, m.committed) == (2, 3)
    assert system.committed_records() == expected([1]) and clean(system)


def test_retry_budget_exhausted_fails_the_job() -> None:
    cfg = RuntimeConfig(commit=CommitPolicy(max_attempts=2), restart=RestartStrategy.none())
    h, system = harness("g", config=cfg)
    h.restore()
    system.script_checkpoint("g", 1, CommitOutcome.RETRY, CommitOutcome.RETRY)
    with pytest.raises(CommitFailedError, match=r"past the retry budget.*partitions \[0, 1, 2\]"):
        h.write_epoch(data(1), source_position=pos(1))
    assert h.runtime.state is JobState.FAILING


def test_lost_during_normal_commit_fails_even_if_opted_in() -> None:
    cfg = RuntimeConfig(commit=CommitPolicy(ignore_lost_on_recovery=True), restart=RestartStrategy.none())
    h, system = harness("g", config=cfg)
    h.restore()
    system.script_checkpoint("g", 1, CommitOutcome.LOST)
    with pytest.raises(TransactionLostError, match="g-c1-p2-a0"):
        h.write_epoch(data(1), source_position=pos(1))
    assert h.runtime.state is JobState.FAILING
    with pytest.raises(JobError, match="exhausted"):
        h.runtime.failover(RuntimeError("lost"))


def test_lost_on_recovery_fails_unless_opted_in() -> None:
    h, system = harness("g")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)
    system.script_checkpoint("g", 1, CommitOutcome.LOST)  # timed out while the driver was down
    with pytest.raises(TransactionLostError, match=r"checkpoint 1 partitions \[0, 1, 2\]"):
        h.restart_process()
    assert system.checkpoint_calls == [call(1, recovery=True)]
    opted = RuntimeConfig(commit=CommitPolicy(ignore_lost_on_recovery=True))
    h2 = TwoPhaseHarness(h.sinks, config=opted, storage=h.storage, clock=h.clock)
    result = h2.restore()
    assert (result.recommitted, result.lost_ignored) == (3, 3)
    assert system.checkpoint_calls == [call(1, recovery=True)] * 2
    assert system.committed == {} and system.aborted == set(call(1).txn_ids)
    h2.write_epoch(data(2), source_position=pos(2))  # the job goes on
    assert system.committed_records() == expected([2]) and clean(system)


# -- recovery, replay, cancel ------------------------------------------------------------------------


def test_recovery_after_a_crash_before_notify_commits_the_restored_checkpoint_once() -> None:
    h, system = harness("g")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.crash_at("after_persist")
    h.expect_crash(lambda: h.write_epoch(data(2), source_position=pos(2)))
    assert system.checkpoint_calls == [call(1)]
    result = h.restart_process()
    assert result is not None and (result.checkpoint_id, result.recommitted) == (2, 3)
    assert system.checkpoint_calls == [call(1), call(2, recovery=True)]
    assert h.runtime.replay_check(pos(2))  # Spark replays batch 2: skipped, nothing left to commit
    assert len(system.checkpoint_calls) == 2
    h.write_epoch(data(3), source_position=pos(3))
    assert system.checkpoint_calls[-1] == call(3)
    assert system.committed_records() == expected([1, 2, 3]) and clean(system)


def test_recovery_of_a_checkpoint_holding_older_pending_checkpoints_commits_each_in_order() -> None:
    cfg = RuntimeConfig(checkpoint=CheckpointConfig(max_concurrent_checkpoints=2, retained_checkpoints=1))
    h, system = harness("k", "g", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)
    h.write_epoch(data(2), source_position=pos(2), notify=False)  # chk-2 holds 1's and 2's
    assert [r.checkpoint_id for r in h.storage.list_checkpoints()] == [2]
    h.restart_process()
    assert system.checkpoint_calls == [call(1, recovery=True), call(2, recovery=True)]
    assert records_of(system, "k") == records_of(system, "g") == expected([1, 2])
    assert clean(system)


def test_metadata_records_each_committables_own_checkpoint() -> None:
    cfg = RuntimeConfig(checkpoint=CheckpointConfig(max_concurrent_checkpoints=2, retained_checkpoints=1))
    h, _ = harness("g", config=cfg)
    h.restore()
    h.write_epoch(data(1, parts=2), source_position=pos(1), notify=False)
    h.write_epoch(data(2, parts=2), source_position=pos(2), notify=False)
    meta = h.checkpoints()[-1]
    recs = meta.sinks["g"].committables
    assert [(r.checkpoint_id, r.partition) for r in recs] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert CheckpointMetadata.loads(meta.dumps()) == meta
    # metadata written before the field existed still loads (readers assume the holding checkpoint)
    obj = meta.to_json()
    for c in obj["sinks"]["g"]["committables"]:
        del c["checkpoint_id"]
    assert all(r.checkpoint_id is None for r in CheckpointMetadata.from_json(obj).sinks["g"].committables)


def test_replay_check_commits_the_covered_checkpoint_as_one_call() -> None:
    h, system = harness("g")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)
    assert h.runtime.replay_check(pos(1))
    assert system.checkpoint_calls == [call(1)]
    assert system.committed_records() == expected([1]) and clean(system)


def test_cancel_with_delete_commits_durable_checkpoints_once_each() -> None:
    cfg = RuntimeConfig(
        cancel_cleanup=CleanupMode.DELETE,
        checkpoint=CheckpointConfig(max_concurrent_checkpoints=2, retained_checkpoints=2),
    )
    h, system = harness("g", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)
    h.write_epoch(data(2), source_position=pos(2), notify=False)
    epoch = h.begin_epoch(3, pos(3))
    h.run_subtask(epoch, "g", 0, data(3)[0])  # pre-committed, not durable: aborted
    h.runtime.cancel()
    assert h.runtime.state is JobState.CANCELED
    assert system.checkpoint_calls == [call(1), call(2)]
    assert system.committed_records() == expected([1, 2])
    assert system.aborted == {"g-c3-p0-a0"} and h.storage.list_checkpoints() == [] and clean(system)


@pytest.mark.parametrize("point", sorted(POINTS - {"during_cancel", "during_stop_with_savepoint"}))
@pytest.mark.parametrize("spec", [("k", "g"), ("g", "f")])
def test_crash_at_every_point_then_restart_is_exactly_once(point: str, spec: tuple[str, ...]) -> None:
    """Run 4 epochs and finish; crash once at ``point``; restart (replaying uncovered batches as
    Spark would) until finished. Exactly once; each (sink, checkpoint) committed by ONE call per try."""
    h, system = harness(*spec)
    h.restore()
    h.crash_at(point, nth=2 if point not in ("during_finish", "during_final_checkpoint") else 1)
    epochs = [1, 2, 3, 4]
    assert h.run_to_finish([(pos(n), data(n, parts=2)) for n in epochs]) == 1
    for s in spec:
        assert records_of(system, s) == expected(epochs, parts=2), s
    committed_checkpoints = [c.checkpoint_id for c in system.checkpoint_calls]
    assert committed_checkpoints == sorted(committed_checkpoints)  # in checkpoint order
    # every call carries a whole checkpoint: both partitions
    assert all(len(c.txn_ids) == 2 for c in system.checkpoint_calls)
    assert clean(system) and h.runtime.state is JobState.FINISHED
