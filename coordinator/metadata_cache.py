"""Checkpoint metadata read once per runtime: retained checkpoints never change."""

from __future__ import annotations

from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage


class MetadataCache:
    """Checkpoint metadata by location, loaded from ``storage`` at most once (checkpoints never change).

    Args:
        storage: the job's checkpoint storage.
    """

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        self._by_location: dict[str, CheckpointMetadata] = {}

    def remember(self, location: str, metadata: CheckpointMetadata) -> None:
        """Keep ``metadata`` published (or loaded) at ``location``."""
        self._by_location[location] = metadata

    def forget(self, location: str) -> None:
        """Drop a deleted checkpoint."""
        self._by_location.pop(location, None)

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """The metadata of ``ref``.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata.
        """
        meta = self._by_location.get(ref.location)
        if meta is None:
            meta = self._by_location[ref.location] = self.storage.load(ref)
        return meta

    def retained(self, *, savepoints_only: bool = False) -> list[CheckpointMetadata]:
        """Every retained checkpoint and savepoint (only savepoints if asked), ascending by id."""
        return [
            self.load(ref)
            for ref in self.storage.list_checkpoints()
            if not savepoints_only or ref.kind is CheckpointKind.SAVEPOINT
        ]
