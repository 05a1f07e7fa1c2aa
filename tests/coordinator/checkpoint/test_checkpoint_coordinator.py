"""The checkpoint coordinator: ids, acknowledgements, ordered completion, Flink's notification rule,
aborts, limits and timeouts — each asserting exact committed/aborted transaction sets."""

from __future__ import annotations

import pytest
from support.clock import ManualClock
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.harness import batch
from support.memory_storage import InMemoryCheckpointStorage
from support.model_payloads import ModelDecodeFailure, undecodable_once

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import (
    CheckpointConfig,
    CheckpointLimitError,
    CheckpointStatus,
    DuplicateAcknowledgementError,
)
from twophase.coordinator.checkpoint.driver_finish import finish_subtasks
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state.acknowledgement import Acknowledgement, acknowledgement_table
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.payload import decode_payload, payload_object
from twophase.coordinator.state.subtask_lifecycle import SubtaskState
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import CheckpointStorageError, IllegalTransitionError

JOB = "job"


def make(
    n_sinks: int = 1, *, max_concurrent: int = 3, emit_empty: bool = False, timeout_ms: int | None = None
) -> tuple[CheckpointCoordinator, FakeExternalSystem, InMemoryCheckpointStorage, ManualClock]:
    system = FakeExternalSystem()
    sinks = [FakeSink(f"s{i}", system, emit_empty=emit_empty) for i in range(n_sinks)]
    storage = InMemoryCheckpointStorage(JOB)
    clock = ManualClock()
    committer = CommitterOperator(JOB, {s.name: s for s in sinks}, clock=clock, sleep=clock.sleep)
    cfg = CheckpointConfig(
        max_concurrent_checkpoints=max_concurrent, checkpoint_timeout_ms=timeout_ms, retained_checkpoints=5
    )
    return (
        CheckpointCoordinator(JOB, sinks, storage, committer, cfg, clock=clock, fault=lambda p: None),
        system,
        storage,
        clock,
    )


def write(
    coord: CheckpointCoordinator, c: int, sink: str, partition: int, keys: list[str], attempt: int = 0
) -> FakeCommittable | None:
    """Run one subtask in-process and return its committable (not acknowledged)."""
    s = coord.sinks[sink]
    txn = s.begin_transaction(WriterContext(JOB, sink, c, partition, attempt, 2))
    s.write(txn, batch(keys))
    return s.pre_commit(txn)


def ack(
    coord: CheckpointCoordinator, c: int, sink: str, partition: int, keys: list[str], attempt: int = 0
) -> None:
    comm = write(coord, c, sink, partition, keys, attempt)
    coord.acknowledge(c, Acknowledgement.of(coord.sinks[sink], partition, attempt, comm))


def test_ids_increase_and_expected_acks_one_per_sink_and_partition() -> None:
    coord, *_ = make(2)
    p1 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1], "s1": [0, 1]})
    assert p1.checkpoint_id == 1
    assert p1.expected == {("s0", 0), ("s0", 1), ("s1", 0), ("s1", 1)}
    p2 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0], "s1": [0]})
    assert p2.checkpoint_id == 2


def test_the_expected_set_is_built_once_per_set_of_participants() -> None:
    """#42: an epoch expects what its predecessor did unless the parallelism changed; the set and
    its table are kept, not built again per trigger; a closed subtask is still refused."""
    coord, *_ = make(2, max_concurrent=10)
    p1 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1], "s1": [0, 1]})
    p2 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": range(2), "s1": {1, 0}})
    assert p2.expected is p1.expected and p2.expected_table() is p1.expected_table()
    assert p1.expected_table().num_rows == 4
    p3 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2], "s1": [0, 1, 2]})
    assert p3.expected == {(s, p) for s in ("s0", "s1") for p in range(3)}
    assert p3.expected_table().num_rows == 6
    p4 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1], "s1": [0, 1]})
    assert p4.expected == p1.expected and p4.expected_table().num_rows == 4
    coord.subtask("s0", 1).close()
    with pytest.raises(IllegalTransitionError):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1], "s1": [0, 1]})


