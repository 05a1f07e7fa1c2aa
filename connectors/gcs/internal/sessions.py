"""The GCS requests of the file sink: resumable upload sessions (JSON API, "Perform resumable
uploads") and object metadata, over one client and one authorized HTTP session per process and
configuration (executors build their own; nothing here is pickled).

- Initiate and chunk uploads: google-resumable-media's ``ResumableUpload`` (``initiate`` with
  ``stream_final=False``, ``transmit_next_chunk``), whose own retry strategy covers 429, 5xx and
  connection errors.
- The driver's requests on a session it did not open (the finalizing ``PUT`` of the tail, the
  cancelling ``DELETE``) are single requests on the session URI through the same authorized
  transport: ``ResumableUpload`` can only continue a session it initiated itself. They are not
  retried here: the runtime retries a commit that answers RETRY, and a cancel is best effort.
- Object metadata: google-cloud-storage's ``Bucket.get_blob`` (``retry=None``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twophase.connectors.gcs.config import GcsFileSinkConfig
from twophase.connectors.gcs.internal.naming import PUBLIC_ENDPOINT, initiate_url, mask_session
from twophase.coordinator.storage.gcs import CREDENTIAL_SETTINGS, gcs_options_from_env
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""Answers after which the same request may succeed (GCS "Retry strategy")."""

SESSION_GONE = frozenset({404, 410, 499})
"""Answers of a session URI that no longer takes data: cancelled (499 on the cancel itself),
expired or unknown."""

ROLE = "roles/storage.objectUser"
"""The predefined role that grants every request the sink makes on its bucket."""

_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"


@dataclass(frozen=True)
class ObjectFacts:
    """What GCS reports of a live object (``objects.get``)."""

    size: int
    crc32c: str
    md5: str
    generation: int


@dataclass(frozen=True)
class SessionAnswer:
    """A session request's answer: the HTTP status, the bytes the session holds (a 308's
    ``Range``) and the object's facts (a 200/201)."""

    status: int
    persisted: int = 0
    facts: ObjectFacts | None = None


class GcsClients:
    """A storage client, an authorized transport and the JSON API's base URL for one configuration.

    Args:
        client: a ``google.cloud.storage.Client``.
        transport: a ``requests.Session`` that authorizes its requests (``AuthorizedSession``).
        base_url: the JSON API's base URL (Google's, or an emulator's).
    """

    def __init__(self, client: Any, transport: requests.Session, base_url: str) -> None:
        self.client = client
        self.transport = transport
        self.base_url = base_url


def build_clients(config: GcsFileSinkConfig) -> GcsClients:
    """The clients of ``config``: anonymous on an emulator (``emulator_host`` or
    ``STORAGE_EMULATOR_HOST``), else ``storage_options.credentials`` or Application Default
    Credentials. Contacts nothing.

    Raises:
        ConfigError: google-cloud-storage (the ``gcs`` extra) is missing, or no credentials are found.
    """
    try:
        import google.auth
        from google.auth import exceptions as auth
        from google.auth.transport.requests import AuthorizedSession
        from google.cloud import storage  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError(
            "the GCS file sink needs google-cloud-storage: pip install 'twophase[gcs]'"
        ) from None
    options = gcs_options_from_env(config.storage_options, None)
    project: str | None
    if options.emulator_host:
        from google.auth.credentials import AnonymousCredentials

        credentials: Any = AnonymousCredentials()  # type: ignore[no-untyped-call]
        project = options.project or "twophase-emulator"
        base = options.emulator_host.rstrip("/")
        client = storage.Client(
            project=project, credentials=credentials, client_options={"api_endpoint": base}
        )
    else:
        try:
            credentials = options.credentials
            project = options.project
            if credentials is None:
                credentials, found = google.auth.default(scopes=[_SCOPE])
                project = project or found
        except auth.DefaultCredentialsError:
            raise ConfigError(
                f"no Google credentials found for {config.location}: set {CREDENTIAL_SETTINGS}"
            ) from None
        base = PUBLIC_ENDPOINT
        client = storage.Client(project=project, credentials=credentials)
    return GcsClients(client, AuthorizedSession(credentials), base)  # type: ignore[no-untyped-call]


@functools.lru_cache(maxsize=16)
def cached_clients(config: GcsFileSinkConfig) -> GcsClients:
    """One set of clients per process and configuration (configs are frozen and hashable)."""
    return build_clients(config)


ClientFactory = Callable[[GcsFileSinkConfig], GcsClients]
"""Makes the clients of a configuration (tests inject their own)."""


def _refused(status: int, what: str) -> ConfigError:
    if status in (401, 403):
        return ConfigError(
            f"GCS refused to {what} (HTTP {status}): grant the account '{ROLE}' on the bucket, "
            f"or check {CREDENTIAL_SETTINGS}"
        )
    return ConfigError(f"GCS refused to {what} (HTTP {status})")


def raise_typed(error: Exception, what: str) -> None:
    """Raise the sink error for a failed request while doing ``what`` (one line, no secrets).

    Raises:
        ServiceUnavailableError: a transient failure (after the library's retries).
        ConfigError: refused (access denied, missing bucket, bad request).
    """
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    from google.resumable_media import common

    status = 0
    if isinstance(error, common.InvalidResponse):
        status = int(getattr(error.response, "status_code", 0) or 0)
    elif isinstance(error, api.GoogleAPICallError):
        status = int(error.code or 0)
    if isinstance(error, auth.DefaultCredentialsError | auth.RefreshError):
        raise ConfigError(f"no usable Google credentials to {what}: set {CREDENTIAL_SETTINGS}") from error
    if isinstance(error, requests.RequestException | auth.TransportError) or status in TRANSIENT_STATUS:
        raise ServiceUnavailableError(f"GCS failed to {what}: {status or type(error).__name__}") from error
    if status == 404:
        raise ConfigError(f"GCS bucket to {what} does not exist (create it first)") from error
    if status:
        raise _refused(status, what) from error
    raise ServiceUnavailableError(f"GCS failed to {what}: {type(error).__name__}") from error


