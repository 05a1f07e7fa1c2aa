"""Checkpoint storage on Google Cloud Storage (``gs://bucket/prefix``) (issue #46).

Publishing is one upload with the precondition ``ifGenerationMatch=0`` (GCS JSON API): the object is
created atomically only if no live generation exists, else GCS answers ``412 Precondition Failed``.
google-cloud-storage's own retries are turned off (``retry=None`` on every call) so that the
checkpoint storage alone retries and knows when an earlier attempt may have landed.

Credentials: explicit ``credentials`` in :class:`GcsStorageOptions`, else Application Default
Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, the metadata server, ``gcloud auth
application-default login``). An emulator is reached with ``emulator_host`` or the standard
``STORAGE_EMULATOR_HOST`` variable, without credentials.

How answers are read (:func:`classify`): 404 is missing; 412 and 409 mean the create lost; 401/403
and credentials that cannot be found or refreshed are refused for good, naming the role to grant and
the settings to check; 408, 429, 5xx, connection errors, timeouts and checksum mismatches are
transient; any other status is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urlparse

from twophase.coordinator.storage.object_store import (
    DeletesOneByOne,
    ObjectExists,
    ObjectMissing,
    ObjectStore,
    StoreError,
    StoreRefused,
    TransientStoreError,
    call_classified,
)
from twophase.sinks.errors import ConfigError

T = TypeVar("T")
ROLE = "roles/storage.objectUser"
CREDENTIAL_SETTINGS = (
    "GOOGLE_APPLICATION_CREDENTIALS or the Application Default Credentials "
    "(gcloud auth application-default login, the metadata server)"
)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class GcsStorageOptions:
    """How to reach GCS; unset fields come from the environment.

    Attributes:
        project: the project for the client (default ``GOOGLE_CLOUD_PROJECT`` or the credentials').
        credentials: any ``google.auth.credentials.Credentials`` (default: Application Default
            Credentials).
        emulator_host: an emulator's URL (default ``STORAGE_EMULATOR_HOST``); no credentials are
            sent to it.
        timeout_s: timeout of every request, seconds.
    """

    project: str | None = None
    credentials: Any = field(default=None, repr=False)
    emulator_host: str | None = None
    timeout_s: float = 30.0

    def resolved(self, env: Mapping[str, str]) -> GcsStorageOptions:
        """Fill unset ``project`` and ``emulator_host`` from ``GOOGLE_CLOUD_PROJECT`` and
        ``STORAGE_EMULATOR_HOST``."""
        return replace(
            self,
            project=self.project or env.get("GOOGLE_CLOUD_PROJECT") or None,
            emulator_host=self.emulator_host or env.get("STORAGE_EMULATOR_HOST") or None,
        )


def parse_location(location: str) -> tuple[str, str]:
    """(bucket, path without the leading ``/``) of ``gs://bucket/path``.

    Raises:
        ConfigError: another scheme or no bucket.
    """
    parsed = urlparse(location)
    if parsed.scheme != "gs" or not parsed.netloc:
        raise ConfigError(f"not a gs://bucket[/path] location: {location!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def classify(error: BaseException) -> StoreError | None:
    """What a google-cloud-storage error means for the checkpoint storage, or None when it cannot be
    read (a publish meeting it is unknown). Messages are one line."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    from google.cloud.storage.exceptions import (  # type: ignore[import-untyped]
        DataCorruption,
        InvalidResponse,
    )

    if isinstance(error, auth.DefaultCredentialsError | auth.RefreshError):
        return StoreRefused(
            f"no usable Google credentials ({type(error).__name__}): set {CREDENTIAL_SETTINGS}"
        )
    if isinstance(error, auth.TransportError | requests.ConnectionError | requests.Timeout | DataCorruption):
        return TransientStoreError(f"no answer from GCS ({type(error).__name__})")
    if isinstance(error, api.GoogleAPICallError):
        status = int(error.code or 0)
        text = f"HTTP {status} {error.reason or ''}".strip()
        if status == 404:
            return ObjectMissing(text)
        if status in (409, 412):
            return ObjectExists(text)
        if status in _TRANSIENT_STATUS:
            return TransientStoreError(text)
        if status in (401, 403):
            return StoreRefused(
                f"GCS refused the request ({text}): grant the account '{ROLE}' on the bucket, or check "
                f"{CREDENTIAL_SETTINGS}"
            )
        return StoreRefused(text)
    if isinstance(error, InvalidResponse):  # an upload/download answer the library did not convert
        status = int(getattr(error.response, "status_code", 0) or 0)
        if status in _TRANSIENT_STATUS:
            return TransientStoreError(f"HTTP {status}")
        return ObjectExists(f"HTTP {status}") if status == 412 else None
    return None


