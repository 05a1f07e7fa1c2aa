"""The job runtime driven by the deterministic harness: restore, epochs, failures at every step,
finish with one final checkpoint, failover. Each test asserts the exact sets of committed records
and aborted/lingering transactions. Stop, cancel and publish outcomes: test_runtime_endings.py."""

from __future__ import annotations

import threading

import pytest
from support.fakes import (
    FakeCommittable,
    FakeExternalSystem,
    FakeInProgressSink,
    FakeSink,
    FakeTxn,
)
from support.harness import TwoPhaseHarness, batch
from support.runtime_scenarios import data, expected, harness, pos, records_of

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.epoch import position_covers
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.faults import POINTS
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.sinks.errors import (
    CommitFailedError,
    CorruptCheckpointError,
    IllegalTransitionError,
    JobError,
    TransactionLostError,
)
from twophase.sinks.outcome import CommitOutcome

# -- the streaming flow ---------------------------------------------------------------------------


def test_epochs_commit_exactly_once_and_finish_takes_one_final_checkpoint() -> None:
    h, system = harness("k")
    assert h.restore().checkpoint_id is None
    for n in (1, 2, 3):
        h.write_epoch(data(n), source_position=pos(n))
    assert system.committed_records() == expected([1, 2, 3])
    m = h.runtime.finish()
    assert m is not None and m.kind is CheckpointKind.FINAL and m.checkpoint_id == 4
    assert h.runtime.state is JobState.FINISHED
    assert system.committed_records() == expected([1, 2, 3])
    assert system.lingering() == set() and system.aborted == set() and system.violations == []
    final = h.storage.latest()
    assert final is not None and final.end_of_input and final.source_position == pos(3)


def test_k_sinks_finishing_share_exactly_one_final_checkpoint() -> None:
    h, system = harness("k1", "k2", "f1", "f2")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    published_before = list(h.storage.published)
    h.runtime.finish()
    new = [c for c in h.storage.published if c not in published_before]
    assert new == [2]
    assert [m.kind for m in h.checkpoints() if m.checkpoint_id == 2] == [CheckpointKind.FINAL]
    for s in ("k1", "k2", "f1", "f2"):
        assert records_of(system, s) == expected([1])
    assert system.lingering() == set()


def test_final_checkpoint_finishes_and_commits_the_sinks_concurrently() -> None:
    # Both sinks' in-progress files are finished on the driver and committed; each step of one
    # sink waits until the other sink is in the same step: only concurrent lanes get through.
    system = FakeExternalSystem()
    finishing, committing = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)

    class Meeting(FakeInProgressSink):
        def finish(self, txn: FakeTxn) -> FakeCommittable | None:
            finishing.wait()
            return super().finish(txn)

        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            committing.wait()
            return super().commit(committable)

    h = TwoPhaseHarness([Meeting("f1", system, roll_records=3), Meeting("f2", system, roll_records=3)])
    h.restore()
    h.write_epoch(data(1, parts=1))  # one in-progress file per sink
    h.runtime.finish()
    assert records_of(system, "f1") == records_of(system, "f2") == expected([1], parts=1)
    assert system.lingering() == set() and system.violations == []


def test_batch_mode_one_epoch_then_final_checkpoint() -> None:
    h, system = harness("k", "f")
    h.restore()
    h.write_epoch(data(1, parts=3, per=1))
    # the spanning sink's files have not rolled (3 records per file): nothing of it is committed yet
    assert records_of(system, "f") == []
    h.runtime.finish()
    assert records_of(system, "k") == records_of(system, "f") == expected([1], parts=3, per=1)
    assert [m.kind for m in h.checkpoints()] == [CheckpointKind.CHECKPOINT, CheckpointKind.FINAL]
    assert system.lingering() == set() and system.violations == []


def test_in_progress_files_span_epochs_and_roll() -> None:
    h, system = harness("f")
    h.restore()
    h.write_epoch([[batch(["a", "b"])]])  # file f-c1-p0-a0 holds 2 records: in progress
    assert system.committed == {} and set(system.open) == {"f-c1-p0-a0"}
    h.write_epoch([[batch(["c"])]])  # resumed: 3 records, rolls at the pre-commit
    assert system.committed == {"f-c1-p0-a0": ["a", "b", "c"]}
    h.write_epoch([[batch(["d"])]])
    h.runtime.finish()
    assert system.committed_records() == ["a", "b", "c", "d"]
    assert system.lingering() == set() and system.violations == []


