"""The committed marker (issue #26 item 2): only the latest published checkpoint is marked, once;
a storage error is logged, never raised."""

from __future__ import annotations

import logging

import pytest
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.committed_marker import CommittedMarker
from twophase.sinks.errors import CheckpointStorageError


def test_a_late_commit_never_marks_a_checkpoint_a_newer_one_replaced() -> None:
    storage = InMemoryCheckpointStorage("job")
    marker = CommittedMarker("job", storage)
    assert not marker.mark(1)  # nothing published yet
    marker.published(1, "memory://job/chk-1/_metadata")
    marker.published(2, "memory://job/chk-2/_metadata")  # retention may delete chk-1 now
    assert not marker.mark(1)
    assert not storage.is_committed("memory://job/chk-1/_metadata")
    assert marker.mark(2) and marker.is_marked(2)
    assert storage.is_committed("memory://job/chk-2/_metadata")
    assert not marker.mark(2)  # once


def test_a_restore_counts_as_marked() -> None:
    marker = CommittedMarker("job", InMemoryCheckpointStorage("job"))
    marker.restored(3, "memory://job/chk-3/_metadata")
    assert marker.is_marked(3) and not marker.mark(3)
    marker.restored(None, None)
    assert not marker.is_marked(3)


def test_a_marker_storage_refuses_is_logged_and_left_to_the_restore(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing(InMemoryCheckpointStorage):
        def mark_committed(self, location: str) -> None:
            raise CheckpointStorageError(f"cannot write {location}")

    marker = CommittedMarker("job", Refusing("job"))
    marker.published(1, "memory://job/chk-1/_metadata")
    with caplog.at_level(logging.WARNING):
        assert not marker.mark(1)
    assert not marker.is_marked(1)
    assert "committed marker not written" in caplog.text
