"""The job runtime driven by the deterministic harness: restore, epochs, failures at every step,
finish with one final checkpoint, stop, cancel, failover. Each test asserts the exact sets of
committed records and aborted/lingering transactions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pyarrow as pa
import pytest

from twophase.coordinator.acknowledgement import Acknowledgement
from twophase.coordinator.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit_policy import CommitPolicy
from twophase.coordinator.epoch import position_covers
from twophase.coordinator.fanout import write_subtasks
from twophase.coordinator.faults import POINTS
from twophase.coordinator.job_lifecycle import JobState
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.restart import RestartStrategy
from twophase.coordinator.runtime import JobCanceledError
from twophase.coordinator.runtime_config import CleanupMode, RuntimeConfig
from twophase.coordinator.testing.fakes import (
    FakeCommittable,
    FakeExternalSystem,
    FakeInProgressSink,
    FakeSink,
    FakeTxn,
)
from twophase.coordinator.testing.harness import TwoPhaseHarness, batch
from twophase.sinks.errors import (
    CheckpointPublishUnknownError,
    CommitFailedError,
    ConfigError,
    CorruptCheckpointError,
    IllegalTransitionError,
    JobError,
    TransactionLostError,
)
from twophase.sinks.outcome import CommitOutcome


def pos(n: int, query: str = "q1") -> dict[str, object]:
    return {"engine": "spark", "query_id": query, "batch_id": n}


def data(n: int, parts: int = 2, per: int = 2) -> list[list[pa.RecordBatch]]:
    """Epoch n's input: ``parts`` partitions of ``per`` keys each, e.g. 'e1p0r0'."""
    return [[batch([f"e{n}p{p}r{r}" for r in range(per)])] for p in range(parts)]


def expected(epochs: Sequence[int], parts: int = 2, per: int = 2) -> list[str]:
    return sorted(f"e{n}p{p}r{r}" for n in epochs for p in range(parts) for r in range(per))


def harness(
    *sinks_spec: str, config: RuntimeConfig | None = None
) -> tuple[TwoPhaseHarness, FakeExternalSystem]:
    system = FakeExternalSystem()
    sinks = [
        FakeInProgressSink(name, system, roll_records=3) if name.startswith("f") else FakeSink(name, system)
        for name in (sinks_spec or ("k",))
    ]
    cfg = config or RuntimeConfig(checkpoint=CheckpointConfig(retained_checkpoints=2))
    return TwoPhaseHarness(sinks, config=cfg), system


def records_of(system: FakeExternalSystem, sink: str) -> list[str]:
    return sorted(r for t, recs in system.committed.items() if t.startswith(sink + "-") for r in recs)


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
    finishing, committing = threading.Barrier(2, timeout=5), threading.Barrier(2, timeout=5)

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
    assert h.runtime.state is JobState.FAILED


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
    with caplog.at_level("WARNING", logger="twophase.coordinator.committer_operator"):
        h.begin_epoch(2, pos(2))
    assert sum("near its timeout" in r.message for r in caplog.records) == 2


# -- stop, savepoints, cancel ---------------------------------------------------------------------


def test_stop_with_savepoint_drain_finishes_and_keeps_a_savepoint() -> None:
    h, system = harness("k", "f")
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    ref = h.runtime.stop_with_savepoint(drain=True)
    assert h.runtime.state is JobState.FINISHED
    assert ref.kind is CheckpointKind.SAVEPOINT and "savepoints/sp-2" in ref.location
    meta = h.storage.load(ref)
    assert meta.end_of_input
    for s in ("k", "f"):
        assert records_of(system, s) == expected([1])
    assert system.lingering() == set()