def test_participants_as_the_previous_sets_are_not_copied_and_still_checked() -> None:
    """#42: an epoch's participants (a set per sink, as epoch_participants gives) equal to the
    previous trigger's are taken as those frozen sets, without a copy per sink; a set that differs,
    or was changed in place after the trigger, gives its own; a closed subtask is still refused."""
    coord, *_ = make(2, max_concurrent=10)
    parts = {"s0": {0, 1}, "s1": {0, 1}}
    p1 = coord.trigger(CheckpointKind.CHECKPOINT, parts)
    p2 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": {1, 0}, "s1": frozenset({0, 1})})
    assert p2.expected is p1.expected and p2.expected_table() is p1.expected_table()
    parts["s1"].add(2)  # the caller's set, changed after the trigger: not what was expected
    p3 = coord.trigger(CheckpointKind.CHECKPOINT, parts)
    assert p1.expected == {(s, p) for s in ("s0", "s1") for p in range(2)}
    assert p3.expected == p1.expected | {("s1", 2)} and p3.expected_table().num_rows == 5
    # a participant new since the previous trigger is known, and no lifecycle is made for it
    assert all(p in coord.known_partitions(s) for s, p in p3.expected)
    assert not coord.subtasks
    p4 = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": {0, 1}})
    assert p4.expected == {("s0", 0), ("s0", 1)}
    coord.subtask("s0", 1).close()
    with pytest.raises(IllegalTransitionError):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": {0, 1}})


def test_subsumed_notification_notify_2_then_1() -> None:
    coord, system, *_ = make()
    for c in (1, 2):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
        ack(coord, c, "s0", 0, [f"k{c}"])
    coord.complete(1)
    coord.complete(2)
    assert coord.notify_checkpoint_complete(2).committed == 2
    assert set(system.committed) == {"s0-c1-p0-a0", "s0-c2-p0-a0"}
    assert coord.notify_checkpoint_complete(1).committed == 0  # no-op
    assert system.commit_calls == ["s0-c1-p0-a0", "s0-c2-p0-a0"]  # each committed exactly once, in order
    assert system.aborted == set()
    assert system.violations == []


def test_notify_with_partial_pending_commits_only_up_to_the_notified_checkpoint() -> None:
    coord, system, *_ = make()
    for c in (1, 2, 3):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
        ack(coord, c, "s0", 0, [f"a{c}"])
        ack(coord, c, "s0", 1, [f"b{c}"])
    coord.complete(1)
    coord.complete(2)
    coord.notify_checkpoint_complete(1)
    assert set(system.committed) == {"s0-c1-p0-a0", "s0-c1-p1-a0"}
    assert set(system.prepared) == {"s0-c2-p0-a0", "s0-c2-p1-a0", "s0-c3-p0-a0", "s0-c3-p1-a0"}
    # checkpoint 3 still pending; its transactions untouched
    coord.notify_checkpoint_complete(2)
    assert set(system.prepared) == {"s0-c3-p0-a0", "s0-c3-p1-a0"}
    with pytest.raises(IllegalTransitionError):
        coord.notify_checkpoint_complete(3)  # not complete yet


def test_an_acknowledgement_of_a_completed_checkpoint_is_refused_and_writes_nothing() -> None:
    # what lets a subtask forget the ids of completed checkpoints (the soak, #29 item 5)
    coord, system, *_ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["a1"])
    coord.complete(1)
    coord.notify_checkpoint_complete(1)
    with pytest.raises(IllegalTransitionError, match="COMPLETED"):
        ack(coord, 1, "s0", 0, ["again"])
    assert set(system.committed) == {"s0-c1-p0-a0"} and coord.durable_transactions() == []


