"""Checkpoint storage on S3 (or an S3-compatible server such as MinIO) through boto3.

Layout: ``s3://<bucket>/<prefix>/<job-id>/chk-<n>/_metadata`` etc., as in
:mod:`twophase.coordinator.storage.layout`.

Publishing is one conditional ``PutObject`` with ``If-None-Match: *`` (DESIGN.md §5): S3 stores the
object atomically and answers ``412 Precondition Failed`` if the key exists, so an id is never
overwritten and a reader sees the whole object or nothing. The server must support conditional
writes (AWS S3 since 2024, MinIO).

Transient failures (throttling, 5xx, ``409 ConditionalRequestConflict``, connection errors) are
retried with tenacity, exponential backoff with jitter. Because a retried PUT may have succeeded
the first time, a ``412`` after a retry (ours or botocore's) is resolved by reading the object back:
identical bytes mean our own publish landed; a read-back that fails leaves the outcome unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError
from tenacity import RetryCallState

from twophase.coordinator.metadata import METADATA_MEDIA_TYPE, CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.common import (
    check_publishable,
    decode_metadata,
    latest_by_listing,
    metadata_key_of,
    plan_retention,
    scan_keys,
    settle_conflicting_publish,
    settle_refused_publish,
    store_retrying,
)
from twophase.coordinator.storage.s3_errors import (
    NOT_FOUND_CODES,
    PRECONDITION_FAILED_CODES,
    error_code,
    http_status,
)
from twophase.coordinator.storage.s3_errors import is_transient as is_transient  # re-exported
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    ConfigError,
    CorruptCheckpointError,
)
from twophase.sinks.internal.s3_access import access_denied, denied_delete
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

T = TypeVar("T")

_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys


class S3CheckpointStorage:
    """Checkpoints of one job under ``s3://<bucket>/<prefix>/<job_id>/``.

    Args:
        bucket: an existing bucket.
        prefix: key prefix shared by jobs (may be empty; surrounding ``/`` are ignored).
        job_id: the job's stable id, one safe path segment.
        client: a boto3 S3 client (credentials from the standard chain or explicit; never logged).
            Give it ``retries={"total_max_attempts": 1}`` to leave retrying to this class alone.
        retry_attempts: attempts per S3 call for transient errors (≥ 1).
        retry_max_wait_s: cap of the exponential backoff between attempts, seconds.

    Raises:
        ConfigError: bad bucket, prefix, job id or retry settings.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        job_id: str,
        client: S3Client,
        *,
        retry_attempts: int = 6,
        retry_max_wait_s: float = 10.0,
    ) -> None:
        if not bucket or "/" in bucket:
            raise ConfigError(f"invalid S3 bucket name {bucket!r}")
        if retry_attempts < 1 or retry_max_wait_s < 0:
            raise ConfigError("retry_attempts must be >= 1 and retry_max_wait_s >= 0")
        self.job_id: str = layout.validate_job_id(job_id)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if any(seg in ("", ".", "..") for seg in self.prefix.split("/")) and self.prefix:
            raise ConfigError(f"invalid S3 key prefix {prefix!r}: empty, '.' or '..' segments")
        self.job_prefix = f"{self.prefix}/{self.job_id}/" if self.prefix else f"{self.job_id}/"
        self._client = client
        self._retry_attempts = retry_attempts
        self._retry_max_wait_s = retry_max_wait_s

    def __repr__(self) -> str:
        return f"S3CheckpointStorage({self.uri(self.job_prefix)!r})"

    # -- keys ----------------------------------------------------------------------------------

    def uri(self, key: str) -> str:
        """``s3://<bucket>/<key>``."""
        return f"s3://{self.bucket}/{key}"

    def dir_key(self, checkpoint_id: int, kind: CheckpointKind) -> str:
        """Key prefix (ending in ``/``) of checkpoint ``checkpoint_id`` of ``kind``."""
        return f"{self.job_prefix}{layout.relative_dir(checkpoint_id, kind)}/"

    def metadata_key(self, checkpoint_id: int, kind: CheckpointKind) -> str:
        """Key of the ``_metadata`` object of checkpoint ``checkpoint_id`` of ``kind``."""
        return self.dir_key(checkpoint_id, kind) + layout.METADATA_NAME

    # -- retrying calls ------------------------------------------------------------------------

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        """Run one S3 call with retries of transient errors.

        Non-transient ``ClientError`` propagates unchanged (callers interpret 404/412); transient
        errors left after the last attempt and other botocore errors become CheckpointStorageError.
        """

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log_event(
                log,
                logging.WARNING,
                "retrying S3 call",
                job=self.job_id,
                op=op,
                uri=self.uri(key),
                attempt=state.attempt_number,
                error=exc,
            )

        retrying = store_retrying(self._retry_attempts, self._retry_max_wait_s, is_transient, before_sleep)
        try:
            return retrying(fn)
        except ClientError as e:
            if is_transient(e):
                raise CheckpointStorageError(
                    f"S3 {op} {self.uri(key)} failed after {self._retry_attempts} attempts: {e}"
                ) from e
            raise
        except BotoCoreError as e:
            raise CheckpointStorageError(f"S3 {op} {self.uri(key)} failed: {e}") from e

    def _exists(self, key: str) -> bool:
        try:
            self._call("HeadObject", key, lambda: self._client.head_object(Bucket=self.bucket, Key=key))
        except ClientError as e:
            if error_code(e) in NOT_FOUND_CODES:
                return False
            raise CheckpointStorageError(
                f"S3 HeadObject {self.uri(key)} failed: {explain(e, self.bucket, key)}"
            ) from e
        return True

    # -- publish -------------------------------------------------------------------------------

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """Publish ``metadata`` with a conditional PUT (``If-None-Match: *``).

        A final checkpoint first gets its ``_final`` marker object; the marker is only read for
        listing and a ``_metadata`` is what makes a checkpoint visible.

        Every exit is one of three (DESIGN.md §12): published (returns); not published
        (``CheckpointNotPublishedError``: before the PUT; refused for good on its first attempt;
        412 on the first attempt, or on a retry with another writer's bytes); unknown
        (``CheckpointPublishUnknownError``: every attempt failed transiently; refused after an
        attempt that may have landed; 412 after a retry whose read-back failed; anything else).

        Returns:
            the ref of the published checkpoint (``location`` = its ``s3://`` URI).

        Raises:
            CheckpointNotPublishedError: nothing of this publish is visible.
            CheckpointPublishUnknownError: the checkpoint may have landed.
        """
        cid, kind = metadata.checkpoint_id, metadata.kind
        key = self.metadata_key(cid, kind)
        data = metadata.dumps()
        try:  # nothing is written before the PUT but the final marker, which alone shows nothing
            check_publishable(metadata, self.job_id)
            other = (
                CheckpointKind.CHECKPOINT if kind is CheckpointKind.SAVEPOINT else CheckpointKind.SAVEPOINT
            )
            for existing in (key, self.metadata_key(cid, other)):
                if self._exists(existing):
                    raise CheckpointNotPublishedError(
                        f"checkpoint {cid} of job {self.job_id!r} exists: {self.uri(existing)}"
                    )
            self._set_final_marker(cid, final=kind is CheckpointKind.FINAL)
        except CheckpointStorageError as e:
            if isinstance(e, CheckpointNotPublishedError):
                raise
            raise CheckpointNotPublishedError(f"checkpoint {cid} not published: {e}") from e

        attempts = 0

        def put() -> None:
            nonlocal attempts
            attempts += 1
            self._client.put_object(
                Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*", ContentType=METADATA_MEDIA_TYPE
            )

        try:
            self._call("PutObject", key, put)
        except ClientError as e:  # a definitive answer to the last attempt
            self._settle_refused_put(key, data, e, retried=attempts > 1 or _retried_by_botocore(e))
        except Exception as e:  # transient to the last attempt, or anything once a PUT may have gone out
            raise CheckpointPublishUnknownError(
                f"S3 PutObject {self.uri(key)}: no attempt got a definitive answer; "
                f"the checkpoint may have landed: {e}"
            ) from e
        ref = CheckpointRef(cid, kind, self.uri(key))
        log_event(
            log,
            logging.INFO,
            "checkpoint published",
            job=self.job_id,
            checkpoint=cid,
            kind=kind.value,
            location=ref.location,
            bytes=len(data),
        )
        return ref

    def _settle_refused_put(self, key: str, data: bytes, error: ClientError, *, retried: bool) -> None:
        """What a PUT answered with ``error`` did: returns if our own earlier attempt landed
        (412 and the object reads back as ``data``).

        Raises:
            CheckpointNotPublishedError: refused on its only attempt, or 412 on another writer's object.
            CheckpointPublishUnknownError: refused after an attempt that may have landed, or 412
                after a retry whose read-back failed (it may be ours).
        """
        uri = self.uri(key)
        if error_code(error) not in PRECONDITION_FAILED_CODES and http_status(error) != 412:
            hint = (
                " (the server must support conditional writes, If-None-Match)"
                if http_status(error) == 501
                else ""
            )
            reason = f"S3 PutObject{hint}: {explain(error, self.bucket, key)}"
            settle_refused_publish(uri, reason, retried=retried, error=error)
        settle_conflicting_publish(uri, data, lambda: self._read(key), retried=retried, error=error)

    def _set_final_marker(self, checkpoint_id: int, *, final: bool) -> None:
        marker = self.dir_key(checkpoint_id, CheckpointKind.FINAL) + layout.FINAL_MARKER_NAME
        try:
            if final:
                self._call(
                    "PutObject",
                    marker,
                    lambda: self._client.put_object(Bucket=self.bucket, Key=marker, Body=b""),
                )
            else:  # a stale marker of a crashed final publish of this id must not mark a plain checkpoint
                self._call(
                    "DeleteObject", marker, lambda: self._client.delete_object(Bucket=self.bucket, Key=marker)
                )
        except ClientError as e:
            raise CheckpointStorageError(
                f"S3 write of {self.uri(marker)} failed: {explain(e, self.bucket, marker)}"
            ) from e

    # -- driver epochs (issue #43) ---------------------------------------------------------------

    def driver_key(self, epoch: int) -> str:
        """Key of driver epoch ``epoch``'s claim."""
        return f"{self.job_prefix}{layout.DRIVERS_DIR}/{layout.driver_epoch_name(epoch)}"

    def driver_epochs(self) -> list[int]:
        """Every driver epoch claimed and not pruned, ascending.

        Raises:
            CheckpointStorageError: listing failed.
        """
        prefix = f"{self.job_prefix}{layout.DRIVERS_DIR}/"
        epochs = (layout.parse_driver_epoch(k[len(prefix) :]) for k in self._list_keys(prefix))
        return sorted(e for e in epochs if e is not None)

    def create_driver_epoch(self, epoch: int, record: bytes) -> bool:
        """One conditional PUT (``If-None-Match: *``) of the claim; a 412 is read back, since a
        retried PUT of ours may have landed first (records differ per driver).

        Returns:
            True if this driver's claim is stored; False if another driver's is.

        Raises:
            CheckpointStorageError: the PUT was refused otherwise, or failed after its retries.
        """
        key = self.driver_key(epoch)
        try:
            self._call(
                "PutObject",
                key,
                lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=record, IfNoneMatch="*"),
            )
        except ClientError as e:
            if error_code(e) not in PRECONDITION_FAILED_CODES and http_status(e) != 412:
                raise CheckpointStorageError(
                    f"cannot claim driver epoch {epoch} at {self.uri(key)}: {explain(e, self.bucket, key)}"
                ) from e
            return self.read_driver_epoch(epoch) == record
        return True

    def read_driver_epoch(self, epoch: int) -> bytes | None:
        """The record of driver epoch ``epoch``, or ``None`` if it is gone.

        Raises:
            CheckpointStorageError: S3 unavailable after retries, or the read was refused.
        """
        key = self.driver_key(epoch)
        try:
            return self._call(
                "GetObject", key, lambda: self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            )
        except ClientError as e:
            if error_code(e) in NOT_FOUND_CODES:
                return None
            raise CheckpointStorageError(
                f"cannot read driver epoch {self.uri(key)}: {explain(e, self.bucket, key)}"
            ) from e

    def prune_driver_epochs(self, below: int) -> None:
        """Delete the claims of driver epochs below ``below``. Idempotent.

        Raises:
            CheckpointStorageError: a deletion was refused.
        """
        for epoch in self.driver_epochs():
            if epoch < below:
                key = self.driver_key(epoch)

                def delete(k: str = key) -> object:
                    return self._client.delete_object(Bucket=self.bucket, Key=k)

                try:
                    self._call("DeleteObject", key, delete)
                except ClientError as e:
                    if error_code(e) not in NOT_FOUND_CODES:
                        raise CheckpointStorageError(
                            f"cannot delete {self.uri(key)}: {explain(e, self.bucket, key)}"
                        ) from e

    # -- read ----------------------------------------------------------------------------------

    def _list_keys(self, prefix: str) -> list[str]:
        def list_all() -> list[str]:
            keys: list[str] = []
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", ()) if "Key" in obj)
            return keys

        try:
            return self._call("ListObjectsV2", prefix, list_all)
        except ClientError as e:
            raise CheckpointStorageError(
                f"cannot list {self.uri(prefix)}: {explain(e, self.bucket, prefix)}"
            ) from e

    def _scan(self) -> tuple[list[CheckpointRef], list[tuple[int, CheckpointKind]]]:
        """Published refs, and (id, kind) of directories with objects but no ``_metadata``."""
        rel_keys = (key[len(self.job_prefix) :] for key in self._list_keys(self.job_prefix))
        return scan_keys(rel_keys, lambda cid, kind: self.uri(self.metadata_key(cid, kind)))

    def list_checkpoints(self) -> list[CheckpointRef]:
        """All published checkpoints and savepoints of the job, ascending by numeric id.

        Raises:
            CheckpointStorageError: listing failed.
        """
        return self._scan()[0]

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """Read one checkpoint of this job; its id and kind must match ``ref``.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata; the message names the ``s3://`` URI.
            CheckpointStorageError: no such object, or S3 unavailable after retries.
        """
        key = self.metadata_key(ref.checkpoint_id, ref.kind)
        return decode_metadata(self._read(key), self.uri(key), job_id=self.job_id, expected=ref)

    def load_location(self, location: str) -> CheckpointMetadata:
        """Read a checkpoint or savepoint by ``s3://bucket/key`` of its ``_metadata`` or its directory.

        The metadata may belong to another job or bucket (restoring a savepoint into a new job).

        Raises:
            ConfigError: ``location`` is not an ``s3://bucket/key`` URI.
            CorruptCheckpointError: unreadable or invalid metadata; the message names the URI.
            CheckpointStorageError: nothing is at ``location``.
        """
        parsed = urlparse(location)
        if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
            raise ConfigError(f"not an s3://bucket/key checkpoint location: {location}")
        key = metadata_key_of(parsed.path)
        uri = f"s3://{parsed.netloc}/{key}"
        return decode_metadata(self._read(key, bucket=parsed.netloc), uri)

    def _marker_key(self, location: str) -> tuple[str, str]:
        parsed = urlparse(location)
        if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
            raise ConfigError(f"not an s3://bucket/key checkpoint location: {location}")
        return parsed.netloc, layout.committed_marker_of(parsed.path.lstrip("/"))

    def mark_committed(self, location: str) -> None:
        """An empty ``_committed`` object beside the checkpoint's ``_metadata``. Idempotent.

        Raises:
            CheckpointStorageError: it cannot be written.
        """
        bucket, key = self._marker_key(location)
        try:
            self._call("PutObject", key, lambda: self._client.put_object(Bucket=bucket, Key=key, Body=b""))
        except ClientError as e:
            raise CheckpointStorageError(
                f"S3 write of s3://{bucket}/{key} failed: {explain(e, bucket, key)}"
            ) from e

    def is_committed(self, location: str) -> bool:
        """True if the checkpoint's ``_committed`` object exists."""
        bucket, key = self._marker_key(location)
        try:
            self._call("HeadObject", key, lambda: self._client.head_object(Bucket=bucket, Key=key))
        except ClientError as e:
            if error_code(e) in NOT_FOUND_CODES:
                return False
            raise CheckpointStorageError(
                f"S3 HeadObject s3://{bucket}/{key} failed: {explain(e, bucket, key)}"
            ) from e
        return True

    def _read(self, key: str, bucket: str | None = None) -> bytes:
        bucket = bucket or self.bucket
        uri = f"s3://{bucket}/{key}"

        def get() -> bytes:
            return self._client.get_object(Bucket=bucket, Key=key)["Body"].read()

        try:
            return self._call("GetObject", key, get)
        except ClientError as e:
            if error_code(e) in NOT_FOUND_CODES:
                raise CheckpointStorageError(f"no checkpoint metadata at {uri}") from e
            denied = access_denied(e, bucket, key)
            if denied is not None:  # not corrupt: fallback_to_valid must not skip it
                raise CheckpointStorageError(f"cannot read checkpoint metadata {uri}: {denied}") from e
            raise CorruptCheckpointError(f"unreadable checkpoint metadata {uri}: {e}") from e

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
            CheckpointStorageError: S3 refused a deletion.
        """
        self._delete_dir(ref.checkpoint_id, ref.kind)
        log_event(
            log,
            logging.INFO,
            "checkpoint deleted",
            job=self.job_id,
            checkpoint=ref.checkpoint_id,
            kind=ref.kind.value,
        )

    def _delete_dir(self, checkpoint_id: int, kind: CheckpointKind) -> None:
        meta = self.metadata_key(checkpoint_id, kind)
        try:
            self._call("DeleteObject", meta, lambda: self._client.delete_object(Bucket=self.bucket, Key=meta))
        except ClientError as e:
            if error_code(e) not in NOT_FOUND_CODES:
                raise CheckpointStorageError(
                    f"cannot delete {self.uri(meta)}: {explain(e, self.bucket, meta)}"
                ) from e
        prefix = self.dir_key(checkpoint_id, kind)
        for batch in _chunks(self._list_keys(prefix), _DELETE_BATCH):
            objects: Any = [{"Key": k} for k in batch]

            def delete_batch(objects: Any = objects) -> Any:
                return self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )

            try:
                resp = self._call("DeleteObjects", prefix, delete_batch)
            except ClientError as e:
                raise CheckpointStorageError(
                    f"cannot delete under {self.uri(prefix)}: {explain(e, self.bucket, prefix)}"
                ) from e
            errors = [err for err in resp.get("Errors", ()) if err.get("Code") not in NOT_FOUND_CODES]
            denied = denied_delete(self.bucket, errors)
            if denied is not None:
                raise CheckpointStorageError(f"cannot delete under {self.uri(prefix)}: {denied}")
            if errors:
                raise CheckpointStorageError(f"cannot delete under {self.uri(prefix)}: {errors[:3]}")

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
                self._delete_dir(cid, kind)
                log_event(log, logging.DEBUG, "cleaned publish leftovers", job=self.job_id, checkpoint=cid)
        return doomed


def _retried_by_botocore(error: ClientError) -> bool:
    """Whether botocore itself retried before ``error`` (its own retry config): an earlier attempt
    may have landed."""
    return int(error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def explain(error: BaseException, bucket: str, key: str) -> str:
    """``error`` in a message: for a refusal for lack of permission, the IAM action to allow and
    the ``s3://`` key (:class:`~twophase.sinks.errors.S3AccessDeniedError`'s words), else as is."""
    denied = access_denied(error, bucket, key)
    return str(denied) if denied is not None else str(error)
