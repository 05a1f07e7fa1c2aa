"""The in-memory checkpoint storage keeps the storage contract (coordinator/storage/base.py)."""

from __future__ import annotations

import pytest
from support.memory_storage import InMemoryCheckpointStorage, MemoryStore

from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.errors import CheckpointStorageError, ConfigError, CorruptCheckpointError


def meta(cid: int, kind: CheckpointKind = CheckpointKind.CHECKPOINT, job: str = "job") -> CheckpointMetadata:
    snap = SinkSnapshot(
        2,
        (CommittableRecord(0, 0, payload_bytes({"kind": "k", "version": 1, "body": {"n": cid}})),),
        {1: {"s": cid}},
    )
    return CheckpointMetadata(job, cid, kind, 1000 + cid, {"s": snap}, {"batch_id": cid})


def test_satisfies_the_protocol() -> None:
    storage: CheckpointStorage = InMemoryCheckpointStorage("job")
    assert storage.latest() is None


def test_publish_load_round_trip_and_latest_by_id() -> None:
    s = InMemoryCheckpointStorage("job")
    for cid in (1, 2, 10):
        s.publish(meta(cid))
    ref = s.publish(meta(11, CheckpointKind.SAVEPOINT))
    assert ref.location == "memory://job/savepoints/sp-11/_metadata"
    assert [r.checkpoint_id for r in s.list_checkpoints()] == [1, 2, 10, 11]
    assert s.load(s.list_checkpoints()[2]) == meta(10)
    latest = s.latest()
    assert latest is not None and latest.checkpoint_id == 11
    assert s.load_location("memory://job/savepoints/sp-11") == meta(11, CheckpointKind.SAVEPOINT)


def test_publish_of_an_existing_id_raises() -> None:
    s = InMemoryCheckpointStorage("job")
    s.publish(meta(1))
    with pytest.raises(CheckpointStorageError, match="exists"):
        s.publish(meta(1))
    with pytest.raises(CheckpointStorageError, match="exists"):
        s.publish(meta(1, CheckpointKind.SAVEPOINT))  # one id sequence for both
    with pytest.raises(CheckpointStorageError, match="job 'other'"):
        s.publish(meta(2, job="other"))


def test_final_checkpoints_list_as_final() -> None:
    s = InMemoryCheckpointStorage("job")
    s.publish(meta(1, CheckpointKind.FINAL))
    assert s.list_checkpoints()[0].kind is CheckpointKind.FINAL
    assert s.load(s.list_checkpoints()[0]).kind is CheckpointKind.FINAL


def test_retention_keeps_newest_n_and_never_savepoints() -> None:
    s = InMemoryCheckpointStorage("job")
    s.publish(meta(1))
    s.publish(meta(2, CheckpointKind.SAVEPOINT))
    s.publish(meta(3))
    s.publish(meta(4, CheckpointKind.FINAL))
    deleted = s.apply_retention(1)
    assert [r.checkpoint_id for r in deleted] == [1, 3]
    assert [(r.checkpoint_id, r.kind) for r in s.list_checkpoints()] == [
        (2, CheckpointKind.SAVEPOINT),
        (4, CheckpointKind.FINAL),
    ]
    with pytest.raises(ConfigError):
        s.apply_retention(0)


def test_corrupt_latest_raises_naming_the_location() -> None:
    s = InMemoryCheckpointStorage("job")
    s.publish(meta(1))
    s.publish(meta(2))
    s.corrupt(2)
    with pytest.raises(CorruptCheckpointError, match="chk-2/_metadata"):
        s.latest()
    fallback = s.latest(fallback_to_valid=True)
    assert fallback is not None and fallback.checkpoint_id == 1


def test_jobs_sharing_a_store_are_separate_but_savepoints_are_reachable() -> None:
    store = MemoryStore()
    a, b = InMemoryCheckpointStorage("a", store), InMemoryCheckpointStorage("b", store)
    ref = a.publish(meta(1, CheckpointKind.SAVEPOINT, job="a"))
    assert b.list_checkpoints() == []
    assert b.load_location(ref.location).job_id == "a"
    with pytest.raises(CheckpointStorageError):
        b.load_location("memory://b/chk-9")


def test_delete_is_idempotent_and_bad_job_ids_refused() -> None:
    s = InMemoryCheckpointStorage("job")
    ref = s.publish(meta(1))
    s.delete(ref)
    s.delete(ref)
    assert s.list_checkpoints() == []
    with pytest.raises(ConfigError):
        InMemoryCheckpointStorage("../x")