def test_a_late_acknowledgement_is_refused_as_late_before_its_payload_is_decoded() -> None:
    # model seed 5701 (stop 57): a late acknowledgement whose payload would not decode raised the
    # decode failure, not the refusal; a checkpoint that is not pending decodes nothing
    coord, system, *_ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["a1"])
    coord.complete(1)
    coord.notify_checkpoint_complete(1)
    late = Acknowledgement.of(coord.sinks["s0"], 0, 0, write(coord, 1, "s0", 0, ["again"]))
    undecodable_once(coord.sinks["s0"])
    with pytest.raises(IllegalTransitionError, match="COMPLETED"):
        coord.acknowledge(1, late)
    with pytest.raises(IllegalTransitionError, match="UNKNOWN"):
        coord.acknowledge(7, late)
    assert set(system.committed) == {"s0-c1-p0-a0"} and coord.durable_transactions() == []
    with pytest.raises(ModelDecodeFailure):  # still armed: neither refusal decoded the payload
        decode_payload(coord.sinks["s0"], late.committable or b"")


def test_lost_notification_is_covered_by_the_next_one_and_pending_transactions_are_carried() -> None:
    coord, system, _storage, _ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["x"])
    coord.complete(1)  # notification of 1 lost
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 2, "s0", 0, ["y"])
    done = coord.complete(2)
    # checkpoint 2 holds checkpoint 1's uncommitted transaction too: the latest checkpoint suffices
    held = [payload_object(c.payload)["body"]["txn_id"] for c in done.metadata.sinks["s0"].committables]
    assert held == ["s0-c1-p0-a0", "s0-c2-p0-a0"]
    coord.notify_checkpoint_complete(2)
    assert set(system.committed) == {"s0-c1-p0-a0", "s0-c2-p0-a0"}
    assert system.lingering() == set()


def test_checkpoints_complete_in_trigger_order() -> None:
    coord, system, *_ = make()
    for _c in (1, 2):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 2, "s0", 0, ["b"])
    ack(coord, 1, "s0", 0, ["a"])
    with pytest.raises(IllegalTransitionError, match="older pending"):
        coord.complete(2)
    coord.complete(1)
    coord.complete(2)
    coord.notify_checkpoint_complete(2)
    assert system.committed_records() == ["a", "b"]


def test_complete_requires_every_acknowledgement() -> None:
    coord, *_ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    ack(coord, 1, "s0", 0, ["a"])
    with pytest.raises(IllegalTransitionError, match=r"missing acknowledgements: s0\[1\]"):
        coord.complete(1)


def test_duplicate_acknowledgement_is_refused_and_not_kept() -> None:
    coord, system, *_ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["a"], attempt=0)
    dup = write(coord, 1, "s0", 0, ["a"], attempt=1)
    with pytest.raises(DuplicateAcknowledgementError):
        coord.acknowledge(1, Acknowledgement.of(coord.sinks["s0"], 0, 1, dup))
    coord.complete(1)
    coord.notify_checkpoint_complete(1)
    assert set(system.committed) == {"s0-c1-p0-a0"}
    assert system.lingering() == {"s0-c1-p0-a1"}  # the caller's to abort (or abort_lingering's)


def test_unexpected_acknowledgement_is_illegal() -> None:
    coord, *_ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    with pytest.raises(IllegalTransitionError, match="unexpected"):
        coord.acknowledge(1, Acknowledgement("s0", 5, 0))
    with pytest.raises(IllegalTransitionError, match="UNKNOWN"):
        coord.acknowledge(9, Acknowledgement("s0", 0, 0))


