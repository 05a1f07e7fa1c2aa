"""Backend-independent pieces of checkpoint storage: decoding with validation, ordering, retention.

Pure functions, so the local and S3 backends keep exactly the same rules.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CommittableDecodeError,
    ConfigError,
    CorruptCheckpointError,
)
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


def sort_refs(refs: Iterable[CheckpointRef]) -> list[CheckpointRef]:
    """Ascending by numeric id (``CheckpointKind`` is not orderable, so never compare refs directly)."""
    return sorted(refs, key=lambda r: (r.checkpoint_id, r.kind is CheckpointKind.SAVEPOINT, r.location))


def decode_metadata(
    data: bytes,
    location: str,
    *,
    job_id: str | None = None,
    expected: CheckpointRef | None = None,
) -> CheckpointMetadata:
    """Parse ``_metadata`` bytes read from ``location`` and check them against where they were found.

    Args:
        data: the file's bytes (any readable version: see :mod:`twophase.coordinator.metadata`).
        location: the file path or ``s3://`` URI, for error messages.
        job_id: if given, the metadata must belong to this job.
        expected: if given, the metadata's id and kind must match the listing's ref (a final
            checkpoint lives under ``chk-<n>`` with a ``_final`` marker; a savepoint under
            ``sp-<n>``). Final against plain is no corruption: the marker is a separate object that
            a losing publish of another driver may leave or remove (issue #43); ``_metadata`` decides.

    Raises:
        CorruptCheckpointError: not JSON or a damaged zlib stream, unknown format or version,
            missing fields, or metadata that contradicts its location; the message names
            ``location``.
    """
    try:
        meta = CheckpointMetadata.loads(data)
    except (CommittableDecodeError, RecursionError) as e:
        raise CorruptCheckpointError(f"corrupt checkpoint metadata {location}: {e}") from e
    if job_id is not None and meta.job_id != job_id:
        raise CorruptCheckpointError(
            f"corrupt checkpoint metadata {location}: it belongs to job {meta.job_id!r}, not {job_id!r}"
        )
    if expected is not None:
        if meta.checkpoint_id != expected.checkpoint_id:
            raise CorruptCheckpointError(
                f"corrupt checkpoint metadata {location}: it records checkpoint id {meta.checkpoint_id}, "
                f"but is stored as {expected.checkpoint_id}"
            )
        if {meta.kind, expected.kind} == {CheckpointKind.FINAL, CheckpointKind.CHECKPOINT}:
            # the _final marker is a separate object: two drivers publishing one id leave it
            # beside the winner's _metadata, or remove it; the kind inside _metadata decides
            log_event(
                log,
                logging.WARNING,
                "final marker disagrees with the checkpoint; its metadata decides",
                location=location,
                kind=meta.kind.value,
                listed_as=expected.kind.value,
            )
        elif meta.kind is not expected.kind:
            raise CorruptCheckpointError(
                f"corrupt checkpoint metadata {location}: it records kind {meta.kind.value!r}, "
                f"but is stored as {expected.kind.value!r}"
            )
    return meta


def check_publishable(metadata: CheckpointMetadata, job_id: str) -> None:
    """Refuse metadata that must never be published by this job's storage.

    Raises:
        CheckpointNotPublishedError: wrong job id, or a checkpoint id below 1.
    """
    if metadata.job_id != job_id:
        raise CheckpointNotPublishedError(
            f"refusing to publish checkpoint {metadata.checkpoint_id} of job {metadata.job_id!r} "
            f"into the storage of job {job_id!r}"
        )
    cid = metadata.checkpoint_id
    if isinstance(cid, bool) or not isinstance(cid, int) or cid < 1:
        raise CheckpointNotPublishedError(f"refusing to publish checkpoint id {cid!r}: ids are integers >= 1")


def plan_retention(refs: Iterable[CheckpointRef], keep: int) -> list[CheckpointRef]:
    """Which published refs retention deletes: all but the newest ``keep`` non-savepoint checkpoints.

    Final checkpoints count as checkpoints. Because ``keep`` ≥ 1 the newest non-savepoint is never
    deleted, so a final checkpoint survives until at least ``keep`` newer checkpoints exist.
    Savepoints are never deleted automatically (DESIGN.md §5).

    Raises:
        ConfigError: ``keep`` < 1.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"checkpoint retention must keep at least 1 checkpoint, got {keep!r}")
    candidates = [r for r in sort_refs(refs) if r.kind is not CheckpointKind.SAVEPOINT]
    return candidates[:-keep] if len(candidates) > keep else []


def latest_by_listing(
    storage: CheckpointStorage, *, fallback_to_valid: bool = False
) -> CheckpointMetadata | None:
    """The newest published checkpoint or savepoint of ``storage`` by listing, or ``None``.

    Args:
        storage: any backend.
        fallback_to_valid: opt-in only: skip corrupt checkpoints (logged as errors) and return the
            newest valid one. Off by default: the protocol never falls back silently (DESIGN.md §5).

    Raises:
        CorruptCheckpointError: the newest one is corrupt (and ``fallback_to_valid`` is off).
        CheckpointStorageError: listing or reading failed.
    """
    for ref in reversed(storage.list_checkpoints()):
        try:
            return storage.load(ref)
        except CorruptCheckpointError as e:
            if not fallback_to_valid:
                raise
            log_event(
                log,
                logging.ERROR,
                "skipping corrupt checkpoint (fallback_to_valid)",
                job=storage.job_id,
                checkpoint=ref.checkpoint_id,
                error=e,
            )
    return None
