"""In-memory checkpoint storage for the test harness and unit tests.

Same contract as the local and S3 backends (:mod:`twophase.coordinator.storage.base`), and the same
backend-independent rules (:mod:`twophase.coordinator.storage.common`): metadata is stored as the JSON bytes
of ``CheckpointMetadata.dumps`` and parsed again on every load, so tests exercise the real
encoding; publishing an id that exists (as a checkpoint or a savepoint) raises
:class:`~twophase.sinks.errors.CheckpointStorageError`; "latest" is the highest id by listing; retention
deletes all but the newest N non-savepoint checkpoints (final checkpoints count as checkpoints).

Locations look like ``memory://<job-id>/chk-<n>/_metadata`` and
``memory://<job-id>/savepoints/sp-<n>/_metadata``. Several storages may share one
:class:`MemoryStore` (a "file system"), so a new job can restore another job's savepoint by location,
and a restarted process (a new runtime) sees what the crashed one published.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import (
    CheckpointWriter,
    MissingFile,
    file_run,
    leftovers_to_delete,
)
from twophase.coordinator.storage.common import (
    check_publishable,
    decode_metadata,
    latest_by_listing,
    plan_retention,
    sort_refs,
)
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
    CheckpointStorageError,
)
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

SCHEME = "memory://"


class MemoryStore:
    """A process-wide map ``location → bytes`` standing in for a file system. Thread-safe."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.lock = threading.RLock()


