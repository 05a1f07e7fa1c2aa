"""Checkpoint storage on any object store with an atomic create-if-absent: Azure Blob Storage and
Google Cloud Storage (issue #46), over a small adapter per service.

:class:`ObjectCheckpointStorage` keeps the contract of the S3 backend (DESIGN.md §5, §12) and the
same layout (:mod:`twophase.coordinator.storage.layout`); an :class:`ObjectStore` adapter does the
calls and reads the service's answers into four kinds of :class:`StoreError`: the object is
missing, it exists (the conditional create lost), a transient failure worth retrying, or a refusal
for good (a one-line message naming the setting or permission to change). Anything else an adapter
lets through is an answer nobody can classify: a publish that meets one is unknown.

Publishing is one conditional create (Azure ``Put Blob`` with ``If-None-Match: *``, GCS
``ifGenerationMatch=0``): the object appears whole or not at all and an existing id is never
overwritten. Transient failures are retried with tenacity (the adapters' SDKs have their own retries
turned off, so that this class alone knows whether an earlier attempt may have landed). Every exit
of :meth:`ObjectCheckpointStorage.publish` is published, not published or unknown, in the same
cases as the S3 backend's (tests/coordinator/storage/test_object_store.py lists them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

from tenacity import RetryCallState

from twophase.coordinator.state.metadata import METADATA_MEDIA_TYPE, CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import (
    FILE_MEDIA_TYPE,
    CheckpointWriter,
    MissingFile,
    leftovers_to_delete,
)
from twophase.coordinator.storage.common import (
    check_publishable,
    decode_metadata,
    latest_by_listing,
    log_deleted,
    log_published,
    metadata_key_of,
    plan_retention,
    scan_keys,
    settle_conflicting_publish,
    settle_refused_publish,
    store_retrying,
)
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    ConfigError,
    CorruptCheckpointError,
)
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

T = TypeVar("T")


class StoreError(Exception):
    """An object-store answer an adapter has read; the message is one line without secrets.

    Attributes:
        earlier_attempt: the SDK itself had retried before this answer (S3's botocore), so an
            earlier attempt may have landed.
    """

    def __init__(self, message: str, *, earlier_attempt: bool = False) -> None:
        super().__init__(message)
        self.earlier_attempt = earlier_attempt


class ObjectMissing(StoreError):
    """The object does not exist (HTTP 404)."""


class ObjectExists(StoreError):
    """A create-if-absent found the object (Azure 409 ``BlobAlreadyExists`` or 412
    ``ConditionNotMet``; GCS 412 or 409)."""


class TransientStoreError(StoreError):
    """Worth retrying: a timeout, a connection error, throttling (429) or a server error (5xx)."""


class StoreRefused(StoreError):
    """Refused for good: credentials or permissions (401/403), a bad request, a missing container."""


class ObjectStore(Protocol):
    """One container (Azure) or bucket (GCS) and the calls the checkpoint storage makes in it.

    Every method raises a :class:`StoreError` for an answer it could read, and lets anything else
    through unchanged. Keys are ``/``-separated object names.
    """

    service: str
    """The service's name for logs and messages: ``"S3"``, ``"Azure"``, ``"GCS"``."""

    def uri(self, key: str) -> str:
        """The location of ``key``, in the URL form the user gave (``abfss://…``, ``gs://…``)."""
        ...

    def at(self, location: str) -> tuple[ObjectStore, str]:
        """The store (this one, or another container/bucket of the same account/client) and key of a
        location in this store's URL form.

        Raises:
            ConfigError: ``location`` is not such a URL.
        """
        ...

    def create(self, key: str, data: bytes, content_type: str | None) -> None:
        """Create ``key`` with ``data`` only if it does not exist (atomic); ObjectExists if it does."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` with ``data``."""
        ...

    def get(self, key: str) -> bytes:
        """The whole object; ObjectMissing if there is none."""
        ...

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a flat listing, all pages)."""
        ...

    def delete(self, key: str) -> None:
        """Delete ``key``; ObjectMissing if there is none (S3: success)."""
        ...

    def delete_keys(self, keys: list[str]) -> None:
        """Delete every key of ``keys`` (batched where the service can); missing ones are no error."""
        ...


def call_classified(fn: Callable[[], T], classify: Callable[[BaseException], StoreError | None]) -> T:
    """``fn()``, with an error it raises replaced by the :class:`StoreError` ``classify`` reads it
    as; an error ``classify`` cannot read (None) propagates unchanged."""
    try:
        return fn()
    except Exception as e:
        mapped = classify(e)
        if mapped is None:
            raise
        raise mapped from e


class StoreBase:
    """What every adapter shares: a repr naming the store's root location, never a credential."""

    def uri(self, key: str) -> str:  # pragma: no cover - the store's own
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri('')!r})"


