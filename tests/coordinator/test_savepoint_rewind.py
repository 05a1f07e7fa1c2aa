"""Rewinding a job to an older savepoint: the restored savepoint starts a new lineage, so a
failover or a driver restart before the next checkpoint continues from the savepoint, never from
the abandoned later checkpoints (Flink adds the restored savepoint to the completed-checkpoint
store for the same reason)."""

from __future__ import annotations

from support.fakes import FakeExternalSystem
from support.harness import TwoPhaseHarness, batch
from support.runtime_scenarios import harness, pos, records_of

from twophase.coordinator.run.recovery import starts_a_lineage
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.storage.base import CheckpointRef


def rewound() -> tuple[TwoPhaseHarness, FakeExternalSystem]:
    """Savepoint A after batch 1 ('a' in progress), savepoint B after batch 2, then a restore
    from A; returns the harness and the sinks' external system."""
    h, system = harness("k", "f")
    h.restore()
    h.write_epoch([[batch(["a"])]], source_position=pos(1))
    a = h.runtime.stop_with_savepoint(drain=False)
    h.restart_process(savepoint_location=a.location)
    h.write_epoch([[batch(["b"])]], source_position=pos(2))
    h.runtime.stop_with_savepoint(drain=False)
    result = h.restart_process(savepoint_location=a.location)
    assert result is not None and result.source_position == pos(1)
    return h, system


def test_a_failover_before_the_first_checkpoint_after_a_rewind_restores_the_savepoint() -> None:
    h, _ = rewound()
    result = h.runtime.failover(RuntimeError("the first epoch after the rewind failed"))
    assert result.source_position == pos(1)
    assert not h.runtime.replay_check(pos(2))  # batch 2 is replayed, not skipped


def test_a_driver_restart_before_the_first_checkpoint_after_a_rewind_restores_the_savepoint() -> None:
    h, _ = rewound()
    result = h.restart_process()
    assert result is not None and result.source_position == pos(1)
    assert not h.runtime.replay_check(pos(2))


def test_the_rewound_job_writes_the_replayed_batch_once_more_and_finishes_exactly() -> None:
    h, system = rewound()
    h.runtime.failover(RuntimeError("the first epoch after the rewind failed"))
    h.write_epoch([[batch(["b"])]], source_position=pos(2))
    h.runtime.finish()
    # Kafka-like: 'b' committed in the abandoned lineage and again by the replay (a rewind
    # re-emits, as in Flink); in-progress files: the abandoned lineage's file never lands
    assert records_of(system, "k") == ["a", "b", "b"]
    assert records_of(system, "f") == ["a", "b"]
    assert system.lingering() == set() and system.violations == []


def test_resuming_the_newest_savepoint_by_its_directory_starts_no_lineage() -> None:
    refs = [
        CheckpointRef(1, CheckpointKind.CHECKPOINT, "/c/job/chk-1/_metadata"),
        CheckpointRef(2, CheckpointKind.SAVEPOINT, "/c/job/savepoints/sp-2/_metadata"),
    ]
    assert not starts_a_lineage(refs, "/c/job/savepoints/sp-2/")
    assert not starts_a_lineage(refs, "/c/job/savepoints/sp-2/_metadata")
    assert starts_a_lineage(refs, "/c/job/chk-1")  # a rewind
    assert starts_a_lineage([], "s3://elsewhere/job/savepoints/sp-9/_metadata")  # a new directory
