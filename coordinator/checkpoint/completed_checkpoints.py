"""The job's completed checkpoints as one runtime knows them (Flink's ``CompletedCheckpointStore``).

:class:`CompletedCheckpointStore` owns what a runtime remembers of published checkpoints: the
metadata cache (each checkpoint read and its committables decoded at most once), the checkpoint
the last restore started from, the latest completed one, and its committed marker. A restore and
every completed checkpoint go through its transitions; the epoch, the endings and the lingering
cleanup only read it.
"""

from __future__ import annotations

from collections.abc import Callable

from twophase.coordinator.checkpoint.checkpoint_state import CompletedCheckpoint
from twophase.coordinator.checkpoint.committed_marker import CommittedMarker
from twophase.coordinator.checkpoint.metadata_cache import MetadataCache
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointStorage


class CompletedCheckpointStore:
    """One runtime's view of the job's completed checkpoints (see the module docstring).

    Args:
        job_id: the job.
        storage: the job's checkpoint storage.

    Attributes:
        cache: checkpoint metadata by location, each read and decoded at most once.
        marker: the latest checkpoint's committed marker (written by whichever thread lands its
            commit).
    """

    def __init__(self, job_id: str, storage: CheckpointStorage) -> None:
        self.cache = MetadataCache(storage)
        self.marker = CommittedMarker(job_id, storage)
        self._restored: CheckpointMetadata | None = None
        self._last: CheckpointMetadata | None = None

    @property
    def restored(self) -> CheckpointMetadata | None:
        """The checkpoint the last restore started from (``None``: a fresh start)."""
        return self._restored

    @property
    def last(self) -> CheckpointMetadata | None:
        """The latest completed checkpoint: this run's newest, else the restored one."""
        return self._last

    def loaded(self, location: str, metadata: CheckpointMetadata) -> None:
        """A restore read (or published, for a savepoint's new lineage) ``metadata`` at ``location``."""
        self.cache.remember(location, metadata)

    def restored_from(self, metadata: CheckpointMetadata | None, location: str | None) -> None:
        """A restore finished from ``metadata`` at ``location`` (``None``: a fresh start): it is the
        latest completed checkpoint, and its committed marker is known from storage."""
        self._restored = metadata
        self._last = metadata
        self.marker.restored(metadata.checkpoint_id if metadata is not None else None, location)

    def completed(self, done: CompletedCheckpoint) -> None:
        """Checkpoint ``done`` was published: it is the latest; its committables stay decoded in
        the cache as the coordinator decoded them; the checkpoints retention deleted are forgotten."""
        self.cache.remember(done.ref.location, done.metadata, done.committables)
        for ref in done.retired:
            self.cache.forget(ref.location)
        self._last = done.metadata

    def mark_committed_if_done(self, holds_uncommitted_up_to: Callable[[int], bool]) -> None:
        """Once the run holds no transaction not yet confirmed committed of the latest checkpoint
        or an older one (``holds_uncommitted_up_to(checkpoint id)``, asked of the run's coordinator
        only while the marker is missing: it makes no transaction object, so a commit still
        running as columns stays columnar, issue #42), write its committed marker (best effort):
        a restore from it then re-commits nothing. Kafka cannot tell a long-committed transaction
        from an aborted one once its transactional id was reused or expired, so re-committing
        would report LOST for visible data. Usually the thread that landed the commit wrote it
        already; this catches the rest (commits confirmed after a subtask finished, a late
        notification)."""
        last = self._last
        if last is None or self.marker.is_marked(last.checkpoint_id):
            return
        if holds_uncommitted_up_to(last.checkpoint_id):
            return
        self.marker.mark(last.checkpoint_id)
