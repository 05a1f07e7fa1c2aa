"""S3 calls with retries: the boto3 client, transient-error classification, multipart helpers.

Every call goes through :meth:`S3Ops._call`, which retries transient errors with tenacity
(exponential backoff with jitter, ``config.max_attempts`` attempts): throttling (``SlowDown``,
429), 5xx, request timeouts and connection errors/resets. botocore's own retries are switched off
(one attempt per call) so there is exactly one retry layer.

A CompleteMultipartUpload (like CopyObject) may answer HTTP 200 with an ``<Error>`` body after
the connection stayed open for a while. botocore (≥ 1.36; verified on the pinned 1.44) rewrites
such a response to status 500 before parsing, so it surfaces as a ``ClientError`` with the body's
code (e.g. ``InternalError``) and is retried here like any 5xx. As a second line of defence a
completion response without an ``ETag`` is treated as transient too.

Errors after retries are typed (``twophase.sinks.errors``): a refusal for lack of permission →
``S3AccessDeniedError`` naming the IAM action and the key; a missing bucket or bad credentials →
``ConfigError``; still transient → ``ServiceUnavailableError``; an upload or tail that vanished
while resuming → ``TransactionLostError``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import tenacity
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from twophase.connectors.s3.config import S3SinkConfig
from twophase.connectors.s3.internal.committable import UploadedPart
from twophase.sinks.errors import ConfigError, ServiceUnavailableError, TransactionLostError
from twophase.sinks.internal.s3_access import access_denied, certificate_refused, denied_delete
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

    from twophase.sinks.s3_options import S3Options
else:
    S3Client = Any

log = logging.getLogger(__name__)

T = TypeVar("T")

ClientFactory = Callable[[S3SinkConfig], "S3Client"]
"""Makes the boto3 S3 client for a configuration (tests inject fakes)."""

TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "XMinioServerNotInitialized",
        "XMinioStorageFull",
        "OperationAborted",
        "500",
        "502",
        "503",
        "504",
    }
)
"""S3 error codes worth retrying (AWS and MinIO spellings)."""

DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
        "403",
    }
)
"""S3 error codes meaning the credentials are wrong or lack permission."""


class IncompleteResponseError(Exception):
    """A successful-looking response lacks what it must carry (e.g. CompleteMultipartUpload's ETag)."""


def error_code(exc: BaseException) -> str:
    """The S3 error code of a ``ClientError`` (``"NoSuchUpload"``, ``"404"``...), else ``""``."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def http_status(exc: BaseException) -> int:
    """The HTTP status of a ``ClientError``, else 0."""
    if isinstance(exc, ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: throttling, 5xx, timeouts, connection errors and resets;
    not a refused server certificate (a TLS ``SSLError`` is a connection error to botocore)."""
    if certificate_refused(exc) is not None:
        return False
    if isinstance(exc, ClientError):
        status = http_status(exc)
        return error_code(exc) in TRANSIENT_CODES or status == 429 or 500 <= status < 600
    if isinstance(
        exc, (BotoConnectionError, ConnectionClosedError, HTTPClientError, IncompleteResponseError)
    ):
        return True
    return isinstance(exc, (ConnectionError, TimeoutError))


def make_client(config: S3SinkConfig) -> S3Client:
    """A boto3 S3 client for ``config``: its ``storage_options`` over the standard AWS chain of
    this process (on executors: theirs). botocore's retries are off (tenacity retries instead)."""
    return _new_client(config.storage_options, config.connect_timeout_ms, config.read_timeout_ms)


def _new_client(options: S3Options, connect_timeout_ms: int, read_timeout_ms: int) -> S3Client:
    return options.resolved(os.environ).boto3_client(connect_timeout_ms, read_timeout_ms)


def cached_client(config: S3SinkConfig) -> S3Client:
    """One client per store and process: every sink (and every new instance of one) with the same
    ``storage_options`` and timeouts shares it (boto3 clients are thread-safe; creating one takes
    about 80 ms, measured, which a job paid again for each sink it built)."""
    return _client_for(config.storage_options, config.connect_timeout_ms, config.read_timeout_ms)


_client_for = functools.lru_cache(maxsize=16)(_new_client)


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome is not None else None
    log_event(
        log,
        logging.WARNING,
        "s3 call failed, retrying",
        op=getattr(state.fn, "__name__", "?"),
        attempt=state.attempt_number,
        error=f"{type(exc).__name__}: {error_code(exc) if exc else ''}",
    )


@dataclass(frozen=True)
class ListedUpload:
    """One pending multipart upload found by listing."""

    key: str
    upload_id: str


class S3Ops:
    """The S3 operations the sink uses, each retried on transient errors (tenacity).

    Args:
        client: a boto3 S3 client (``make_client``) or a protocol-compatible fake (unit tests).
        config: the sink configuration (bucket, retry settings, encryption and storage class).
    """

    def __init__(self, client: S3Client, config: S3SinkConfig) -> None:
        self.client = client
        self.config = config
        self.bucket = config.bucket

    # --- retry machinery -----------------------------------------------------------------------

    def retrying(self) -> tenacity.Retrying:
        """The retry policy: transient errors only, ``max_attempts``, exponential backoff with jitter."""
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            stop=tenacity.stop_after_attempt(self.config.max_attempts),
            # exponential backoff plus jitter, in terms tenacity 8.2 and later all have
            wait=tenacity.wait_exponential(
                multiplier=self.config.retry_initial_backoff_ms / 1000.0,
                max=self.config.retry_max_backoff_ms / 1000.0,
            )
            + tenacity.wait_random(0, self.config.retry_initial_backoff_ms / 1000.0),
            before_sleep=_log_retry,
            reraise=True,
        )

    def call_raw(self, fn: Callable[..., T], **kwargs: Any) -> T:
        """Call ``fn(**kwargs)`` with retries; the last error is re-raised unchanged."""
        return self.retrying()(fn, **kwargs)

    def _call(self, what: str, fn: Callable[..., T], *, where: str | None = None, **kwargs: Any) -> T:
        """``fn(**kwargs)`` with retries; errors left are translated (:meth:`translate`), naming
        ``where`` (a key or prefix; default: the call's ``Key``)."""
        try:
            return self.call_raw(fn, **kwargs)
        except (ClientError, BotoCoreError, IncompleteResponseError, ConnectionError, TimeoutError) as e:
            translated = self.translate(e, what, str(kwargs.get("Key", "")) if where is None else where)
            if translated is e:
                raise
            raise translated from e

    def translate(self, exc: BaseException, what: str, key: str = "") -> BaseException:
        """Map an S3 error (after retries) to the project's typed errors; others are returned as is.

        A refusal for lack of permission becomes :class:`S3AccessDeniedError` naming the IAM action
        and ``s3://bucket/key`` (``key``: the request's key or prefix, ``""`` for the bucket); a
        refused server certificate becomes :class:`TlsCertificateError` naming ``AWS_CA_BUNDLE``.
        """
        denied = access_denied(exc, self.bucket, key) or certificate_refused(exc)
        if denied is not None:
            return denied
        code = error_code(exc)
        where = f"s3://{self.bucket}"
        if code == "NoSuchBucket" or (what == "head bucket" and code in ("404", "NotFound")):
            return ConfigError(f"{what}: bucket {where} does not exist")
        if code in DENIED_CODES or http_status(exc) == 403:
            return ConfigError(f"{what}: access to {where} denied ({code}); check the credentials and policy")
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return ConfigError(f"{what}: no usable AWS credentials found for {where}")
        if is_transient(exc):
            return ServiceUnavailableError(
                f"{what} on {where} still failing after {self.config.max_attempts} attempts: "
                f"{type(exc).__name__} {code}".rstrip()
            )
        return exc

    # --- operations ----------------------------------------------------------------------------

    def head_bucket(self) -> None:
        """Check that the bucket exists and is accessible.

        Raises:
            ConfigError: the bucket is missing or access is denied.
            ServiceUnavailableError: the endpoint cannot be reached.
        """
        self._call("head bucket", self.client.head_bucket, Bucket=self.bucket)

    def create_upload(self, key: str, content_type: str) -> str:
        """CreateMultipartUpload at ``key`` (with encryption/storage class); returns the upload id."""
        resp = self._call(
            "create multipart upload",
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=key,
            ContentType=content_type,
            # as s3transfer does: part checksums are then required on completion, and we send them
            ChecksumAlgorithm="CRC32",
            **self.config.extra_put_args(),
        )
        return str(resp["UploadId"])

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> UploadedPart:
        """UploadPart ``number`` of ``upload_id``.

        Raises:
            TransactionLostError: the upload no longer exists (aborted, completed or expired).
        """
        try:
            resp = self._call(
                "upload part",
                self.client.upload_part,
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
                # the upload was created with CRC32: botocore before 1.36 sends no part checksum
                # unless asked, and the server then refuses the part
                ChecksumAlgorithm="CRC32",
            )
        except ClientError as e:
            if error_code(e) == "NoSuchUpload":
                raise TransactionLostError(
                    f"multipart upload of s3://{self.bucket}/{key} vanished (aborted, completed or expired); "
                    "its in-progress file cannot be continued"
                ) from e
            raise
        return UploadedPart(
            number=number, etag=str(resp["ETag"]), size=len(data), checksum_crc32=resp.get("ChecksumCRC32")
        )

    def put_object(self, key: str, data: bytes) -> None:
        """PutObject (temporary tail objects), with encryption passed through."""
        args = {k: v for k, v in self.config.extra_put_args().items() if k != "StorageClass"}
        self._call("put object", self.client.put_object, Bucket=self.bucket, Key=key, Body=data, **args)

    def get_object(self, key: str, expected_size: int) -> bytes:
        """GetObject fully (a tail object), checking its size.

        Raises:
            TransactionLostError: the object is missing or of another size.
        """

        def read() -> bytes:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
            return resp["Body"].read()

        try:
            data = self._call("get object", read, where=key)
        except ClientError as e:
            if error_code(e) in ("NoSuchKey", "404", "NotFound"):
                raise TransactionLostError(f"tail object s3://{self.bucket}/{key} is missing") from e
            raise
        if len(data) != expected_size:
            raise TransactionLostError(
                f"tail object s3://{self.bucket}/{key} has {len(data)} bytes, expected {expected_size}"
            )
        return data

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[UploadedPart]) -> dict[str, Any]:
        """CompleteMultipartUpload with retries; non-transient errors are raised unchanged (ClientError).

        A 200 response carrying an error is retried (see the module docstring).
        """
        payload: list[CompletedPartTypeDef] = []
        for p in parts:
            entry: CompletedPartTypeDef = {"PartNumber": p.number, "ETag": p.etag}
            if p.checksum_crc32 is not None:
                entry["ChecksumCRC32"] = p.checksum_crc32
            payload.append(entry)

        def complete() -> dict[str, Any]:
            resp = self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": payload}
            )
            if not resp.get("ETag"):
                raise IncompleteResponseError(f"CompleteMultipartUpload of {key} answered without an ETag")
            return dict(resp)

        return self.call_raw(complete)

    def abort_upload(self, key: str, upload_id: str) -> bool:
        """AbortMultipartUpload; ``False`` if the upload did not exist (idempotent)."""
        try:
            self._call(
                "abort multipart upload",
                self.client.abort_multipart_upload,
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
            )
        except ClientError as e:
            if error_code(e) in ("NoSuchUpload", "404"):
                return False
            raise
        return True

    def object_size(self, key: str) -> int | None:
        """HeadObject's ContentLength, or ``None`` if the object does not exist."""
        try:
            resp = self.call_raw(self.client.head_object, Bucket=self.bucket, Key=key)
        except ClientError as e:
            if error_code(e) in ("404", "NoSuchKey", "NotFound"):
                return None
            translated = self.translate(e, "head object", key)
            if translated is e:
                raise
            raise translated from e
        return int(resp["ContentLength"])

    def delete_keys(self, keys: Sequence[str]) -> int:
        """DeleteObjects in batches of 1000; returns how many were asked to be deleted.

        Raises:
            S3AccessDeniedError: S3 refused a key for lack of ``s3:DeleteObject``; it lists every
                key left (refused, or in a later batch).
            ServiceUnavailableError: S3 keeps failing; ``RuntimeError`` if S3 reports per-key errors.
        """
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            resp = self._call(
                "delete objects",
                self.client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
            )
            errors = resp.get("Errors") or []
            denied = denied_delete(self.bucket, list(errors), keys[start + 1000 :])
            if denied is not None:
                raise denied
            if errors:
                raise RuntimeError(f"deleting {len(errors)} objects failed, first: {errors[0]}")
        return len(keys)

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (ListObjectsV2, all pages)."""

        def listing() -> list[str]:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

        return self._call("list objects", listing, where=prefix)

    def list_parts(self, key: str, upload_id: str) -> dict[int, str]:
        """The parts an open multipart upload holds now (all pages): part number → ETag.

        Raises:
            ClientError: NoSuchUpload (the upload was completed or aborted).
            ServiceUnavailableError: S3 cannot be reached after retries.
        """

        def listing() -> dict[int, str]:
            pages = self.client.get_paginator("list_parts").paginate(
                Bucket=self.bucket, Key=key, UploadId=upload_id
            )
            return {int(p["PartNumber"]): str(p["ETag"]) for page in pages for p in page.get("Parts", [])}

        return self._call("list parts", listing, where=key)

    def list_part_sizes(self, key: str, upload_id: str) -> dict[int, tuple[str, int]]:
        """The parts an open multipart upload holds now (all pages): number → (ETag, size in bytes).

        Raises:
            ClientError: NoSuchUpload (the upload was completed or aborted).
            ServiceUnavailableError: S3 cannot be reached after retries.
        """

        def listing() -> dict[int, tuple[str, int]]:
            pages = self.client.get_paginator("list_parts").paginate(
                Bucket=self.bucket, Key=key, UploadId=upload_id
            )
            return {
                int(p["PartNumber"]): (str(p["ETag"]), int(p["Size"]))
                for page in pages
                for p in page.get("Parts", [])
            }

        return self._call("list parts", listing, where=key)

    def read_object(self, key: str) -> bytes:
        """GetObject fully (a staged write's ``.pendingset``).

        Raises:
            ClientError: NoSuchKey.
            ServiceUnavailableError: S3 cannot be reached after retries.
        """

        def read() -> bytes:
            data: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return data

        return self._call("get object", read, where=key)

    def list_uploads(self) -> list[ListedUpload]:
        """Every pending multipart upload in the bucket (all pages).

        No ``Prefix`` is sent: MinIO matches it only as an exact key, so callers filter here.
        """

        def listing() -> list[ListedUpload]:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket)
            return [
                ListedUpload(key=u["Key"], upload_id=u["UploadId"])
                for page in pages
                for u in page.get("Uploads", [])
            ]

        return self._call("list multipart uploads", listing, where="")