def test_replay_check_skips_a_covered_batch_and_refuses_another_query() -> None:
    h, system = harness("k")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    assert h.runtime.replay_check(pos(1)) is True
    assert h.runtime.replay_check(pos(2)) is False
    with pytest.raises(JobError, match="query_id"):
        h.runtime.replay_check(pos(2, query="other"))
    assert system.committed_records() == expected([1])


def test_position_covers() -> None:
    assert not position_covers(None, pos(1))
    assert position_covers(pos(3), pos(2))
    assert not position_covers(pos(3), pos(4))
    assert position_covers({"offset": 5}, {"offset": 5})


# -- failures and recovery ------------------------------------------------------------------------


def test_fail_before_notify_then_restore_recommits() -> None:
    h, system = harness("k")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.write_epoch(data(2), source_position=pos(2), notify=False)  # persisted, notification lost
    assert system.committed_records() == expected([1])
    h.restart_process()  # the driver dies; a new one restores checkpoint 2
    assert system.committed_records() == expected([1, 2])
    assert h.runtime.replay_check(pos(2))  # Spark replays batch 2: skipped
    h.write_epoch(data(3), source_position=pos(3))
    assert system.committed_records() == expected([1, 2, 3])
    assert system.lingering() == set() and system.aborted == set() and system.violations == []


def test_lingering_abort_after_a_crash_before_persist() -> None:
    h, system = harness("k")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.crash_at("before_persist")
    h.expect_crash(lambda: h.write_epoch(data(2), source_position=pos(2)))
    assert system.lingering() == {"k-c2-p0-a0", "k-c2-p1-a0"}  # pre-committed, held by no checkpoint
    result = h.restart_process()
    assert result is not None and result.checkpoint_id == 1
    assert result.lingering_aborted == {"k": 2}
    assert system.aborted == {"k-c2-p0-a0", "k-c2-p1-a0"} and system.lingering() == set()
    assert result.next_checkpoint_id == 2
    h.write_epoch(data(2), source_position=pos(2))  # Spark replays batch 2 with the same offsets
    assert system.committed_records() == expected([1, 2])
    # checkpoint id 2 was reused (restored id + 1); the fake names the new transactions apart
    assert set(system.committed) == {"k-c1-p0-a0", "k-c1-p1-a0", "k-c2-p0-a0~1", "k-c2-p1-a0~1"}


@pytest.mark.parametrize("point", sorted(POINTS - {"during_cancel", "during_stop_with_savepoint"}))
@pytest.mark.parametrize("spec", [("k",), ("k", "f")])
def test_crash_at_every_point_then_restart_is_exactly_once(point: str, spec: tuple[str, ...]) -> None:
    """Run 4 epochs and finish; crash once at ``point``; restart processes (restoring, replaying
    the uncovered batches as Spark would) until finished. Exactly once, nothing lingering."""
    h, system = harness(*spec)
    h.restore()
    h.crash_at(point, nth=2 if point not in ("during_finish", "during_final_checkpoint") else 1)
    epochs = [1, 2, 3, 4]
    assert h.run_to_finish([(pos(n), data(n)) for n in epochs]) == 1
    for s in spec:
        assert records_of(system, s) == expected(epochs), s
    assert system.lingering() == set()
    assert system.violations == []
    assert h.runtime.state is JobState.FINISHED


def test_failover_with_restart_strategy_restores_and_continues() -> None:
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(max_restarts=2, delay_ms=500))
    h, system = harness("k", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    epoch = h.begin_epoch(2, pos(2))
    h.run_subtask(epoch, "k", 0, data(2)[0])  # partition 1's task fails
    before = h.clock()
    result = h.runtime.failover(RuntimeError("task lost"))
    assert h.clock() - before == 500
    assert h.runtime.state is JobState.RUNNING and result.checkpoint_id == 1
    assert system.aborted == {"k-c2-p0-a0"}  # pre-committed, never durable: aborted on failure
    h.write_epoch(data(2), source_position=pos(2))
    assert system.committed_records() == expected([1, 2])
    assert system.lingering() == set()


def test_restart_strategy_exhausted_fails_the_job() -> None:
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(max_restarts=2, delay_ms=10, window_ms=60_000))
    h, _ = harness("k", config=cfg)
    h.restore()
    h.runtime.failover(RuntimeError("1"))
    h.runtime.failover(RuntimeError("2"))
    with pytest.raises(JobError, match="exhausted after 2 restarts"):
        h.runtime.failover(RuntimeError("3"))
    assert h.runtime.state is JobState.FAILED
    with pytest.raises(IllegalTransitionError):
        h.runtime.begin_epoch(1)