def _facts(resource: dict[str, Any]) -> ObjectFacts:
    return ObjectFacts(
        int(resource.get("size", -1)),
        str(resource.get("crc32c", "")),
        str(resource.get("md5Hash", "")),
        int(resource.get("generation", 0)),
    )


class SessionOps:
    """The sink's requests on one bucket.

    Args:
        clients: the configuration's clients.
        config: the sink's configuration.
    """

    def __init__(self, clients: GcsClients, config: GcsFileSinkConfig) -> None:
        self.clients = clients
        self.config = config
        self.bucket = config.bucket
        self.place = ("bucket", self.bucket)
        """The log field and value of the place files go."""
        self.timeout = config.storage_options.timeout_s

    def check_bucket(self) -> None:
        """``buckets.get``: the bucket exists and the identity may read it.

        Raises:
            ConfigError: missing bucket or access denied; ServiceUnavailableError: unreachable.
        """
        try:
            self.clients.client.get_bucket(self.bucket, retry=None, timeout=self.timeout)
        except Exception as e:
            raise_typed(e, f"read bucket {self.bucket!r}")

    def open_upload(self, name: str, content_type: str, chunk_size: int, stream: Any) -> Any:
        """Initiate a resumable upload of object ``name`` (created only if absent) reading from
        ``stream``; returns the library's ``ResumableUpload``, whose ``resumable_url`` is the session.

        Raises:
            ServiceUnavailableError / ConfigError: see :func:`raise_typed`.
        """
        from google.resumable_media.requests import ResumableUpload

        # google-resumable-media ships no annotations
        upload: Any = ResumableUpload(  # type: ignore[no-untyped-call]
            initiate_url(self.clients.base_url, self.bucket), chunk_size
        )
        try:
            upload.initiate(
                self.clients.transport,
                stream,
                # the resource's contentType as well as the library's X-Upload-Content-Type:
                # fake-gcs-server reads only the former
                {"name": name, "contentType": content_type},
                content_type,
                stream_final=False,
                timeout=self.timeout,
            )
        except Exception as e:
            raise_typed(e, f"open a resumable upload of {name}")
        return upload

    def send_chunk(self, upload: Any, name: str) -> None:
        """Upload the next full chunk of ``upload`` (``Content-Range: bytes a-b/*``).

        Raises:
            ServiceUnavailableError / ConfigError: see :func:`raise_typed`.
        """
        try:
            upload.transmit_next_chunk(self.clients.transport, timeout=self.timeout)
        except Exception as e:
            raise_typed(e, f"upload a chunk of {name}")

    def _put(self, uri: str, data: bytes, content_range: str) -> SessionAnswer:
        """One ``PUT`` on a session URI; request errors propagate."""
        response = self.clients.transport.put(
            uri, data=data, headers={"Content-Range": content_range}, timeout=self.timeout
        )
        status = response.status_code
        if status == 308:
            end = response.headers.get("Range", "")
            persisted = int(end.rsplit("-", 1)[1]) + 1 if end.startswith("bytes=0-") else 0
            return SessionAnswer(status, persisted=persisted)
        if status in (200, 201):
            return SessionAnswer(status, facts=_facts(response.json()))
        return SessionAnswer(status)

    def finalize(self, uri: str, offset: int, tail: bytes) -> SessionAnswer:
        """Send ``tail`` as the last bytes of the session, from ``offset``, and with it the total
        size: GCS then creates the object, under the session's ``ifGenerationMatch=0`` (412 if an
        object exists at its name). Request errors propagate."""
        total = offset + len(tail)
        content_range = f"bytes {offset}-{total - 1}/{total}" if tail else f"bytes */{total}"
        return self._put(uri, tail, content_range)

    def cancel(self, uri: str) -> bool:
        """``DELETE`` on the session URI: the session ends and its bytes are dropped; a finalized
        session's object is not touched. Returns whether the session was still open.

        Raises:
            ServiceUnavailableError / ConfigError: the cancel failed.
        """
        import requests

        try:
            response = self.clients.transport.delete(uri, timeout=self.timeout)
        except requests.RequestException as e:
            raise ServiceUnavailableError(
                f"GCS failed to cancel session {mask_session(uri)}: {type(e).__name__}"
            ) from e
        status = response.status_code
        if status in (204, 499) or (200 <= status < 300):
            return True
        if status in SESSION_GONE:
            return False
        if status in TRANSIENT_STATUS:
            raise ServiceUnavailableError(f"GCS failed to cancel session {mask_session(uri)}: HTTP {status}")
        raise _refused(status, f"cancel session {mask_session(uri)}")

    def object_facts(self, name: str) -> ObjectFacts | None:
        """``objects.get`` of ``name``'s metadata, or ``None`` when no live object is there.
        Errors other than 404 propagate."""
        blob = self.clients.client.bucket(self.bucket).get_blob(name, retry=None, timeout=self.timeout)
        if blob is None:
            return None
        return ObjectFacts(int(blob.size), str(blob.crc32c), str(blob.md5_hash), int(blob.generation))
