"""The checkpoint-storage contract shared by the local/POSIX and object-store (S3, Azure, GCS)
backends (DESIGN.md §5).

Layout under a base location, per job::

    <base>/<job-id>/chk-<n>/_metadata                  checkpoints (retained: the last N)
    <base>/<job-id>/chk-<n>/committables-<i>-<run>-<a>.arrow  a sink's committables (format v3)
    <base>/<job-id>/chk-<n>/_final                     empty marker of a final checkpoint
    <base>/<job-id>/savepoints/sp-<n>/_metadata        savepoints (never deleted automatically)
    <base>/<job-id>/_drivers/driver-<e>                driver epochs (the newest claim owns the job)

(naming as pure functions: :mod:`twophase.coordinator.storage.layout`). Checkpoints and savepoints share one
id sequence: an id names at most one of them. Final checkpoints count as checkpoints for retention;
as at least one is kept, a final checkpoint stays until a later checkpoint exists.

Rules every backend keeps:
- publishing is atomic: a reader sees a complete ``_metadata`` or none (local: temp file, fsync,
  rename; S3 and Azure: a PUT with ``If-None-Match: *``; GCS: ``ifGenerationMatch=0``); publishing
  an id that exists raises; the committable files it names are created the same way, durable,
  before it (:mod:`~twophase.coordinator.storage.committable_files`);
- "latest" is found by listing, never from a mutable pointer file;
- files are created owner-only;
- a corrupt or unreadable ``_metadata`` raises :class:`~twophase.sinks.errors.CorruptCheckpointError`
  naming the file, a missing or altered committable file its subclass
  :class:`~twophase.sinks.errors.CommittableFileError`. Nothing silently falls back to an older
  checkpoint (the backends offer ``latest(fallback_to_valid=True)`` as an explicit opt-in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata


@dataclass(frozen=True, order=True)
class CheckpointRef:
    """Where one published checkpoint lives.

    Attributes:
        checkpoint_id: its id.
        kind: checkpoint, savepoint or final.
        location: the ``_metadata`` file's path or ``s3://bucket/key`` URI.
    """

    checkpoint_id: int
    kind: CheckpointKind
    location: str


class CheckpointStorage(Protocol):
    """Durable storage of one job's checkpoints and savepoints."""

    job_id: str

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """Atomically publish ``metadata`` (savepoints under ``savepoints/``).

        Every exit is one of three (DESIGN.md §12): it returns (published: visible and durable);
        it raises :class:`~twophase.sinks.errors.CheckpointNotPublishedError` (proven not
        visible: its transactions may be aborted); or it raises anything else, which means
        unknown (:class:`~twophase.sinks.errors.CheckpointPublishUnknownError` when the backend
        knows it: the coordinator keeps the transactions in doubt and the restore decides).

        Raises:
            CheckpointNotPublishedError: nothing is visible (the id exists already as another
                checkpoint, the metadata is not this job's, the write was refused before any
                attempt could land).
            CheckpointPublishUnknownError: it may or may not be visible, or durable.
        """
        ...

    def list_checkpoints(self) -> list[CheckpointRef]:
        """All published checkpoints and savepoints of the job, ascending by id."""
        ...

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """Read one checkpoint.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata; the message names the file.
        """
        ...

    def load_location(self, location: str) -> CheckpointMetadata:
        """Read a checkpoint or savepoint by its location (``--from-savepoint``).

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata; the message names the file.
        """
        ...

    def latest(self) -> CheckpointMetadata | None:
        """The newest published checkpoint or savepoint by listing, or ``None`` for a new job.

        Raises:
            CorruptCheckpointError: the newest one is corrupt (no silent fallback).
        """
        ...

    def mark_committed(self, location: str) -> None:
        """Record that every transaction of the checkpoint at ``location`` (its ``_metadata`` or
        directory) is committed: an empty ``_committed`` beside it. Idempotent.

        Raises:
            CheckpointStorageError: the marker cannot be written (callers treat it as best effort).
        """
        ...

    def is_committed(self, location: str) -> bool:
        """True if :meth:`mark_committed` ran for the checkpoint at ``location``.

        Raises:
            CheckpointStorageError: storage cannot be read.
        """
        ...

    def delete(self, ref: CheckpointRef) -> None:
        """Delete one checkpoint's directory. Idempotent."""
        ...

    def apply_retention(self, keep: int) -> list[CheckpointRef]:
        """Delete all but the newest ``keep`` (≥ 1) non-savepoint checkpoints; return what was deleted."""
        ...

    def driver_epochs(self) -> list[int]:
        """Every driver epoch claimed for the job and not yet pruned, ascending (issue #43).

        Raises:
            CheckpointStorageError: storage cannot be listed.
        """
        ...

    def create_driver_epoch(self, epoch: int, record: bytes) -> bool:
        """Create ``_drivers/driver-<epoch>`` holding ``record``, only if it does not exist (the
        same conditional create as a publish: a link, ``If-None-Match: *``).

        Returns:
            True if this call created it; False if it existed (another driver claimed it).

        Raises:
            CheckpointStorageError: it cannot be written, or the outcome is unknown.
        """
        ...

    def read_driver_epoch(self, epoch: int) -> bytes | None:
        """The record of driver epoch ``epoch``, or ``None`` if it is gone.

        Raises:
            CheckpointStorageError: storage cannot be read.
        """
        ...

    def prune_driver_epochs(self, below: int) -> None:
        """Delete the claims of driver epochs below ``below``. Idempotent; never deletes ``below``
        itself, so a fenced driver always still sees a newer epoch than its own.

        Raises:
            CheckpointStorageError: a deletion failed.
        """
        ...