def test_restart_window_forgets_old_restarts() -> None:
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(max_restarts=1, delay_ms=10, window_ms=1_000))
    h, _ = harness("k", config=cfg)
    h.restore()
    h.runtime.failover(RuntimeError("1"))
    h.clock.advance(1_000)
    h.runtime.failover(RuntimeError("2"))  # the first restart left the window
    assert h.runtime.state is JobState.RUNNING


def test_run_with_restarts_retries_the_body_then_succeeds() -> None:
    cfg = RuntimeConfig(restart=RestartStrategy.exponential_backoff(3, 100, 10_000))
    h, system = harness("k", config=cfg)
    attempts: list[int] = []

    def body(rt: object) -> str:
        attempts.append(1)
        for n in (1, 2, 3):
            if h.runtime.replay_check(pos(n)):
                continue
            h.write_epoch(data(n), source_position=pos(n))
            if n == len(attempts) and n < 3:
                raise RuntimeError(f"query failed after batch {n} committed")
        h.runtime.finish()
        return "done"

    start = h.clock()
    assert h.runtime.run_with_restarts(body) == "done"
    assert h.clock() - start == 100 + 200  # exponential backoff between the two restarts
    assert len(attempts) == 3
    assert system.committed_records() == expected([1, 2, 3])
    assert h.runtime.state is JobState.FINISHED


def test_run_with_restarts_exhausted_is_failed() -> None:
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(1, 0))
    h, _ = harness("k", config=cfg)

    def body(rt: object) -> None:
        raise RuntimeError("always")

    with pytest.raises(RuntimeError, match="always"):
        h.runtime.run_with_restarts(body)
    assert h.runtime.state is JobState.FAILED


def test_lost_on_recovery_fails_unless_opted_in() -> None:
    h, system = harness("k")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)
    system.script("k-c1-p0-a0", CommitOutcome.LOST)  # timed out while the driver was down
    with pytest.raises(TransactionLostError, match="k-c1-p0-a0"):
        h.restart_process()
    opted = RuntimeConfig(commit=CommitPolicy(ignore_lost_on_recovery=True))
    h2 = TwoPhaseHarness(h.sinks, config=opted, storage=h.storage, clock=h.clock)
    result = h2.restore()
    assert (result.recommitted, result.lost_ignored) == (2, 1)
    assert set(system.committed) == {"k-c1-p1-a0"}
    assert system.aborted == {"k-c1-p0-a0"}


def test_lost_during_normal_commit_fails_the_job_even_if_opted_in() -> None:
    cfg = RuntimeConfig(commit=CommitPolicy(ignore_lost_on_recovery=True), restart=RestartStrategy.none())
    h, system = harness("k", config=cfg)
    h.restore()
    system.script("k-c1-p1-a0", CommitOutcome.LOST)
    with pytest.raises(TransactionLostError):
        h.write_epoch(data(1), source_position=pos(1))
    assert h.runtime.state is JobState.FAILING
    with pytest.raises(JobError, match="exhausted"):
        h.runtime.failover(RuntimeError("lost"))
    assert h.job_state() is JobState.FAILED


def test_restore_from_a_final_checkpoint_commits_nothing_twice() -> None:
    h, system = harness("k", "f")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.runtime.finish()
    committed = dict(system.committed)
    calls = len(system.commit_calls)
    result = h.restart_process()
    assert result is not None and result.end_of_input
    assert h.runtime.replay_check(pos(1))
    assert h.runtime.finish() is None  # nothing to finish: no new checkpoint
    assert system.committed == committed
    # re-commits of the final checkpoint's committables answered ALREADY_COMMITTED
    assert h.runtime.committer_metrics.committed == 0
    assert len(system.commit_calls) - calls == h.runtime.committer_metrics.already_committed
    assert system.committed_records() == sorted(expected([1]) * 2)
    assert [c for c in h.storage.published] == [1, 2]


def test_corrupt_latest_checkpoint_is_an_error_not_a_fallback() -> None:
    h, _ = harness("k")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.write_epoch(data(2), source_position=pos(2))
    h.storage.corrupt(2)
    with pytest.raises(CorruptCheckpointError, match="chk-2"):
        h.restart_process()