class GcsStore(DeletesOneByOne):
    """One bucket, through ``google.cloud.storage`` (every call with ``retry=None``).

    Args:
        client: a ``google.cloud.storage.Client``.
        bucket: the bucket's name.
        timeout_s: timeout of every request, seconds.
    """

    service = "GCS"

    def __init__(self, client: Any, bucket: str, timeout_s: float = 30.0) -> None:
        self._client = client
        self.bucket_name = bucket
        self._bucket = client.bucket(bucket)
        self._timeout = timeout_s

    def uri(self, key: str) -> str:
        """``gs://<bucket>/<key>``."""
        return f"gs://{self.bucket_name}/{key}"

    def at(self, location: str) -> tuple[ObjectStore, str]:
        """This bucket's or another's store (same client), and the key, of ``gs://bucket/key``.

        Raises:
            ConfigError: not a ``gs://bucket/key`` location.
        """
        bucket, path = parse_location(location)
        if not path:
            raise ConfigError(f"GCS checkpoint location {location!r} names no checkpoint")
        if bucket == self.bucket_name:
            return self, path
        return GcsStore(self._client, bucket, self._timeout), path

    def _call(self, fn: Callable[[], T]) -> T:
        return call_classified(fn, classify)

    def create(self, key: str, data: bytes, content_type: str | None) -> None:
        """Upload with ``ifGenerationMatch=0`` (one request for checkpoint-sized data)."""
        blob = self._bucket.blob(key)
        self._call(
            lambda: blob.upload_from_string(
                data,
                content_type=content_type or "application/octet-stream",
                if_generation_match=0,
                retry=None,
                timeout=self._timeout,
            )
        )

    def put(self, key: str, data: bytes) -> None:
        """Upload, replacing any object at ``key``."""
        blob = self._bucket.blob(key)
        self._call(lambda: blob.upload_from_string(data, retry=None, timeout=self._timeout))

    def get(self, key: str) -> bytes:
        """Download the whole object."""
        blob = self._bucket.blob(key)
        return bytes(self._call(lambda: blob.download_as_bytes(retry=None, timeout=self._timeout)))

    def exists(self, key: str) -> bool:
        """``objects.get`` of the metadata: False on 404."""
        found = self._call(lambda: self._bucket.get_blob(key, retry=None, timeout=self._timeout))
        return found is not None

    def list_keys(self, prefix: str) -> list[str]:
        """``objects.list`` under ``prefix``, every page."""
        return list(
            self._call(
                lambda: [
                    b.name
                    for b in self._client.list_blobs(
                        self.bucket_name, prefix=prefix, retry=None, timeout=self._timeout
                    )
                ]
            )
        )

    def delete(self, key: str) -> None:
        """``objects.delete`` of the live generation."""
        blob = self._bucket.blob(key)
        self._call(lambda: blob.delete(retry=None, timeout=self._timeout))


def open_bucket(bucket: str, options: GcsStorageOptions) -> GcsStore:
    """A :class:`GcsStore` for ``bucket`` with ``options`` (already resolved). Contacts nothing
    (Application Default Credentials are looked up here, not refreshed).

    Raises:
        ConfigError: google-cloud-storage (the ``gcs`` extra) is missing, or no credentials are found.
    """
    try:
        from google.auth import exceptions as auth
        from google.cloud import storage  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError(
            "GCS checkpoint storage needs google-cloud-storage: pip install 'twophase[gcs]'"
        ) from None
    if options.emulator_host:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(
            project=options.project or "twophase-emulator",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": options.emulator_host},
        )
    else:
        try:
            client = storage.Client(project=options.project, credentials=options.credentials)
        except auth.DefaultCredentialsError:
            raise ConfigError(
                f"no Google credentials found for gs://{bucket}: set {CREDENTIAL_SETTINGS}"
            ) from None
    return GcsStore(client, bucket, options.timeout_s)


def gcs_options_from_env(
    options: GcsStorageOptions | None, env: Mapping[str, str] | None
) -> GcsStorageOptions:
    """``options`` (or the defaults) with unset fields from ``env`` (default ``os.environ``)."""
    return (options or GcsStorageOptions()).resolved(os.environ if env is None else env)