def test_stop_with_savepoint_no_drain_then_resume_continues_the_same_in_progress_files() -> None:
    h, system = harness("k", "f")
    h.restore()
    h.write_epoch([[batch(["a"])]], source_position=pos(1))
    ref = h.runtime.stop_with_savepoint(drain=False)
    assert h.runtime.state is JobState.SUSPENDED
    meta = h.storage.load(ref)
    assert not meta.end_of_input and meta.sinks["f"].in_progress == {0: {"txn_id": "f-c1-p0-a0", "size": 1}}
    assert records_of(system, "k") == ["a"] and records_of(system, "f") == []
    assert set(system.open) == {"f-c1-p0-a0"}  # still in progress, held by the savepoint
    # retention never deletes the savepoint
    h.restart_process(savepoint_location=ref.location)
    sink_f = h.sink("f")
    assert h.runtime.replay_check(pos(1))
    h.write_epoch([[batch(["b"])]], source_position=pos(2))
    assert sink_f.resumed == ["f-c1-p0-a0"]  # type: ignore[attr-defined]
    h.runtime.finish()
    assert system.committed == {"k-c1-p0-a0": ["a"], "k-c3-p0-a0": ["b"], "f-c1-p0-a0": ["a", "b"]}
    assert system.lingering() == set() and system.aborted == set() and system.violations == []


def test_plain_stop_takes_a_retained_checkpoint_and_resume_replays_nothing() -> None:
    h, system = harness("k", "f")
    h.restore()
    h.write_epoch([[batch(["a"])]], source_position=pos(1))
    ref = h.runtime.stop()
    assert ref.kind is CheckpointKind.CHECKPOINT and h.runtime.state is JobState.SUSPENDED
    result = h.restart_process()
    assert result is not None and result.checkpoint_id == ref.checkpoint_id
    assert h.runtime.replay_check(pos(1))  # resume replays nothing
    h.runtime.finish()
    assert system.committed_records() == ["a", "a"]  # once per sink
    assert system.lingering() == set()


def test_cancel_issued_while_stop_hangs_takes_effect() -> None:
    cfg = RuntimeConfig(
        commit=CommitPolicy(
            max_attempts=10**6, max_retry_time_ms=None, initial_backoff_ms=1, max_backoff_ms=5
        )
    )
    system = FakeExternalSystem()
    entered = threading.Event()

    def hang(txn_id: str) -> CommitOutcome | None:
        entered.set()
        return CommitOutcome.RETRY  # the external system keeps asking to retry

    h = TwoPhaseHarness([FakeSink("k", system)], config=cfg, real_commit_backoff=True)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)
    system.outcome_hook = hang
    errors: list[BaseException] = []

    def stop() -> None:
        try:
            h.runtime.stop()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=stop)
    t.start()
    assert entered.wait(10)
    assert h.runtime.state is JobState.STOPPING
    h.runtime.cancel()
    t.join(10)
    assert not t.is_alive()
    assert h.runtime.state is JobState.CANCELED
    assert len(errors) == 1 and isinstance(errors[0], JobCanceledError)
    # completed checkpoints kept (retention 1: the stop checkpoint, which carries checkpoint 1's
    # uncommitted transactions); a restore re-commits them
    system.outcome_hook = None
    assert [r.checkpoint_id for r in h.storage.list_checkpoints()] == [2]
    h.restart_process()
    assert system.committed_records() == expected([1])


