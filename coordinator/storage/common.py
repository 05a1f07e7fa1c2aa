"""Backend-independent pieces of checkpoint storage: decoding with validation, ordering, retention,
and what every object store shares: the retry policy, the scan of a job's keys into published
checkpoints and leftovers, and the settlement of a refused conditional publish.

Pure functions, so the local, S3, Azure and GCS backends keep exactly the same rules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import committable_files, layout
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
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
    read_file: Callable[[str], bytes],
    *,
    job_id: str | None = None,
    expected: CheckpointRef | None = None,
) -> CheckpointMetadata:
    """Parse ``_metadata`` bytes read from ``location`` and check them against where they were found.

    Args:
        data: the file's bytes (any readable version: see :mod:`twophase.coordinator.state.metadata`).
        location: the file path or ``s3://`` URI, for error messages.
        read_file: the bytes of a file beside it by name, raising
            :class:`~twophase.coordinator.storage.committable_files.MissingFile` when there is
            none (a version 3 manifest's committable files).
        job_id: if given, the metadata must belong to this job.
        expected: if given, the metadata's id and kind must match the listing's ref (a final
            checkpoint lives under ``chk-<n>`` with a ``_final`` marker; a savepoint under
            ``sp-<n>``). Final against plain is no corruption: the marker is a separate object that
            a losing publish of another driver may leave or remove (issue #43); ``_metadata`` decides.

    Raises:
        CorruptCheckpointError: not JSON or a damaged zlib stream, unknown format or version,
            missing fields, or metadata that contradicts its location; the message names
            ``location``. A :class:`~twophase.sinks.errors.CommittableFileError` when a committable
            file it names is missing or does not match it.
        CheckpointStorageError: a committable file cannot be read.
    """
    try:
        meta = committable_files.decode(data, location, read_file)
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


# ---------------------------------------------------------------- object stores (S3, Azure, GCS)


def store_retrying(
    attempts: int,
    max_wait_s: float,
    transient: Callable[[BaseException], bool],
    before_sleep: Callable[[RetryCallState], None],
) -> Retrying:
    """The retry policy of every object-store call: up to ``attempts`` tries while the error is
    ``transient``, exponential backoff (0.1 s doubling, capped at ``max_wait_s``) plus up to 0.1 s
    of jitter; the last error is re-raised as is."""
    return Retrying(
        retry=retry_if_exception(transient),
        stop=stop_after_attempt(attempts),
        # exponential backoff plus jitter, in terms tenacity 8.2 and later all have
        wait=wait_exponential(multiplier=0.1, max=max_wait_s) + wait_random(0, 0.1),
        before_sleep=before_sleep,
        reraise=True,
    )


def parse_rel_key(rel: str) -> tuple[int, bool, str] | None:
    """(id, is savepoint, object name) of a key relative to the job prefix, or None if foreign."""
    parts = rel.split("/")
    if len(parts) == 2:
        cid = layout.parse_checkpoint_dir(parts[0])
        return (cid, False, parts[1]) if cid is not None else None
    if len(parts) == 3 and parts[0] == layout.SAVEPOINTS_DIR:
        cid = layout.parse_savepoint_dir(parts[1])
        return (cid, True, parts[2]) if cid is not None else None
    return None


def scan_keys(
    rel_keys: Iterable[str], location_of: Callable[[int, CheckpointKind], str]
) -> tuple[list[CheckpointRef], list[tuple[int, CheckpointKind]]]:
    """Published refs among a job's keys (relative to its prefix), and (id, kind) of directories
    with objects but no ``_metadata`` (leftovers of crashed publishes).

    Args:
        rel_keys: every key under the job prefix, without the prefix.
        location_of: the location (URI of ``_metadata``) of a published checkpoint.
    """
    seen: dict[tuple[int, CheckpointKind], set[str]] = {}
    for rel in rel_keys:
        parsed = parse_rel_key(rel)
        if parsed is not None:
            cid, is_savepoint, name = parsed
            kind = CheckpointKind.SAVEPOINT if is_savepoint else CheckpointKind.CHECKPOINT
            seen.setdefault((cid, kind), set()).add(name)
    refs: list[CheckpointRef] = []
    orphans: list[tuple[int, CheckpointKind]] = []
    for (cid, kind), names in seen.items():
        if layout.METADATA_NAME not in names:
            orphans.append((cid, kind))
            continue
        if kind is CheckpointKind.CHECKPOINT and layout.FINAL_MARKER_NAME in names:
            kind = CheckpointKind.FINAL
        refs.append(CheckpointRef(cid, kind, location_of(cid, kind)))
    return sort_refs(refs), orphans


def metadata_key_of(path: str) -> str:
    """The ``_metadata`` key a location's path names: the path itself when it ends in
    ``/_metadata``, else ``<path>/_metadata`` (a checkpoint's directory)."""
    key = path.lstrip("/").rstrip("/")
    if not key.endswith("/" + layout.METADATA_NAME) and key != layout.METADATA_NAME:
        key = f"{key}/{layout.METADATA_NAME}"
    return key


def settle_refused_publish(uri: str, reason: str, *, retried: bool, error: BaseException) -> None:
    """A conditional publish refused for good (not a conflict): not published on its only attempt;
    unknown after an earlier attempt that failed transiently, since that one may have landed.

    Raises:
        CheckpointNotPublishedError: refused on its only attempt.
        CheckpointPublishUnknownError: refused after an attempt that may have landed.
    """
    if retried:
        raise CheckpointPublishUnknownError(
            f"publish of {uri} failed after an attempt that may have landed: {reason}"
        ) from error
    raise CheckpointNotPublishedError(f"publish of {uri} failed: {reason}") from error


def settle_conflicting_publish(
    uri: str, data: bytes, read_back: Callable[[], bytes], *, retried: bool, error: BaseException
) -> None:
    """A conditional publish answered "exists" (S3 and GCS 412, Azure 409 ``BlobAlreadyExists``).
    Returns when our own earlier attempt had landed: the object reads back as ``data``.

    Raises:
        CheckpointNotPublishedError: "exists" on the only attempt, or the object is another writer's.
        CheckpointPublishUnknownError: "exists" after a retry and reading it back failed (it may be
            our own).
    """
    if not retried:
        raise CheckpointNotPublishedError(f"checkpoint exists already: {uri}") from error
    try:
        ours = read_back() == data
    except Exception as e:  # cannot tell ours from another writer's
        raise CheckpointPublishUnknownError(
            f"publish of {uri} answered 'exists' after a retry, and reading it back failed, so it may "
            f"be our own: {e}"
        ) from e
    if not ours:
        raise CheckpointNotPublishedError(f"checkpoint exists already (another writer's): {uri}") from error
    log_event(
        log,
        logging.INFO,
        "conditional publish answered 'exists' after a retry; our own write had landed",
        uri=uri,
    )


def log_published(job_id: str, ref: CheckpointRef, size: int) -> None:
    """Log a published checkpoint (INFO, structured: job, id, kind, location, bytes)."""
    log_event(
        log,
        logging.INFO,
        "checkpoint published",
        job=job_id,
        checkpoint=ref.checkpoint_id,
        kind=ref.kind.value,
        location=ref.location,
        bytes=size,
    )


def log_deleted(job_id: str, ref: CheckpointRef) -> None:
    """Log a deleted checkpoint (INFO, structured: job, id, kind)."""
    log_event(
        log, logging.INFO, "checkpoint deleted", job=job_id, checkpoint=ref.checkpoint_id, kind=ref.kind.value
    )