class InMemoryCheckpointStorage:
    """Checkpoints of one job, kept in memory (a :class:`MemoryStore`).

    Args:
        job_id: the job's stable id, one safe path segment.
        store: the shared "file system"; a new one if omitted.

    Attributes:
        publish_hook: test hook called with the metadata before each publish; it may raise to
            simulate a failed write (nothing is published then: ``CheckpointNotPublishedError``,
            unless it raises ``CheckpointPublishUnknownError`` itself).
        after_publish_hook: test hook called after the metadata became visible; it may raise to
            simulate a write whose outcome the writer never learns (the error is raised as
            :class:`~twophase.sinks.errors.CheckpointPublishUnknownError`; the checkpoint stays).
        published: ids published so far, in order (including ones deleted since).
        refuse_markers: how many more ``mark_committed`` calls fail (a storage outage, or the
            driver dying between a commit and its marker, as far as the marker is concerned).
        between_check_and_put: test hook called with the metadata after the existence check and
            before the ``_final`` marker and the conditional create of ``_metadata``, outside the
            store's lock: the S3 backend's separate steps, which another driver of the job may
            interleave (issue #43).
        between_files_and_manifest: test hook called with the metadata once its committable files
            are created and before its manifest is (checkpoint format v3), outside the store's
            lock: a crash there leaves files no manifest names; a stale driver may be there.
        before_retention: test hook called at the start of :meth:`apply_retention` (a driver dying
            after its manifest was published and before retention ran).
        writer: this storage's writer of version 3 checkpoints (its run token names its files).
        next_driver_listing: if set, what the next ``driver_epochs`` answers, once: a LIST
            answered before a newer driver's claim landed (issue #43).
        before_next_listing: if set, called once (then cleared) at the start of the next
            :meth:`list_checkpoints`, outside the store's lock: e.g. another driver acting after
            a restore's fence check and before it reads the latest checkpoint (issue #42).

    Raises:
        ConfigError: ``job_id`` is not a safe path segment.
    """

    def __init__(self, job_id: str, store: MemoryStore | None = None) -> None:
        self.job_id: str = layout.validate_job_id(job_id)
        self.store = store if store is not None else MemoryStore()
        self.publish_hook: Callable[[CheckpointMetadata], None] | None = None
        self.after_publish_hook: Callable[[CheckpointMetadata], None] | None = None
        self.published: list[int] = []
        self.refuse_markers = 0
        self.between_check_and_put: Callable[[CheckpointMetadata], None] | None = None
        self.between_files_and_manifest: Callable[[CheckpointMetadata], None] | None = None
        self.before_retention: Callable[[], None] | None = None
        self.writer = CheckpointWriter()
        self.next_driver_listing: list[int] | None = None
        self.before_next_listing: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"InMemoryCheckpointStorage({self.job_id!r})"

    def location(self, checkpoint_id: int, kind: CheckpointKind) -> str:
        """The ``_metadata`` location of checkpoint ``checkpoint_id`` of ``kind`` (it may not exist)."""
        rel = layout.relative_dir(checkpoint_id, kind)
        return f"{SCHEME}{self.job_id}/{rel}/{layout.METADATA_NAME}"

    def _final_marker(self, checkpoint_id: int) -> str:
        rel = layout.relative_dir(checkpoint_id, CheckpointKind.CHECKPOINT)
        return f"{SCHEME}{self.job_id}/{rel}/{layout.FINAL_MARKER_NAME}"

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """Publish ``metadata`` atomically (one dict assignment under a lock).

        Every exit is one of three, as in the real backends: it returns (published), raises
        :class:`~twophase.sinks.errors.CheckpointNotPublishedError` (nothing visible) or
        :class:`~twophase.sinks.errors.CheckpointPublishUnknownError` (outcome unknown).

        Raises:
            CheckpointNotPublishedError: the id exists (as a checkpoint or savepoint), the metadata
                belongs to another job, or ``publish_hook`` failed.
            CheckpointPublishUnknownError: ``after_publish_hook`` failed, or ``publish_hook`` raised it.
        """
        check_publishable(metadata, self.job_id)
        cid, kind = metadata.checkpoint_id, metadata.kind
        target = self.location(cid, kind)
        with self.store.lock:
            self._refuse_existing(cid)
            if self.publish_hook is not None:
                try:
                    self.publish_hook(metadata)
                except (CheckpointNotPublishedError, CheckpointPublishUnknownError):
                    raise
                except Exception as e:  # a refused write: nothing landed
                    raise CheckpointNotPublishedError(f"cannot publish checkpoint {cid}: {e}") from e
        if self.between_check_and_put is not None:
            self.between_check_and_put(metadata)
        encoded = self.writer.encode(metadata)
        directory = target.rsplit("/", 1)[0]
        with self.store.lock:
            # the _final marker, a separate object written before _metadata as on S3 (a stale one
            # must not mark a plain checkpoint); the committable files, each a conditional create
            if kind is CheckpointKind.FINAL:
                self.store.files[self._final_marker(cid)] = b""
            else:
                self.store.files.pop(self._final_marker(cid), None)
            for name, data in encoded.files:
                if f"{directory}/{name}" in self.store.files:
                    raise CheckpointNotPublishedError(f"committable file {directory}/{name} exists")
                self.store.files[f"{directory}/{name}"] = data
        if self.between_files_and_manifest is not None:
            self.between_files_and_manifest(metadata)
        with self.store.lock:  # then the manifest's conditional create (If-None-Match: *)
            try:
                self._refuse_existing(cid)
            except CheckpointNotPublishedError:
                for name, _ in encoded.files:  # proven not published: this publish's own files go
                    self.store.files.pop(f"{directory}/{name}", None)
                raise
            self.store.files[target] = encoded.manifest
            self.published.append(cid)
            if self.after_publish_hook is not None:
                try:
                    self.after_publish_hook(metadata)
                except Exception as e:
                    raise CheckpointPublishUnknownError(f"checkpoint {cid}: outcome unknown: {e}") from e
        log_event(
            log,
            logging.INFO,
            "checkpoint published",
            job=self.job_id,
            checkpoint=cid,
            kind=kind.value,
            location=target,
        )
        return CheckpointRef(cid, kind, target)

    def _refuse_existing(self, cid: int) -> None:
        for k in (CheckpointKind.CHECKPOINT, CheckpointKind.SAVEPOINT):
            if self.location(cid, k) in self.store.files:
                raise CheckpointNotPublishedError(
                    f"checkpoint {cid} of job {self.job_id!r} exists: {self.location(cid, k)}"
                )

    def list_checkpoints(self) -> list[CheckpointRef]:
        """All published checkpoints and savepoints of the job, ascending by id."""
        if self.before_next_listing is not None:
            hook, self.before_next_listing = self.before_next_listing, None
            hook()
        prefix = f"{SCHEME}{self.job_id}/"
        suffix = "/" + layout.METADATA_NAME
        refs: list[CheckpointRef] = []
        with self.store.lock:
            names = [n for n in self.store.files if n.startswith(prefix) and n.endswith(suffix)]
            for name in names:
                parts = name[len(prefix) : -len(suffix)].split("/")
                if len(parts) == 1 and (cid := layout.parse_checkpoint_dir(parts[0])) is not None:
                    final = self._final_marker(cid) in self.store.files
                    refs.append(
                        CheckpointRef(cid, CheckpointKind.FINAL if final else CheckpointKind.CHECKPOINT, name)
                    )
                elif (
                    len(parts) == 2
                    and parts[0] == layout.SAVEPOINTS_DIR
                    and (sid := layout.parse_savepoint_dir(parts[1])) is not None
                ):
                    refs.append(CheckpointRef(sid, CheckpointKind.SAVEPOINT, name))
        return sort_refs(refs)

    def _read(self, location: str) -> bytes:
        with self.store.lock:
            data = self.store.files.get(location)
        if data is None:
            raise CheckpointStorageError(f"no checkpoint at {location}")
        return data

    def _sibling_reader(self, location: str) -> Callable[[str], bytes]:
        directory = location.rsplit("/", 1)[0]

        def read(name: str) -> bytes:
            with self.store.lock:
                data = self.store.files.get(f"{directory}/{name}")
            if data is None:
                raise MissingFile(f"{directory}/{name}")
            return data

        return read

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """Read one checkpoint of this job; its id and kind must match ``ref``.

        Raises:
            CorruptCheckpointError: invalid metadata; the message names the location.
            CheckpointStorageError: no such checkpoint.
        """
        location = self.location(ref.checkpoint_id, ref.kind)
        return decode_metadata(
            self._read(location), location, self._sibling_reader(location), job_id=self.job_id, expected=ref
        )

    def load_location(self, location: str) -> CheckpointMetadata:
        """Read a checkpoint or savepoint by location (its ``_metadata`` or its directory).

        The metadata may belong to another job sharing the store.

        Raises:
            CorruptCheckpointError: invalid metadata; the message names the location.
            CheckpointStorageError: nothing is at ``location``.
        """
        loc = location.rstrip("/")
        if not loc.endswith("/" + layout.METADATA_NAME):
            loc = f"{loc}/{layout.METADATA_NAME}"
        return decode_metadata(self._read(loc), loc, self._sibling_reader(loc))

    def latest(self, *, fallback_to_valid: bool = False) -> CheckpointMetadata | None:
        """The newest published checkpoint or savepoint by listing, or ``None`` for a new job.

        Raises:
            CorruptCheckpointError: the newest one is corrupt (and ``fallback_to_valid`` is off).
        """
        return latest_by_listing(self, fallback_to_valid=fallback_to_valid)

    def mark_committed(self, location: str) -> None:
        """An empty ``_committed`` beside the checkpoint's ``_metadata``. Idempotent.

        Raises:
            CheckpointStorageError: while :attr:`refuse_markers` is positive.
        """
        with self.store.lock:
            if self.refuse_markers > 0:
                self.refuse_markers -= 1
                raise CheckpointStorageError(f"committed marker of {location} refused")
            self.store.files[layout.committed_marker_of(location)] = b""

    def is_committed(self, location: str) -> bool:
        """True if the checkpoint's ``_committed`` marker exists."""
        with self.store.lock:
            return layout.committed_marker_of(location) in self.store.files

    def delete(self, ref: CheckpointRef) -> None:
        """Delete one checkpoint (savepoints too, when asked explicitly). Idempotent."""
        with self.store.lock:  # _metadata first, then everything else in its directory
            location = self.location(ref.checkpoint_id, ref.kind)
            self.store.files.pop(location, None)
            directory = location.rsplit("/", 1)[0] + "/"
            for name in [n for n in self.store.files if n.startswith(directory)]:
                del self.store.files[name]
        log_event(
            log,
            logging.INFO,
            "checkpoint deleted",
            job=self.job_id,
            checkpoint=ref.checkpoint_id,
            kind=ref.kind.value,
        )

    def apply_retention(self, keep: int) -> list[CheckpointRef]:
        """Delete all but the newest ``keep`` (≥ 1) non-savepoint checkpoints; return what was deleted.

        Raises:
            ConfigError: ``keep`` < 1.
        """
        if self.before_retention is not None:
            self.before_retention()
        refs = self.list_checkpoints()
        doomed = plan_retention(refs, keep)
        for ref in doomed:
            self.delete(ref)
        newest = refs[-1].checkpoint_id if refs else 0
        with self.store.lock:  # leftovers of publishes that never completed, below the newest id
            for directory, names in self._directories().items():
                cid = layout.parse_checkpoint_dir(directory.rsplit("/", 1)[-1])
                if cid is None or cid >= newest or layout.METADATA_NAME in names:
                    continue
                for name in leftovers_to_delete(sorted(names), self.writer):
                    del self.store.files[f"{directory}/{name}"]
        return doomed

    def _directories(self) -> dict[str, set[str]]:
        """Checkpoint directory → the names in it (held lock)."""
        prefix = f"{SCHEME}{self.job_id}/"
        out: dict[str, set[str]] = {}
        for key in self.store.files:
            if key.startswith(prefix) and "/" in key[len(prefix) :]:
                directory, name = key.rsplit("/", 1)
                out.setdefault(directory, set()).add(name)
        return out

    def committable_files(self, checkpoint_id: int | None = None) -> list[str]:
        """Every committable file of the job (of checkpoint ``checkpoint_id`` if given), sorted."""
        with self.store.lock:
            return sorted(
                f"{d}/{n}"
                for d, names in self._directories().items()
                for n in names
                if file_run(n) is not None
                and (
                    checkpoint_id is None
                    or d.rsplit("/", 1)[-1] in (f"chk-{checkpoint_id}", f"sp-{checkpoint_id}")
                )
            )

    # -- driver epochs (issue #43) ---------------------------------------------------------------

    def _driver_key(self, epoch: int) -> str:
        return f"{SCHEME}{self.job_id}/{layout.DRIVERS_DIR}/{layout.driver_epoch_name(epoch)}"

    def driver_epochs(self) -> list[int]:
        """Every driver epoch claimed and not pruned, ascending (or :attr:`next_driver_listing`, once)."""
        if self.next_driver_listing is not None:
            listing, self.next_driver_listing = self.next_driver_listing, None
            return listing
        prefix = f"{SCHEME}{self.job_id}/{layout.DRIVERS_DIR}/"
        with self.store.lock:
            names = [n[len(prefix) :] for n in self.store.files if n.startswith(prefix)]
        return sorted(e for e in map(layout.parse_driver_epoch, names) if e is not None)

    def create_driver_epoch(self, epoch: int, record: bytes) -> bool:
        """Create the claim of ``epoch`` if absent; False if another driver holds it."""
        with self.store.lock:
            key = self._driver_key(epoch)
            if key in self.store.files:
                return self.store.files[key] == record
            self.store.files[key] = record
            return True

    def read_driver_epoch(self, epoch: int) -> bytes | None:
        """The record of driver epoch ``epoch``, or ``None``."""
        with self.store.lock:
            return self.store.files.get(self._driver_key(epoch))

    def prune_driver_epochs(self, below: int) -> None:
        """Delete the claims of driver epochs below ``below``."""
        with self.store.lock:
            for epoch in self.driver_epochs():
                if epoch < below:
                    self.store.files.pop(self._driver_key(epoch), None)

    # -- test helpers ---------------------------------------------------------------------------

    def corrupt(self, checkpoint_id: int, data: bytes = b"{not json") -> None:
        """Overwrite a published checkpoint's ``_metadata`` with ``data`` (tests of corruption).

        Raises:
            CheckpointStorageError: no checkpoint ``checkpoint_id`` is published.
        """
        for ref in self.list_checkpoints():
            if ref.checkpoint_id == checkpoint_id:
                with self.store.lock:
                    self.store.files[ref.location] = data
                return
        raise CheckpointStorageError(f"no checkpoint {checkpoint_id} to corrupt")