def test_restore_refuses_a_checkpoint_with_unknown_sinks() -> None:
    h, _ = harness("k", "other")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h2 = TwoPhaseHarness([h.sink("k")], storage=h.storage, clock=h.clock)
    with pytest.raises(JobError, match="other"):
        h2.restore()


def test_a_refused_checkpoint_id_names_its_true_reason() -> None:
    """#26 item 5: "storage holds newer checkpoints" was said whatever raised the next id."""

    class Floored(FakeSink):  # the external system records checkpoint 3 as committed (Delta's txn)
        def last_committed_checkpoint(self, job_id: str) -> int | None:
            return 3

    h = TwoPhaseHarness([Floored("k", FakeExternalSystem())])
    h.restore()  # storage is empty
    with pytest.raises(JobError) as floor:
        h.runtime.begin_epoch(2, pos(1), checkpoint_id=1)
    assert "storage holds" not in str(floor.value)
    assert "sink 'k'" in str(floor.value) and "checkpoint 3" in str(floor.value)

    h, _ = harness("k")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.restart_process()
    with pytest.raises(JobError, match="storage holds checkpoint 1"):
        h.runtime.begin_epoch(2, pos(2), checkpoint_id=1)

    h, _ = harness("k")
    h.restore()
    h.runtime.begin_epoch(2, pos(1), checkpoint_id=5)  # this run used ids up to 5 (not completed)
    with pytest.raises(JobError, match="this run already used checkpoint ids up to 5"):
        h.runtime.begin_epoch(2, pos(1), checkpoint_id=4)


# -- rescale --------------------------------------------------------------------------------------


def test_rescale_down_hands_over_in_progress_state_and_up_starts_empty() -> None:
    """In-progress state of partitions beyond the new parallelism is finished on the driver into
    the new epoch's checkpoint (never aborted: its data is covered by the previous checkpoint)."""
    h, system = harness("f")
    h.restore()
    h.write_epoch([[batch(["a"])], [batch(["b"])], [batch(["c"])]], source_position=pos(1))
    assert set(system.open) == {"f-c1-p0-a0", "f-c1-p1-a0", "f-c1-p2-a0"}
    h.restart_process()  # restore with the in-progress state of 3 partitions
    h.write_epoch([[batch(["d"])]], source_position=pos(2))  # now 1 partition
    assert set(system.committed) == {"f-c1-p1-a0", "f-c1-p2-a0"}  # handed over and committed
    assert system.open == {"f-c1-p0-a0": ["a", "d"]}
    h.write_epoch([[batch(["e"])], [batch(["f"])]], source_position=pos(3))  # up to 2
    h.runtime.finish()
    assert system.committed_records() == ["a", "b", "c", "d", "e", "f"]
    assert system.aborted == set() and system.lingering() == set() and system.violations == []


# -- concurrency and notifications ----------------------------------------------------------------


def test_concurrent_checkpoints_with_out_of_order_and_lost_notifications() -> None:
    cfg = RuntimeConfig(checkpoint=CheckpointConfig(max_concurrent_checkpoints=3, retained_checkpoints=1))
    h, system = harness("k", config=cfg)
    h.restore()
    e1 = h.write_epoch(data(1), source_position=pos(1), complete=False)
    e2 = h.write_epoch(data(2), source_position=pos(2), complete=False)
    e3 = h.write_epoch(data(3), source_position=pos(3), complete=False)
    for e in (e1, e2, e3):
        h.complete(e, notify=False)
    h.notify(2)
    assert system.committed_records() == expected([1, 2])
    h.notify(1)  # late: no-op
    assert system.commit_calls.count("k-c1-p0-a0") == 1
    # notification of 3 lost; the driver dies: only chk-3 is retained, and it holds 3's transactions
    assert [r.checkpoint_id for r in h.storage.list_checkpoints()] == [3]
    h.restart_process()
    assert system.committed_records() == expected([1, 2, 3])
    assert system.lingering() == set() and system.aborted == set()


def test_duplicate_attempt_is_discarded_and_aborted() -> None:
    h, system = harness("k")
    h.restore()
    epoch = h.begin_epoch(1, pos(1))
    h.run_subtask(epoch, "k", 0, data(1)[0], attempt=0)
    spec = h.run_subtask(epoch, "k", 0, data(1)[0], attempt=1, acknowledge=False)  # speculative copy
    assert epoch.discard(Acknowledgement.of(h.sink("k"), 0, 1, spec.committable)) == 1
    h.complete(epoch)
    assert set(system.committed) == {"k-c1-p0-a0"} and system.aborted == {"k-c1-p0-a1"}


