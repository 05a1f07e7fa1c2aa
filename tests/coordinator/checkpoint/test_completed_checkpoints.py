"""The completed checkpoints one runtime knows (#25): a restore and each published checkpoint move
them; the committed marker is written only once nothing the run holds for the latest is uncommitted."""

from __future__ import annotations

from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.checkpoint_state import CompletedCheckpoint
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata


def meta(checkpoint_id: int) -> CheckpointMetadata:
    return CheckpointMetadata("job", checkpoint_id, CheckpointKind.CHECKPOINT, 0, {})


def test_a_restore_then_completed_checkpoints_move_the_latest() -> None:
    storage = InMemoryCheckpointStorage("job")
    store = CompletedCheckpointStore("job", storage)
    assert store.restored is None and store.last is None
    first = storage.publish(meta(1))
    store.loaded(first.location, meta(1))
    store.restored_from(meta(1), first.location)
    assert store.restored == store.last == meta(1)
    assert store.marker.is_marked(1)  # a restore re-commits what it holds: it counts as marked
    second = storage.publish(meta(2))
    store.completed(CompletedCheckpoint(meta(2), second, 0.0, None, 0, retired=(first,)))
    assert store.restored == meta(1) and store.last == meta(2)
    assert [m.checkpoint_id for _, m in store.cache.retained_at()] == [1, 2]  # storage still lists 1


def test_the_marker_waits_for_every_commit_of_the_latest_checkpoint() -> None:
    storage = InMemoryCheckpointStorage("job")
    store = CompletedCheckpointStore("job", storage)
    ref = storage.publish(meta(3))
    store.marker.published(3, ref.location)
    store.completed(CompletedCheckpoint(meta(3), ref, 0.0, None, 0))
    held = [2, 4]  # the checkpoint ids of the transactions the run holds uncommitted
    asked: list[int] = []

    def holds_uncommitted_up_to(checkpoint_id: int) -> bool:
        asked.append(checkpoint_id)
        return any(c <= checkpoint_id for c in held)

    store.mark_committed_if_done(holds_uncommitted_up_to)
    assert not storage.is_committed(ref.location)  # checkpoint 2's transaction is still held
    held.remove(2)
    store.mark_committed_if_done(holds_uncommitted_up_to)  # only a newer checkpoint's: 3 is done
    assert asked == [3, 3]
    assert storage.is_committed(ref.location) and store.marker.is_marked(3)
