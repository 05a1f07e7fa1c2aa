"""Checkpoint storage on S3 (or an S3-compatible server such as MinIO) through boto3.

Layout: ``s3://<bucket>/<prefix>/<job-id>/chk-<n>/_metadata`` etc., as in
:mod:`twophase.coordinator.storage.layout`.

Publishing is one conditional ``PutObject`` with ``If-None-Match: *`` (DESIGN.md §5): S3 stores the
object atomically and answers ``412 Precondition Failed`` if the key exists, so an id is never
overwritten and a reader sees the whole object or nothing. The server must support conditional
writes (AWS S3 since 2024, MinIO).

:class:`S3CheckpointStorage` is the object-store backend
(:class:`~twophase.coordinator.storage.object_store.ObjectCheckpointStorage`, shared with Azure and
GCS) on :class:`S3Store`, which reads S3's answers: ``404``/``NoSuchKey`` is missing, ``412`` is
"exists", throttling, 5xx, ``409 ConditionalRequestConflict`` and connection errors are transient
(:func:`is_transient`), and anything else is a refusal, worded by :func:`explain` (the IAM action
to allow for an ``AccessDenied``). Because a retried PUT (ours or botocore's) may have succeeded
the first time, a ``412`` after a retry is resolved by reading the object back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ParamValidationError

from twophase.coordinator.storage.object_store import (
    ObjectCheckpointStorage,
    ObjectExists,
    ObjectMissing,
    ObjectStore,
    StoreBase,
    StoreError,
    StoreRefused,
    TransientStoreError,
)
from twophase.coordinator.storage.s3_errors import (
    NOT_FOUND_CODES,
    PRECONDITION_FAILED_CODES,
    error_code,
    http_status,
)
from twophase.coordinator.storage.s3_errors import is_transient as is_transient  # re-exported
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.s3_access import access_denied, certificate_refused, denied_delete

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

T = TypeVar("T")

_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys


class S3Store(StoreBase):
    """One bucket through a boto3 S3 client: S3's
    :class:`~twophase.coordinator.storage.object_store.ObjectStore`.

    Args:
        bucket: an existing bucket.
        client: a boto3 S3 client (credentials from the standard chain or explicit; never logged).
    """

    service = "S3"

    def __init__(self, bucket: str, client: S3Client) -> None:
        self.bucket = bucket
        self._client = client

    def uri(self, key: str) -> str:
        """``s3://<bucket>/<key>``."""
        return f"s3://{self.bucket}/{key}"

    def at(self, location: str) -> tuple[ObjectStore, str]:
        """This bucket's or another's store (same client), and the key, of ``s3://bucket/key``.

        Raises:
            ConfigError: not an ``s3://bucket/key`` location.
        """
        parsed = urlparse(location)
        if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
            raise ConfigError(f"not an s3://bucket/key checkpoint location: {location}")
        store = self if parsed.netloc == self.bucket else S3Store(parsed.netloc, self._client)
        return store, parsed.path.lstrip("/")

    def _call(self, key: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ClientError as e:
            raise _classify(e, self.bucket, key) from e
        except (NoCredentialsError, ParamValidationError) as e:  # nothing was sent
            raise StoreRefused(f"S3 request for {self.uri(key)} not sent: {e}") from e
        except BotoCoreError as e:
            untrusted = certificate_refused(e)  # botocore's SSLError is a connection error
            if untrusted is not None:
                raise StoreRefused(str(untrusted)) from e
            if is_transient(e):
                raise TransientStoreError(str(e)) from e
            raise

    def create(self, key: str, data: bytes, content_type: str | None) -> None:
        """``PutObject`` with ``If-None-Match: *``."""
        extra: Any = {"ContentType": content_type} if content_type else {}
        self._call(
            key,
            lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*", **extra),
        )

    def put(self, key: str, data: bytes) -> None:
        """``PutObject``."""
        self._call(key, lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data))

    def get(self, key: str) -> bytes:
        """``GetObject``, the whole body."""
        return self._call(key, lambda: self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def exists(self, key: str) -> bool:
        """``HeadObject``: False on 404."""
        try:
            self._call(key, lambda: self._client.head_object(Bucket=self.bucket, Key=key))
        except ObjectMissing:
            return False
        return True

    def list_keys(self, prefix: str) -> list[str]:
        """``ListObjectsV2`` under ``prefix``, every page."""

        def list_all() -> list[str]:
            keys: list[str] = []
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", ()) if "Key" in obj)
            return keys

        return self._call(prefix, list_all)

    def delete(self, key: str) -> None:
        """``DeleteObject`` (S3 answers a missing key with success)."""
        self._call(key, lambda: self._client.delete_object(Bucket=self.bucket, Key=key))

    def delete_keys(self, keys: list[str]) -> None:
        """``DeleteObjects`` in batches of 1,000; per-key "not found" is no error."""
        for batch in _chunks(keys, _DELETE_BATCH):
            objects: Any = [{"Key": k} for k in batch]

            def delete_batch(objects: Any = objects) -> Any:
                return self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )

            resp = self._call(batch[0], delete_batch)
            errors = [err for err in resp.get("Errors", ()) if err.get("Code") not in NOT_FOUND_CODES]
            denied = denied_delete(self.bucket, errors)
            if denied is not None:
                raise StoreRefused(str(denied))
            if errors:
                raise StoreRefused(f"DeleteObjects refused: {errors[:3]}")


def _classify(error: ClientError, bucket: str, key: str) -> StoreError:
    """What an S3 answer means; ``earlier_attempt`` when botocore itself had retried."""
    retried = _retried_by_botocore(error)
    if error_code(error) in NOT_FOUND_CODES:
        return ObjectMissing(str(error), earlier_attempt=retried)
    if error_code(error) in PRECONDITION_FAILED_CODES or http_status(error) == 412:
        return ObjectExists(str(error), earlier_attempt=retried)
    if is_transient(error):
        return TransientStoreError(str(error), earlier_attempt=retried)
    hint = " (the server must support conditional writes, If-None-Match)" if http_status(error) == 501 else ""
    return StoreRefused(
        f"S3 {error.operation_name}{hint}: {explain(error, bucket, key)}", earlier_attempt=retried
    )


class S3CheckpointStorage(ObjectCheckpointStorage):
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
        super().__init__(
            S3Store(bucket, client),
            prefix,
            job_id,
            retry_attempts=retry_attempts,
            retry_max_wait_s=retry_max_wait_s,
        )
        self.bucket = bucket

    def uri(self, key: str) -> str:
        """``s3://<bucket>/<key>``."""
        return self.store.uri(key)


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