def test_abort_aborts_the_checkpoint_newer_pending_ones_and_their_transactions() -> None:
    coord, system, *_ = make()
    for c in (1, 2, 3):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
        ack(coord, c, "s0", 0, [f"k{c}"])
    coord.complete(1)
    assert coord.abort_checkpoint(2, "task failed") == [2, 3]
    assert system.aborted == {"s0-c2-p0-a0", "s0-c3-p0-a0"}
    coord.notify_checkpoint_complete(1)
    assert set(system.committed) == {"s0-c1-p0-a0"}
    assert coord.abort_checkpoint(2, "again") == []  # idempotent
    with pytest.raises(IllegalTransitionError):
        coord.abort_checkpoint(1, "completed")
    with pytest.raises(IllegalTransitionError):
        coord.complete(2)
    # a late acknowledgement of an aborted checkpoint is discarded and its transaction aborted
    late = FakeCommittable("late", 2, 0, 1)
    system.begin("late", JOB, "s0", 2)
    system.prepared["late"] = system.open.pop("late")
    assert coord.acknowledge(2, Acknowledgement.of(coord.sinks["s0"], 0, 1, late)) is False
    assert "late" in system.aborted


def test_max_concurrent_checkpoints_raises() -> None:
    coord, *_ = make(max_concurrent=2)
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    with pytest.raises(CheckpointLimitError):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    assert coord.next_checkpoint_id == 3  # nothing consumed by the refused trigger


def test_timeout_aborts_pending_checkpoint() -> None:
    coord, system, _, clock = make(timeout_ms=1000)
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["a"])
    clock.advance(999)
    assert coord.check_timeouts() == []
    clock.advance(2)
    assert coord.check_timeouts() == [1]
    assert system.aborted == {"s0-c1-p0-a0"}


def test_publish_failure_aborts_the_checkpoint_and_raises() -> None:
    coord, system, storage, _ = make()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["a"])

    def boom(meta: object) -> None:
        raise OSError("disk full")

    storage.publish_hook = boom
    with pytest.raises(CheckpointStorageError, match="disk full"):
        coord.complete(1)
    assert system.aborted == {"s0-c1-p0-a0"}
    assert storage.list_checkpoints() == []


def test_flip147_42_43_44_through_the_coordinator() -> None:
    """finish; checkpoints 42, 43, 44 triggered (the sink opens a transaction for each, as
    FlinkKafkaProducer does); notify(43) commits ≤ 43 and closing aborts 44's; when 44 completes
    later, the sink is recorded fully finished and 44 holds nothing of it."""
    coord, system, _storage, _ = make(max_concurrent=3, emit_empty=True)
    coord.next_checkpoint_id = coord.last_triggered_id + 42
    coord.last_triggered_id = 41
    s = coord.sinks["s0"]
    # data written before finish is in the transaction that checkpoint 42 pre-commits
    txn = s.begin_transaction(WriterContext(JOB, "s0", 42, 0, 0, 1))
    s.write(txn, batch(["last", "records"]))
    finish_subtasks(coord, partitions=[0])
    assert coord.subtask("s0", 0).state is SubtaskState.WAITING_FOR_FINAL_CHECKPOINT
    for c in (42, 43, 44):
        assert coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]}).checkpoint_id == c
        coord.acknowledge(c, Acknowledgement.of(s, 0, 0, s.pre_commit(txn)))
        txn = s.begin_transaction(WriterContext(JOB, "s0", c + 1, 0, 0, 1))  # opened after finish
    coord.complete(42)
    coord.complete(43)
    result = coord.notify_checkpoint_complete(43)
    assert (result.committed, result.aborted, result.finished) == (2, 1, 1)
    assert set(system.committed) == {"s0-c42-p0-a0", "s0-c43-p0-a0"}
    assert system.aborted == {"s0-c44-p0-a0"}
    assert system.committed_records() == ["last", "records"]
    done = coord.complete(44)  # still valid
    assert done.metadata.fully_finished == ("s0",)
    assert "s0" not in done.metadata.sinks
    assert system.violations == []


