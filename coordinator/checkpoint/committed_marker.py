"""The committed marker of the latest checkpoint: written when its commit lands, by whatever
thread lands it (issue #26 item 2, DESIGN.md §12).

A restore from a checkpoint whose ``_committed`` marker exists re-commits nothing. Without it,
the restore re-commits every transaction the checkpoint holds; Kafka cannot tell a long-committed
transaction from an aborted one once its transactional id expired (KIP-98:
``transactional.id.expiration.ms``), so that re-commit answers LOST for visible data. With
asynchronous commit the commit lands on the committer thread, possibly long before the driver's
next action: the marker must follow the commit there, not wait for the driver.

:class:`CommittedMarker` owns which checkpoint is the latest published one and which one is
marked. It only ever marks the latest: the driver announces a newer checkpoint
(:meth:`CommittedMarker.published`) before retention may delete the older one, and both happen
under one lock, so a late commit never writes a marker into a deleted checkpoint's directory.
"""

from __future__ import annotations

import logging
import threading

from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


class CommittedMarker:
    """The latest checkpoint's committed marker (thread-safe; see the module docstring).

    Args:
        job_id: for log fields.
        storage: where the marker goes (``CheckpointStorage.mark_committed``).
    """

    def __init__(self, job_id: str, storage: CheckpointStorage) -> None:
        self._job_id = job_id
        self._storage = storage
        self._lock = threading.Lock()
        self._latest: tuple[int, str] | None = None
        self._marked: int | None = None

    def published(self, checkpoint_id: int, location: str) -> None:
        """Checkpoint ``checkpoint_id`` was published at ``location`` and is now the latest. Call
        it before retention may delete older checkpoints: their markers are no longer written."""
        with self._lock:
            self._latest = (checkpoint_id, location)

    def restored(self, checkpoint_id: int | None, location: str | None) -> None:
        """A restore made checkpoint ``checkpoint_id`` (at ``location``; ``None``: none) the latest
        and committed everything it holds (it wrote or found its marker)."""
        with self._lock:
            if checkpoint_id is None or location is None:
                self._latest = self._marked = None
            else:
                self._latest, self._marked = (checkpoint_id, location), checkpoint_id

    def is_marked(self, checkpoint_id: int) -> bool:
        """True if the marker of ``checkpoint_id`` was written (or found) by this runtime."""
        with self._lock:
            return self._marked == checkpoint_id

    def mark(self, checkpoint_id: int) -> bool:
        """Every transaction checkpoint ``checkpoint_id`` holds is committed: write its marker, if
        it is still the latest published checkpoint and not yet marked. Best effort: a storage
        error is logged (WARNING) and the restore then re-commits instead. Never raises.

        Returns:
            True if the marker was written now.
        """
        with self._lock:  # held across the write: a newer checkpoint's retention waits for it
            latest = self._latest
            if latest is None or latest[0] != checkpoint_id or self._marked == checkpoint_id:
                return False
            try:
                self._storage.mark_committed(latest[1])
            except Exception as e:  # only an optimisation of the restore: never fail a commit for it
                log_event(
                    log,
                    logging.WARNING,
                    "committed marker not written",
                    job=self._job_id,
                    checkpoint=checkpoint_id,
                    error=repr(e),
                )
                return False
            self._marked = checkpoint_id
        log_event(log, logging.INFO, "committed marker written", job=self._job_id, checkpoint=checkpoint_id)
        return True
