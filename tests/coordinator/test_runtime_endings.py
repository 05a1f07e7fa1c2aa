"""The job runtime's endings driven by the deterministic harness: stop with and without savepoint,
cancel (retain, delete), illegal transitions, configuration errors, publishes whose outcome is
unknown, transaction-age warnings. Each test asserts the exact committed records."""

from __future__ import annotations

import logging
import threading

import pytest
from support.fakes import (
    FakeExternalSystem,
    FakeSink,
)
from support.harness import TwoPhaseHarness, batch
from support.runtime_scenarios import data, expected, harness, pos, records_of

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.fanout import write_subtasks
from twophase.coordinator.run.runtime import JobCanceledError
from twophase.coordinator.run.runtime_config import CleanupMode, RuntimeConfig
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.errors import (
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    ConfigError,
    IllegalTransitionError,
    JobError,
)
from twophase.sinks.outcome import CommitOutcome

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
    assert entered.wait(60)
    assert h.runtime.state is JobState.STOPPING
    h.runtime.cancel()
    t.join(60)
    assert not t.is_alive()
    assert h.job_state() is JobState.CANCELED
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


@pytest.mark.parametrize("mode", [CleanupMode.RETAIN, CleanupMode.DELETE])
def test_cancel_aborts_every_in_doubt_transaction_it_can_and_reports_every_failure(mode: CleanupMode) -> None:
    """#26 item 3: checkpoint 2's publish had an unknown outcome and it did not land; cancel with
    one abort refused stopped at that failure and left both in-doubt transactions open (each
    stalls read_committed consumers until the transaction timeout). Cleanup goes on past a
    failure, aborts everything it can, and names every failure."""
    cfg = RuntimeConfig(cancel_cleanup=mode, checkpoint=CheckpointConfig(retained_checkpoints=2))
    h, system = harness("k", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))

    def timeout(meta: CheckpointMetadata) -> None:
        if meta.checkpoint_id == 2:
            raise CheckpointPublishUnknownError("no answer to the PUT; it did not land")

    h.storage.publish_hook = timeout
    with pytest.raises(CheckpointPublishUnknownError):
        h.write_epoch(data(2), source_position=pos(2))
    assert h.runtime.state is JobState.FAILING
    assert system.lingering() == {"k-c2-p0-a0", "k-c2-p1-a0"}  # in doubt: kept, not aborted

    def refuse(txn_id: str) -> None:
        if txn_id == "k-c2-p0-a0":
            raise ConnectionError(f"abort of {txn_id}: the external system did not answer")

    system.abort_hook = refuse
    with pytest.raises(JobError, match="cleanup failed") as e:
        h.runtime.cancel()
    assert h.job_state() is JobState.CANCELED
    assert system.lingering() == {"k-c2-p0-a0"}  # only the one whose every abort was refused
    assert "k-c2-p0-a0" in str(e.value)
    assert system.committed_records() == expected([1])


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


@pytest.mark.parametrize("ignore_lost", [False, True])
def test_a_publish_error_not_proven_not_published_keeps_its_transactions_in_doubt(
    ignore_lost: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#26 item 1 (seen on MinIO): the checkpoint landed, but the backend said a plain
    CheckpointStorageError (a 412 after a retry whose read-back kept failing). The coordinator
    aborted its transactions; the restore then reported LOST, or with ignore_lost_on_recovery
    skipped the batch silently. Only a proven "not published" may abort."""
    cfg = RuntimeConfig(
        checkpoint=CheckpointConfig(retained_checkpoints=2),
        commit=CommitPolicy(ignore_lost_on_recovery=ignore_lost),
    )
    h, system = harness("k", "f", config=cfg)
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    store_publish = h.storage.publish

    def landed_but_reported_failed(meta: CheckpointMetadata) -> CheckpointRef:
        store_publish(meta)
        raise CheckpointStorageError(
            f"checkpoint exists already: chk-{meta.checkpoint_id} (read-back failed)"
        )

    monkeypatch.setattr(h.storage, "publish", landed_but_reported_failed)
    with pytest.raises(CheckpointStorageError):
        h.write_epoch(data(2), source_position=pos(2))
    monkeypatch.undo()
    assert system.aborted == set()  # what a visible checkpoint holds is never aborted
    h.restart_process()  # the restore finds checkpoint 2 and commits it
    assert h.runtime.replay_check(pos(2))
    h.runtime.finish()
    for s in ("k", "f"):
        assert records_of(system, s) == expected([1, 2])
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
    with caplog.at_level(logging.WARNING, logger="twophase.coordinator.commit.transaction_ages"):
        h.begin_epoch(2, pos(2))
    assert any("near its timeout" in r.getMessage() for r in caplog.records)