@pytest.mark.parametrize("mode", [CleanupMode.RETAIN, CleanupMode.DELETE])
def test_cancel_aborts_open_transactions_and_retains_or_deletes_checkpoints(mode: CleanupMode) -> None:
    cfg = RuntimeConfig(cancel_cleanup=mode, checkpoint=CheckpointConfig(retained_checkpoints=3))
    h, system = harness("k", "f", config=cfg)
    h.restore()
    h.write_epoch([[batch(["a"])]], source_position=pos(1))
    sp = h.runtime.stop_with_savepoint(drain=False)
    h.restart_process(savepoint_location=sp.location)
    h.write_epoch([[batch(["b"])]], source_position=pos(2))
    epoch = h.begin_epoch(1, pos(3))
    h.run_subtask(epoch, "k", 0, [batch(["c"])])  # pre-committed, not durable
    h.runtime.cancel()
    assert h.runtime.state is JobState.CANCELED
    assert "k-c4-p0-a0" in system.aborted
    assert records_of(system, "k") == ["a", "b"]
    kinds = [(r.checkpoint_id, r.kind) for r in h.storage.list_checkpoints()]
    if mode is CleanupMode.RETAIN:
        assert kinds == [
            (1, CheckpointKind.CHECKPOINT),
            (2, CheckpointKind.SAVEPOINT),
            (3, CheckpointKind.CHECKPOINT),
        ]
        assert set(system.open) == {"f-c1-p0-a0"}  # in progress, held by checkpoints and the savepoint
    else:
        assert kinds == [(2, CheckpointKind.SAVEPOINT)]  # savepoints are never deleted
        assert set(system.open) == {"f-c1-p0-a0"}  # still held by the savepoint
    assert system.violations == []
    with pytest.raises(IllegalTransitionError):
        h.runtime.cancel()


def test_cancel_delete_aborts_in_progress_state_only_deleted_checkpoints_held() -> None:
    cfg = RuntimeConfig(cancel_cleanup=CleanupMode.DELETE)
    h, system = harness("f", config=cfg)
    h.restore()
    h.write_epoch([[batch(["a"])]], source_position=pos(1))
    h.runtime.cancel()
    assert h.storage.list_checkpoints() == []
    assert system.aborted == {"f-c1-p0-a0"} and system.lingering() == set()


# -- job lifecycle --------------------------------------------------------------------------------


def test_illegal_job_transitions_raise() -> None:
    h, _ = harness("k")
    with pytest.raises(IllegalTransitionError, match="before restore"):
        h.runtime.coordinator  # noqa: B018
    with pytest.raises(IllegalTransitionError):
        h.runtime.begin_epoch(1)
    with pytest.raises(IllegalTransitionError):
        h.runtime.finish()
    h.restore()
    with pytest.raises(IllegalTransitionError):
        h.restore()
    epoch = h.begin_epoch(1, pos(1))
    with pytest.raises(IllegalTransitionError, match="pending checkpoints"):
        h.runtime.finish()
    with pytest.raises(IllegalTransitionError, match="missing"):
        h.complete(epoch)
    assert h.runtime.state is JobState.RUNNING  # protocol mistakes leave the job as it was
    h.runtime.abort_epoch(epoch, "test")
    h.runtime.finish()
    for action in (
        h.runtime.finish,
        h.runtime.stop,
        h.runtime.cancel,
        lambda: h.runtime.stop_with_savepoint(True),
    ):
        with pytest.raises(IllegalTransitionError):
            action()


def test_configuration_errors() -> None:
    system = FakeExternalSystem()
    with pytest.raises(ConfigError, match="twice"):
        TwoPhaseHarness([FakeSink("k", system), FakeSink("k", system)])
    h, _ = harness("k")
    h.restore()
    with pytest.raises(ConfigError):
        h.runtime.begin_epoch(0)


def test_executor_side_fanout_acknowledgements_drive_an_epoch() -> None:
    """The contract with the execution layer: coordinator.fanout writes every sink of a partition in
    one pass; its acknowledgements, shipped as Arrow rows, are fed to Epoch.acknowledge."""
    h, system = harness("k", "f")
    h.restore()
    for n in (1, 2):
        epoch = h.begin_epoch(2, pos(n))
        for p, batches in enumerate(data(n)):
            for a in write_subtasks(epoch.plan(), p, 0, batches):
                epoch.acknowledge(Acknowledgement.from_row(a.to_row()))  # as collected from Arrow rows
        m = h.complete(epoch)
        assert m.records == 4
    h.runtime.finish()
    for s in ("k", "f"):
        assert records_of(system, s) == expected([1, 2])
    assert system.lingering() == set() and system.violations == []