def test_illegal_checkpoint_transitions() -> None:
    coord, *_ = make()
    with pytest.raises(IllegalTransitionError):
        coord.complete(1)  # never triggered
    with pytest.raises(IllegalTransitionError):
        coord.notify_checkpoint_complete(1)
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    ack(coord, 1, "s0", 0, ["a"])
    assert coord.pending(1).status is CheckpointStatus.PENDING
    coord.complete(1)
    with pytest.raises(IllegalTransitionError, match="COMPLETED"):
        coord.complete(1)
    with pytest.raises(IllegalTransitionError, match="COMPLETED"):
        coord.acknowledge(1, Acknowledgement("s0", 0, 0))


def test_the_transactions_old_enough_to_warn_of_make_no_younger_rows_objects() -> None:
    coord, _, _, clock = make(max_concurrent=3)
    for c in (1, 2):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
        acks = [
            Acknowledgement.of(coord.sinks["s0"], p, 0, write(coord, c, "s0", p, [f"k{c}{p}"]))
            for p in (0, 1)
        ]
        coord.acknowledge_table(c, acknowledgement_table(acks))
        clock.advance(1_000)
    old, young = coord.ledgers["s0"].blocks
    cutoff = old.pre_committed_ms
    assert [(t.checkpoint_id, t.partition) for t in coord.uncommitted_before(cutoff)] == [(1, 0), (1, 1)]
    assert len(young.made) == 0  # a younger block is skipped whole
    assert coord.uncommitted_before(cutoff - 1) == []
    assert len(coord.uncommitted_before(young.pre_committed_ms)) == 4


def test_a_run_makes_no_lifecycle_per_subtask_and_its_ends_still_reach_every_subtask() -> None:
    """#42: a trigger and a table intake on the common path make no lifecycle (a run's first epoch
    made one per subtask, ~1.3 s at 10⁵ × 3); the subtasks are known all the same, so a close
    aborts what every one of them pre-committed and keeps what is durable, a finish finishes
    every one, and a sink is fully finished only once every known subtask is."""
    coord, system, _, _ = make(max_concurrent=3)
    for c in (1, 2):
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
        acks = [
            Acknowledgement.of(coord.sinks["s0"], p, 0, write(coord, c, "s0", p, [f"k{c}{p}"]))
            for p in range(2)
        ]
        coord.acknowledge_table(c, acknowledgement_table(acks))
    assert not coord.subtasks and set(coord.known_partitions("s0")) == {0, 1}
    coord.complete(1)  # checkpoint 1 durable, 2 pre-committed
    coord.close_subtasks("failure")
    assert {p: lc.state for p, lc in coord.lifecycles_of("s0").items()} == dict.fromkeys(
        range(2), SubtaskState.CLOSED
    )
    assert len(system.aborted) == 2 and len(system.prepared) == 2  # 2's aborted, 1's kept for the restore
    assert all(t.checkpoint_id == 1 for t in coord.durable_transactions())

    coord, system, _, _ = make(max_concurrent=3)
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    finish_subtasks(coord, partitions=[0])  # the others are known: they finish too
    assert {p: lc.state for p, lc in coord.lifecycles_of("s0").items()} == dict.fromkeys(
        range(2), SubtaskState.WAITING_FOR_FINAL_CHECKPOINT
    )

    coord, system, _, _ = make(max_concurrent=3)
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    coord.abort_checkpoint(1, "test")
    coord.subtask("s0", 0).finish(coord.last_triggered_id)
    for parts in ([0, 1], [1], [1]):
        c = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": parts}).checkpoint_id
        if 0 in parts:
            coord.acknowledge(c, Acknowledgement("s0", 0, 0))
        coord.acknowledge_table(c, acknowledgement_table([Acknowledgement("s0", 1, 0)]))
        coord.complete(c)
        coord.notify_checkpoint_complete(c)
    assert coord.subtask("s0", 0).state is SubtaskState.FINISHED
    assert ("s0", 1) not in coord.subtasks  # RUNNING without a lifecycle: the sink is not finished
    assert "s0" not in coord.fully_finished