class DeletesOneByOne(StoreBase):
    """``delete_keys`` for a store without batch deletes: one ``delete`` per key."""

    def delete(self, key: str) -> None:  # pragma: no cover - the store's own
        raise NotImplementedError

    def delete_keys(self, keys: list[str]) -> None:
        """Delete each key; missing ones are no error."""
        for key in keys:
            with contextlib.suppress(ObjectMissing):
                self.delete(key)


class ObjectCheckpointStorage:
    """Checkpoints of one job under ``<store>/<prefix>/<job_id>/`` on an :class:`ObjectStore`.

    Args:
        store: the adapter (Azure container, GCS bucket).
        prefix: key prefix shared by jobs (may be empty; surrounding ``/`` are ignored).
        job_id: the job's stable id, one safe path segment.
        retry_attempts: attempts per call for transient errors (≥ 1).
        retry_max_wait_s: cap of the exponential backoff between attempts, seconds.

    Attributes:
        writer: names and encodes this run's committable files (format v3), created with the same
            conditional create before the manifest.

    Raises:
        ConfigError: bad prefix, job id or retry settings.
    """

    def __init__(
        self,
        store: ObjectStore,
        prefix: str,
        job_id: str,
        *,
        retry_attempts: int = 6,
        retry_max_wait_s: float = 10.0,
    ) -> None:
        if retry_attempts < 1 or retry_max_wait_s < 0:
            raise ConfigError("retry_attempts must be >= 1 and retry_max_wait_s >= 0")
        self.job_id: str = layout.validate_job_id(job_id)
        self.prefix = prefix.strip("/")
        if self.prefix and any(seg in ("", ".", "..") for seg in self.prefix.split("/")):
            raise ConfigError(f"invalid checkpoint key prefix {prefix!r}: empty, '.' or '..' segments")
        self.job_prefix = f"{self.prefix}/{self.job_id}/" if self.prefix else f"{self.job_id}/"
        self.store = store
        self.writer = CheckpointWriter()
        self._retry_attempts = retry_attempts
        self._retry_max_wait_s = retry_max_wait_s

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.uri(self.job_prefix)!r})"

    # -- keys ----------------------------------------------------------------------------------

    def dir_key(self, checkpoint_id: int, kind: CheckpointKind) -> str:
        """Key prefix (ending in ``/``) of checkpoint ``checkpoint_id`` of ``kind``."""
        return f"{self.job_prefix}{layout.relative_dir(checkpoint_id, kind)}/"

    def metadata_key(self, checkpoint_id: int, kind: CheckpointKind) -> str:
        """Key of the ``_metadata`` object of checkpoint ``checkpoint_id`` of ``kind``."""
        return self.dir_key(checkpoint_id, kind) + layout.METADATA_NAME

    def driver_key(self, epoch: int) -> str:
        """Key of driver epoch ``epoch``'s claim."""
        return f"{self.job_prefix}{layout.DRIVERS_DIR}/{layout.driver_epoch_name(epoch)}"

    # -- retrying calls ------------------------------------------------------------------------

    def _call(self, op: str, key: str, fn: Callable[[], T], store: ObjectStore | None = None) -> T:
        """Run one call, retrying :class:`TransientStoreError`; after the last attempt it becomes
        a :class:`CheckpointStorageError`. Other errors propagate unchanged."""
        where = (store or self.store).uri(key)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log_event(
                log,
                logging.WARNING,
                f"retrying {(store or self.store).service} call",
                job=self.job_id,
                op=op,
                uri=where,
                attempt=state.attempt_number,
                error=exc,
            )

        retrying = store_retrying(
            self._retry_attempts,
            self._retry_max_wait_s,
            lambda e: isinstance(e, TransientStoreError),
            before_sleep,
        )
        try:
            return retrying(fn)
        except TransientStoreError as e:
            raise CheckpointStorageError(
                f"{op} {where} failed after {self._retry_attempts} attempts: {e}"
            ) from e
        except StoreError:
            raise
        except Exception as e:  # an answer the adapter could not read
            raise CheckpointStorageError(f"{op} {where} failed: {type(e).__name__}: {e}") from e

    def _fail(
        self, what: str, key: str, error: StoreError, store: ObjectStore | None = None
    ) -> CheckpointStorageError:
        return CheckpointStorageError(f"{what} {(store or self.store).uri(key)}: {error}")

    def _exists(self, key: str) -> bool:
        try:
            return self._call("exists", key, lambda: self.store.exists(key))
        except StoreError as e:
            raise self._fail("cannot check", key, e) from e

    # -- publish -------------------------------------------------------------------------------

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """Publish ``metadata`` with one conditional create.

        A final checkpoint first gets its ``_final`` marker object; the marker is only read for
        listing and a ``_metadata`` is what makes a checkpoint visible.

        Every exit is one of three (DESIGN.md §12): published (returns); not published
        (``CheckpointNotPublishedError``: before the create; refused for good on its first
        attempt; "exists" on the first attempt, or on a retry with another writer's bytes); unknown
        (``CheckpointPublishUnknownError``: every attempt failed transiently; refused after an
        attempt that may have landed; "exists" after a retry whose read-back failed; anything else).

        Raises:
            CheckpointNotPublishedError: nothing of this publish is visible.
            CheckpointPublishUnknownError: the checkpoint may have landed.
        """
        cid, kind = metadata.checkpoint_id, metadata.kind
        key = self.metadata_key(cid, kind)
        uri = self.store.uri(key)
        encoded = self.writer.encode(metadata)
        data = encoded.manifest
        try:  # nothing is written before the create but the final marker, which alone shows nothing
            check_publishable(metadata, self.job_id)
            other = (
                CheckpointKind.CHECKPOINT if kind is CheckpointKind.SAVEPOINT else CheckpointKind.SAVEPOINT
            )
            for existing in (key, self.metadata_key(cid, other)):
                if self._exists(existing):
                    raise CheckpointNotPublishedError(
                        f"checkpoint {cid} of job {self.job_id!r} exists: {self.store.uri(existing)}"
                    )
            self._set_final_marker(cid, final=kind is CheckpointKind.FINAL)
            for name, body in encoded.files:  # durable once created: before the manifest names them
                self._create_file(self.dir_key(cid, kind) + name, body)
        except CheckpointStorageError as e:
            self._discard(cid, kind, encoded.files)
            if isinstance(e, CheckpointNotPublishedError):
                raise
            raise CheckpointNotPublishedError(f"checkpoint {cid} not published: {e}") from e

        attempts = 0

        def create() -> None:
            nonlocal attempts
            attempts += 1
            self.store.create(key, data, METADATA_MEDIA_TYPE)

        try:
            try:
                self._call("create", key, create)
            except ObjectExists as e:
                retried = attempts > 1 or e.earlier_attempt
                settle_conflicting_publish(uri, data, lambda: self._read(key), retried=retried, error=e)
            except (StoreRefused, ObjectMissing) as e:
                settle_refused_publish(uri, str(e), retried=attempts > 1 or e.earlier_attempt, error=e)
            except Exception as e:  # transient to the last attempt, or an answer nobody could read
                raise CheckpointPublishUnknownError(
                    f"create of {uri}: no attempt got a definitive answer; the checkpoint may have "
                    f"landed: {e}"
                ) from e
        except CheckpointNotPublishedError:
            self._discard(cid, kind, encoded.files)
            raise
        ref = CheckpointRef(cid, kind, uri)
        log_published(self.job_id, ref, len(data))
        return ref

    def _create_file(self, key: str, data: bytes) -> None:
        """Create one committable file with the conditional create; "exists" is ours only if it
        reads back as ``data`` (a retried create of ours landed first).

        Raises:
            CheckpointNotPublishedError: it cannot be created (no manifest names it yet).
        """
        attempts = 0

        def create() -> None:
            nonlocal attempts
            attempts += 1
            self.store.create(key, data, FILE_MEDIA_TYPE)

        uri = self.store.uri(key)
        try:
            self._call("create", key, create)
        except ObjectExists as e:
            retried = attempts > 1 or e.earlier_attempt
            try:
                settle_conflicting_publish(uri, data, lambda: self._get(key), retried=retried, error=e)
            except CheckpointStorageError as unsettled:
                raise CheckpointNotPublishedError(f"committable file {uri}: {unsettled}") from e
        except Exception as e:  # nothing names the file yet, so nothing is visible whatever it did
            raise CheckpointNotPublishedError(f"cannot create committable file {uri}: {e}") from e

    def _discard(
        self, checkpoint_id: int, kind: CheckpointKind, files: tuple[tuple[str, bytes], ...]
    ) -> None:
        """Remove this publish's own committable files once it is proven not published (best
        effort: what stays is a leftover retention removes)."""
        keys = [self.dir_key(checkpoint_id, kind) + name for name, _ in files]
        if keys:
            with contextlib.suppress(Exception):
                self._call("delete", keys[0], lambda: self.store.delete_keys(keys))

    def _get(self, key: str, store: ObjectStore | None = None) -> bytes:
        where = store or self.store
        return self._call("get", key, lambda: where.get(key), where)

    def _set_final_marker(self, checkpoint_id: int, *, final: bool) -> None:
        marker = self.dir_key(checkpoint_id, CheckpointKind.FINAL) + layout.FINAL_MARKER_NAME
        try:
            if final:
                self._call("put", marker, lambda: self.store.put(marker, b""))
            else:  # a stale marker of a crashed final publish of this id must not mark a plain checkpoint
                self._delete_quietly(marker)
        except StoreError as e:
            raise self._fail("cannot write", marker, e) from e

    def _delete_quietly(self, key: str) -> None:
        with contextlib.suppress(ObjectMissing):
            self._call("delete", key, lambda: self.store.delete(key))

    # -- driver epochs (issue #43) ---------------------------------------------------------------

    def driver_epochs(self) -> list[int]:
        """Every driver epoch claimed and not pruned, ascending.

        Raises:
            CheckpointStorageError: listing failed.
        """
        prefix = f"{self.job_prefix}{layout.DRIVERS_DIR}/"
        epochs = (layout.parse_driver_epoch(k[len(prefix) :]) for k in self._list_keys(prefix))
        return sorted(e for e in epochs if e is not None)

    def create_driver_epoch(self, epoch: int, record: bytes) -> bool:
        """One conditional create of the claim; "exists" is read back, since a retried create of
        ours may have landed first (records differ per driver).

        Returns:
            True if this driver's claim is stored; False if another driver's is.

        Raises:
            CheckpointStorageError: the create was refused otherwise, or failed after its retries.
        """
        key = self.driver_key(epoch)
        try:
            self._call("create", key, lambda: self.store.create(key, record, None))
        except ObjectExists:
            return self.read_driver_epoch(epoch) == record
        except StoreError as e:
            raise self._fail(f"cannot claim driver epoch {epoch} at", key, e) from e
        return True

    def read_driver_epoch(self, epoch: int) -> bytes | None:
        """The record of driver epoch ``epoch``, or ``None`` if it is gone.

        Raises:
            CheckpointStorageError: the store is unavailable after retries, or the read was refused.
        """
        key = self.driver_key(epoch)
        try:
            return self._call("get", key, lambda: self.store.get(key))
        except ObjectMissing:
            return None
        except StoreError as e:
            raise self._fail("cannot read driver epoch", key, e) from e

    def prune_driver_epochs(self, below: int) -> None:
        """Delete the claims of driver epochs below ``below``. Idempotent.

        Raises:
            CheckpointStorageError: a deletion was refused.
        """
        for epoch in self.driver_epochs():
            if epoch < below:
                key = self.driver_key(epoch)
                try:
                    self._delete_quietly(key)
                except StoreError as e:
                    raise self._fail("cannot delete", key, e) from e

    # -- read ----------------------------------------------------------------------------------

    def _list_keys(self, prefix: str) -> list[str]:
        try:
            return self._call("list", prefix, lambda: self.store.list_keys(prefix))
        except StoreError as e:
            raise self._fail("cannot list", prefix, e) from e

    def _scan(self) -> tuple[list[CheckpointRef], list[tuple[int, CheckpointKind]]]:
        rel_keys = (key[len(self.job_prefix) :] for key in self._list_keys(self.job_prefix))
        return scan_keys(rel_keys, lambda cid, kind: self.store.uri(self.metadata_key(cid, kind)))

    def list_checkpoints(self) -> list[CheckpointRef]:
        """All published checkpoints and savepoints of the job, ascending by numeric id.

        Raises:
            CheckpointStorageError: listing failed.
        """
        return self._scan()[0]

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """Read one checkpoint of this job; its id and kind must match ``ref``.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata; the message names the location.
            CheckpointStorageError: no such object, or the store is unavailable after retries.
        """
        key = self.metadata_key(ref.checkpoint_id, ref.kind)
        return decode_metadata(
            self._read(key), self.store.uri(key), self._sibling_reader(key), job_id=self.job_id, expected=ref
        )

    def load_location(self, location: str) -> CheckpointMetadata:
        """Read a checkpoint or savepoint by the location of its ``_metadata`` or its directory, in
        this store's URL form; it may belong to another job or container (a savepoint restored into
        a new job).

        Raises:
            ConfigError: ``location`` is not in this store's URL form.
            CorruptCheckpointError: unreadable or invalid metadata; the message names the location.
            CheckpointStorageError: nothing is at ``location``.
        """
        store, path = self.store.at(location)
        key = metadata_key_of(path)
        return decode_metadata(self._read(key, store), store.uri(key), self._sibling_reader(key, store))

    def _sibling_reader(self, metadata_key: str, store: ObjectStore | None = None) -> Callable[[str], bytes]:
        """Reads a committable file beside the manifest at ``metadata_key`` by name."""
        where = store or self.store
        directory = metadata_key.rsplit("/", 1)[0]

        def read(name: str) -> bytes:
            key = f"{directory}/{name}"
            try:
                return self._get(key, where)
            except ObjectMissing:
                raise MissingFile(where.uri(key)) from None
            except StoreError as e:
                raise CheckpointStorageError(f"cannot read committable file {where.uri(key)}: {e}") from e

        return read

    def mark_committed(self, location: str) -> None:
        """An empty ``_committed`` object beside the checkpoint's ``_metadata``. Idempotent.

        Raises:
            CheckpointStorageError: it cannot be written.
        """
        store, path = self.store.at(location)
        key = layout.committed_marker_of(path)
        try:
            self._call("put", key, lambda: store.put(key, b""), store)
        except StoreError as e:
            raise self._fail("cannot write", key, e, store) from e

    def is_committed(self, location: str) -> bool:
        """True if the checkpoint's ``_committed`` object exists.

        Raises:
            CheckpointStorageError: the store cannot be read.
        """
        store, path = self.store.at(location)
        key = layout.committed_marker_of(path)
        try:
            return self._call("exists", key, lambda: store.exists(key), store)
        except StoreError as e:
            raise self._fail("cannot check", key, e, store) from e

    def _read(self, key: str, store: ObjectStore | None = None) -> bytes:
        where = store or self.store
        try:
            return self._call("get", key, lambda: where.get(key), where)
        except ObjectMissing as e:
            raise CheckpointStorageError(f"no checkpoint metadata at {where.uri(key)}") from e
        except StoreRefused as e:  # not corrupt: fallback_to_valid must not skip it
            raise CheckpointStorageError(f"cannot read checkpoint metadata {where.uri(key)}: {e}") from e
        except StoreError as e:
            raise CorruptCheckpointError(f"unreadable checkpoint metadata {where.uri(key)}: {e}") from e

    def latest(self, *, fallback_to_valid: bool = False) -> CheckpointMetadata | None:
        """The newest published checkpoint or savepoint by listing, or ``None`` for a new job.

        Args:
            fallback_to_valid: opt-in only: skip corrupt checkpoints (logged) for the newest valid one.

        Raises:
            CorruptCheckpointError: the newest one is corrupt (and ``fallback_to_valid`` is off).
        """
        return latest_by_listing(self, fallback_to_valid=fallback_to_valid)

    # -- delete / retention --------------------------------------------------------------------

    def delete(self, ref: CheckpointRef) -> None:
        """Delete every object of one checkpoint (savepoints too, when asked explicitly). Idempotent.

        ``_metadata`` goes first, so an interrupted delete leaves an invisible leftover.

        Raises:
            CheckpointStorageError: the store refused a deletion.
        """
        self._delete_dir(ref.checkpoint_id, ref.kind)
        log_deleted(self.job_id, ref)

    def _delete_dir(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        meta = self.metadata_key(checkpoint_id, kind)
        try:  # _metadata first: an interrupted delete leaves an invisible leftover
            self._delete_quietly(meta)
        except StoreError as e:
            raise self._fail("cannot delete", meta, e) from e
        prefix = self.dir_key(checkpoint_id, kind)
        rest = [k for k in self._list_keys(prefix) if k != meta]
        if rest:
            try:
                self._call("delete", prefix, lambda: self.store.delete_keys(rest))
            except StoreError as e:
                raise self._fail("cannot delete under", prefix, e) from e

    def _delete_leftovers(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        """Delete what a publish that never completed left (``leftovers_to_delete``)."""
        prefix = self.dir_key(checkpoint_id, kind)
        names = [k[len(prefix) :] for k in self._list_keys(prefix)]
        doomed = [prefix + n for n in leftovers_to_delete(names, self.writer)]
        if doomed:
            try:
                self._call("delete", prefix, lambda: self.store.delete_keys(doomed))
            except StoreError as e:
                raise self._fail("cannot delete under", prefix, e) from e

    def apply_retention(self, keep: int) -> list[CheckpointRef]:
        """Delete all but the newest ``keep`` (≥ 1) non-savepoint checkpoints; return what was deleted.

        Final checkpoints count as checkpoints; savepoints are never deleted. Also removes leftovers
        of crashed publishes (a ``_final`` marker without ``_metadata``) below the newest published id.

        Raises:
            ConfigError: ``keep`` < 1.
            CheckpointStorageError: a deletion failed.
        """
        refs, orphans = self._scan()
        doomed = plan_retention(refs, keep)
        for ref in doomed:
            self.delete(ref)
        newest = refs[-1].checkpoint_id if refs else 0
        for cid, kind in orphans:
            if cid < newest:
                self._delete_leftovers(cid, kind)
                log_event(log, logging.DEBUG, "cleaned publish leftovers", job=self.job_id, checkpoint=cid)
        return doomed