def test_speculative_attempt_leftovers_are_aborted_as_lingering_after_the_epoch() -> None:
    h, system = harness("k")
    h.restore()
    epoch = h.begin_epoch(1, pos(1))
    h.run_subtask(epoch, "k", 0, data(1)[0], attempt=1, acknowledge=False)  # killed speculative task
    h.run_subtask(epoch, "k", 0, data(1)[0], attempt=0)
    m = h.complete(epoch)
    assert m.lingering_aborted == 1
    assert system.aborted == {"k-c1-p0-a1"} and set(system.committed) == {"k-c1-p0-a0"}


def test_async_commit_overlaps_next_epoch_and_stays_exactly_once() -> None:
    cfg = RuntimeConfig(commit=CommitPolicy(async_commit=True))
    h, system = harness("k", "f", config=cfg)
    h.restore()
    for n in (1, 2, 3):
        h.write_epoch(data(n), source_position=pos(n))
    h.runtime.finish()
    for s in ("k", "f"):
        assert records_of(system, s) == expected([1, 2, 3])
    assert system.lingering() == set()


def test_async_commit_error_surfaces_on_the_next_call() -> None:
    cfg = RuntimeConfig(
        commit=CommitPolicy(async_commit=True, max_attempts=1), restart=RestartStrategy.fixed_delay(1, 0)
    )
    h, system = harness("k", config=cfg)
    h.restore()
    system.script("k-c1-p0-a0", CommitOutcome.FATAL)
    h.write_epoch(data(1), source_position=pos(1))
    with pytest.raises(CommitFailedError, match="FATAL"):
        h.runtime.await_commits(5)
    assert h.runtime.state is JobState.FAILING
    with pytest.raises(IllegalTransitionError, match="FAILING"):
        h.runtime.begin_epoch(2, pos(2))
    h.runtime.failover(RuntimeError("commit failed"))  # restore re-commits what checkpoint 1 holds
    assert system.committed_records() == expected([1])
    h.write_epoch(data(2), source_position=pos(2))
    h.runtime.finish()
    assert system.committed_records() == expected([1, 2])
    assert system.lingering() == set()


def test_an_epoch_waiting_for_a_commit_that_never_ends_fails_naming_it() -> None:
    """#26 item 5: with commit_drain_timeout_s=None the epoch that waits for the commits its
    sink's name pool depends on waited forever; the wait is bounded by the sink's transaction
    timeout (the system aborts the transaction then anyway) and names the commit it waited for."""
    gate = threading.Event()

    class Stalling(FakeSink):  # a commit that hangs (a stalled broker)
        max_pending_checkpoints = 1
        transaction_timeout_ms = 300

        def commit(self, committable: FakeCommittable) -> CommitOutcome:
            gate.wait(120)  # past the test's own wait: the commit stalls until the test ends
            return super().commit(committable)

    cfg = RuntimeConfig(commit=CommitPolicy(async_commit=True), commit_drain_timeout_s=None)
    h = TwoPhaseHarness([Stalling("k", FakeExternalSystem())], config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.write_epoch(data(2), source_position=pos(2))
    errors: list[BaseException] = []

    def third() -> None:
        try:
            h.runtime.begin_epoch(2, pos(3))
        except Exception as e:
            errors.append(e)

    waiting = threading.Thread(target=third, daemon=True)
    waiting.start()
    waiting.join(60)  # the bound is 0.3 s; the rest is room for a loaded machine (#45 item 7)
    gate.set()
    assert not waiting.is_alive(), "the epoch waited without a bound"
    [error] = errors
    assert "checkpoint 1" in str(error) and "'k'" in str(error)
    assert h.runtime.state is JobState.FAILING


def test_pending_transaction_age_warning_during_epochs(caplog: pytest.LogCaptureFixture) -> None:
    cfg = RuntimeConfig(
        commit=CommitPolicy(transaction_timeout_ms=60_000),
        checkpoint=CheckpointConfig(checkpoint_timeout_ms=None),
    )
    h, _ = harness("k", config=cfg)
    h.restore()
    epoch = h.write_epoch(data(1), source_position=pos(1), complete=False)
    h.complete(epoch, notify=False)
    h.clock.advance(48_000)  # 80% of the transaction timeout, still not committed
    with caplog.at_level("WARNING", logger="twophase.coordinator.commit.committer_operator"):
        h.begin_epoch(2, pos(2))
    assert sum("near its timeout" in r.message for r in caplog.records) == 2