def test_cancel_with_delete_never_commits_what_no_checkpoint_made_durable() -> None:
    """#14 scenario 9: an abort that fails part-way through cancel leaves later subtasks'
    pre-committed transactions in memory; cancel with delete must commit only what a published
    checkpoint holds, never those (the batch is replayed on the next run: duplicates)."""
    cfg = RuntimeConfig(
        cancel_cleanup=CleanupMode.DELETE, checkpoint=CheckpointConfig(retained_checkpoints=2)
    )
    h, system = harness("k", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    epoch2 = h.write_epoch(data(2), source_position=pos(2), complete=False)  # acknowledged, not durable
    assert epoch2 is not None
    failed: list[str] = []

    def refuse_first(txn_id: str) -> None:
        if not failed:
            failed.append(txn_id)
            raise ConnectionError("the external system did not answer")

    system.abort_hook = refuse_first
    with pytest.raises(JobError, match="cleanup failed"):
        h.runtime.cancel()
    assert h.runtime.state is JobState.CANCELED
    assert system.committed_records() == expected([1])  # epoch 2 never committed
    assert not any(t.startswith("k-c2") for t in system.committed)


@pytest.mark.parametrize("final", [False, True])
@pytest.mark.parametrize("ignore_lost", [False, True])
def test_a_publish_whose_outcome_is_unknown_never_aborts_what_may_be_durable(
    final: bool, ignore_lost: bool
) -> None:
    """#14 scenario 4: the checkpoint landed but the writer never learned it (an S3 PUT whose every
    retry failed without seeing 412; a directory fsync that failed after the link). Aborting its
    transactions would lose a durable checkpoint's data: LOST on restore, or, with
    ignore_lost_on_recovery, the batch silently skipped."""
    cfg = RuntimeConfig(
        checkpoint=CheckpointConfig(retained_checkpoints=2),
        commit=CommitPolicy(ignore_lost_on_recovery=ignore_lost),
    )
    h, system = harness("k", "f", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))

    def unknown(meta: CheckpointMetadata) -> None:
        if meta.checkpoint_id == 2:
            raise TimeoutError("no answer to the PUT, but it landed")

    h.storage.after_publish_hook = unknown
    with pytest.raises(CheckpointPublishUnknownError):
        if final:
            h.runtime.finish()
        else:
            h.write_epoch(data(2), source_position=pos(2))
    assert h.runtime.state is JobState.FAILING
    h.storage.after_publish_hook = None
    h.restart_process()  # the restore finds checkpoint 2 and re-commits it
    if not final:
        assert h.runtime.replay_check(pos(2))  # the engine replays batch 2: covered, nothing written
    h.runtime.finish()
    epochs = [1] if final else [1, 2]
    for s in ("k", "f"):
        assert records_of(system, s) == expected(epochs)
    assert system.lingering() == set() and system.violations == []


def test_age_warnings_take_the_sinks_own_transaction_timeout(caplog: pytest.LogCaptureFixture) -> None:
    """#14 scenario 10: a sink that knows its transaction timeout (Kafka's transaction.timeout.ms)
    gets warnings at 80% of it without the user repeating it in CommitPolicy."""
    system = FakeExternalSystem()
    sink = FakeSink("k", system)
    sink.transaction_timeout_ms = 1_000
    h = TwoPhaseHarness(
        [sink], config=RuntimeConfig(checkpoint=CheckpointConfig(max_concurrent_checkpoints=2))
    )
    h.restore()
    h.write_epoch(data(1), source_position=pos(1), notify=False)  # durable, not committed yet
    h.clock.advance(850)
    with caplog.at_level(logging.WARNING, logger="twophase.coordinator.transaction_ages"):
        h.begin_epoch(2, pos(2))
    assert any("near its timeout" in r.getMessage() for r in caplog.records)
