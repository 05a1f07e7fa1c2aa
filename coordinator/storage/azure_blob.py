"""Checkpoint storage on Azure Blob Storage and ADLS Gen2 (``abfss://``, ``wasbs://``) (issue #46).

Locations: ``abfss://<container>@<account>.dfs.core.windows.net/<prefix>`` (ADLS Gen2, hierarchical
namespace) or ``wasbs://<container>@<account>.blob.core.windows.net/<prefix>``; both are reached
through the Blob service endpoint (``https://<account>.blob.<suffix>``), which serves accounts with
a hierarchical namespace too, with the same conditional headers.

Publishing is one ``Put Blob`` with ``If-None-Match: *`` (the SDK's ``upload_blob(overwrite=False)``
in a single request for checkpoint-sized data): the service creates the blob atomically or answers
``409 BlobAlreadyExists``. Credentials, first that applies (:class:`AzureStorageOptions`): an
explicit credential, account key, SAS token or connection string; then ``AZURE_STORAGE_CONNECTION_STRING``
(when its account is the location's), ``AZURE_STORAGE_KEY``, ``AZURE_STORAGE_SAS_TOKEN``; else
azure-identity's ``DefaultAzureCredential`` (environment, workload or managed identity, Azure CLI).
None of them is ever logged or put in a repr; the SDK's own request log redacts the signature.

How answers are read (:func:`classify`): 404 is missing; 409 ``BlobAlreadyExists`` and 412
``ConditionNotMet`` mean the create lost; 401/403 and a credential chain that found nothing are
refused for good, naming the role to grant and the settings to check; 408, 429, 5xx, connection
errors and responses that never came are transient; any other status is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar
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

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

T = TypeVar("T")
#: URL schemes of Azure locations; the unencrypted ``wasb``/``abfs`` are refused
SCHEMES = ("abfss", "wasbs")
ROLE = "Storage Blob Data Contributor"
CREDENTIAL_SETTINGS = (
    "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or a "
    "DefaultAzureCredential identity (AZURE_CLIENT_ID/AZURE_TENANT_ID/..., managed identity, az login)"
)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_EXISTS_CODES = frozenset({"BlobAlreadyExists", "ConditionNotMet"})
_SERVICE = {"abfss": "dfs", "wasbs": "blob"}


@dataclass(frozen=True)
class AzureStorageOptions:
    """How to reach an Azure storage account; unset fields come from the environment.

    Attributes:
        account_key: the account's shared key (base64).
        sas_token: a SAS token (with or without its leading ``?``).
        connection_string: a full connection string (its ``BlobEndpoint`` wins over the URL's host).
        blob_endpoint: the Blob service URL, e.g. an emulator's ``http://127.0.0.1:10000/<account>``.
        credential: any azure-core ``TokenCredential`` (e.g. a ``ClientSecretCredential``).
        timeout_s: connection and read timeout of every request, seconds.

    Secrets never appear in ``repr``.
    """

    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    connection_string: str | None = field(default=None, repr=False)
    blob_endpoint: str | None = None
    credential: Any = field(default=None, repr=False)
    timeout_s: float = 30.0

    def resolved(self, env: Mapping[str, str]) -> AzureStorageOptions:
        """Fill unset credentials from ``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_KEY`` and
        ``AZURE_STORAGE_SAS_TOKEN`` (the Azure CLI's variables), unless one is given explicitly."""
        if self.account_key or self.sas_token or self.connection_string or self.credential is not None:
            return self
        return replace(
            self,
            connection_string=env.get("AZURE_STORAGE_CONNECTION_STRING") or None,
            account_key=env.get("AZURE_STORAGE_KEY") or None,
            sas_token=env.get("AZURE_STORAGE_SAS_TOKEN") or None,
        )

    def key_sas_endpoint(self) -> tuple[str | None, str | None, str | None]:
        """(account key, SAS token without its ``?``, Blob endpoint): the connection string's
        ``AccountKey``, ``SharedAccessSignature`` and ``BlobEndpoint`` over the fields, for clients
        that take them one by one (delta-rs, pyarrow). Holds secrets."""
        key, sas, endpoint = self.account_key, self.sas_token, self.blob_endpoint
        if self.connection_string:
            parts = connection_string_parts(self.connection_string)
            key = parts.get("AccountKey") or key
            sas = parts.get("SharedAccessSignature") or sas
            endpoint = parts.get("BlobEndpoint") or endpoint
        return key, sas.lstrip("?") if sas else None, endpoint


@dataclass(frozen=True)
class AzureLocation:
    """A parsed ``abfss://`` / ``wasbs://`` location.

    Attributes:
        scheme: ``abfss`` or ``wasbs``.
        container: the container (an ADLS Gen2 file system).
        host: ``<account>.dfs.<suffix>`` or ``<account>.blob.<suffix>``.
        path: the key prefix or key, without the leading ``/``.
    """

    scheme: str
    container: str
    host: str
    path: str

    @property
    def account(self) -> str:
        """The storage account's name (the host's first label)."""
        return self.host.split(".", 1)[0]

    @property
    def blob_url(self) -> str:
        """The Blob service endpoint of the account (``https://<account>.blob.<suffix>``)."""
        labels = self.host.split(".")
        suffix = (
            ".".join(labels[2:]) if len(labels) > 2 and labels[1] in ("dfs", "blob") else "core.windows.net"
        )
        return f"https://{self.account}.blob.{suffix}"


def parse_location(location: str) -> AzureLocation:
    """Split ``abfss://container@account.dfs.core.windows.net/path`` (or ``wasbs://…blob…``).

    Raises:
        ConfigError: another scheme, no container or no account host.
    """
    parsed = urlparse(location)
    if parsed.scheme in ("abfs", "wasb"):
        raise ConfigError(f"{location!r}: use {parsed.scheme}s:// (TLS); unencrypted Azure access is refused")
    if parsed.scheme not in SCHEMES:
        raise ConfigError(f"not an abfss:// or wasbs:// location: {location!r}")
    container, at, host = parsed.netloc.partition("@")
    if not at or not container or not host or "." not in host:
        raise ConfigError(
            f"Azure location {location!r} needs a container and an account host: "
            f"{parsed.scheme}://<container>@<account>.{_SERVICE[parsed.scheme]}.core.windows.net/<path>"
        )
    return AzureLocation(parsed.scheme, container, host, parsed.path.lstrip("/"))


def connection_string_parts(text: str) -> dict[str, str]:
    """The ``Key=value`` fields of an Azure Storage connection string (``AccountName``,
    ``AccountKey``, ``BlobEndpoint``, ``SharedAccessSignature``, ...). Holds secrets."""
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def classify(error: BaseException) -> StoreError | None:
    """What an Azure SDK error means for the checkpoint storage, or None when it cannot be read
    (a publish meeting it is unknown). Messages are one line: status and Azure error code only."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(error, ClientAuthenticationError):
        status = error.status_code
        if status is None:  # the credential chain itself failed: nothing was sent
            return StoreRefused(
                f"no Azure credential could be obtained ({type(error).__name__}): set {CREDENTIAL_SETTINGS}"
            )
        return _denied(f"HTTP {status} {_code(error)}".strip())
    if isinstance(error, ServiceRequestError | ServiceResponseError):
        return TransientStoreError(f"no answer from Azure ({type(error).__name__})")
    if isinstance(error, HttpResponseError):
        status = error.status_code or 0
        text = f"HTTP {status} {_code(error)}".strip()
        if isinstance(error, ResourceNotFoundError) or status == 404:
            return ObjectMissing(text)
        if _code(error) in _EXISTS_CODES or status == 412:
            return ObjectExists(text)
        if status in _TRANSIENT_STATUS:
            return TransientStoreError(text)
        if status in (401, 403):
            return _denied(text)
        return StoreRefused(text)
    return None


def _code(error: BaseException) -> str:
    """The ``x-ms-error-code`` the SDK read from the answer (``""`` if none); the SDK gives a string
    or a ``StorageErrorCode`` member."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _denied(answer: str) -> StoreRefused:
    return StoreRefused(
        f"Azure refused the request ({answer}): grant the identity '{ROLE}' on the container, "
        f"or check {CREDENTIAL_SETTINGS}"
    )


class AzureBlobStore(DeletesOneByOne):
    """One container of an Azure storage account, through ``azure.storage.blob.ContainerClient``.

    Args:
        location: where the container is (its URL form is kept for every location it names).
        client: the container's client (SDK retries off: ``retry_total=0``).
        options: how ``client`` was built, to open sibling containers for :meth:`at`.
    """

    service = "Azure"

    def __init__(
        self, location: AzureLocation, client: ContainerClient, options: AzureStorageOptions
    ) -> None:
        self.location = location
        self._client = client
        self._options = options

    def uri(self, key: str) -> str:
        """``<scheme>://<container>@<host>/<key>``."""
        loc = self.location
        return f"{loc.scheme}://{loc.container}@{loc.host}/{key}"

    def at(self, location: str) -> tuple[ObjectStore, str]:
        """This container's or a sibling's (same account) store, and the key, of ``location``.

        Raises:
            ConfigError: not an Azure location of this account.
        """
        parsed = parse_location(location)
        if parsed.account != self.location.account:
            raise ConfigError(f"{location!r} is in account {parsed.account!r}, not {self.location.account!r}")
        if not parsed.path:
            raise ConfigError(f"Azure checkpoint location {location!r} names no checkpoint")
        if parsed.container == self.location.container:
            return self, parsed.path
        return open_container(parsed, self._options), parsed.path

    def _call(self, fn: Callable[[], T]) -> T:
        return call_classified(fn, classify)

    def create(self, key: str, data: bytes, content_type: str | None) -> None:
        """``Put Blob`` with ``If-None-Match: *`` (one request)."""
        from azure.storage.blob import ContentSettings

        settings = ContentSettings(content_type=content_type) if content_type else None
        blob = self._client.get_blob_client(key)
        self._call(lambda: blob.upload_blob(data, overwrite=False, content_settings=settings))

    def put(self, key: str, data: bytes) -> None:
        """``Put Blob``, replacing any blob at ``key``."""
        blob = self._client.get_blob_client(key)
        self._call(lambda: blob.upload_blob(data, overwrite=True))

    def get(self, key: str) -> bytes:
        """``Get Blob``, the whole content."""
        blob = self._client.get_blob_client(key)
        return bytes(self._call(lambda: blob.download_blob().readall()))

    def exists(self, key: str) -> bool:
        """``Get Blob Properties``: False on 404."""
        blob = self._client.get_blob_client(key)
        try:
            self._call(blob.get_blob_properties)
        except ObjectMissing:
            return False
        return True

    def list_keys(self, prefix: str) -> list[str]:
        """``List Blobs`` (flat, every page); directories of a hierarchical namespace are listed as
        names too and never parse as checkpoint keys."""
        return list(self._call(lambda: list(self._client.list_blob_names(name_starts_with=prefix))))

    def delete(self, key: str) -> None:
        """``Delete Blob`` (with its snapshots)."""
        blob = self._client.get_blob_client(key)
        self._call(lambda: blob.delete_blob(delete_snapshots="include"))


def open_container(location: AzureLocation, options: AzureStorageOptions) -> AzureBlobStore:
    """An :class:`AzureBlobStore` for ``location``'s container with ``options`` (already resolved).
    Contacts nothing.

    Raises:
        ConfigError: azure-storage-blob (the ``azure`` extra) is missing, or the connection string
            is for another account.
    """
    client = container_client(
        location,
        options,
        retry_total=0,  # the checkpoint storage retries, and must know when an attempt may have landed
        needs="Azure checkpoint storage needs azure-storage-blob and azure-identity",
        place="the checkpoint location's is",
    )
    return AzureBlobStore(location, client, options)


def container_client(
    location: AzureLocation, options: AzureStorageOptions, *, retry_total: int, needs: str, place: str
) -> Any:
    """A ``ContainerClient`` for ``location``'s container with ``options`` (already resolved): from
    the connection string, else the account URL with twophase's one credential chain (account key,
    SAS token, else ``DefaultAzureCredential``). The SDK retries ``retry_total`` times. Contacts
    nothing. ``needs`` and ``place`` word the errors for the caller (checkpoints, the file sink).

    Raises:
        ConfigError: azure-storage-blob (the ``azure`` extra) is missing, or the connection string
            is for another account.
    """
    try:
        from azure.storage.blob import ContainerClient
    except ImportError:
        raise ConfigError(f"{needs}: pip install 'twophase[azure]'") from None
    common: dict[str, Any] = {
        "retry_total": retry_total,
        "connection_timeout": options.timeout_s,
        "read_timeout": options.timeout_s,
    }
    if options.connection_string:
        account = connection_string_parts(options.connection_string).get("AccountName")
        if account not in (None, location.account):
            raise ConfigError(
                f"the Azure connection string is for account {account!r}, but {place} {location.account!r}"
            )
        return ContainerClient.from_connection_string(options.connection_string, location.container, **common)
    account_url = options.blob_endpoint or location.blob_url
    return ContainerClient(
        account_url, location.container, credential=_credential(location, options), **common
    )


def _credential(location: AzureLocation, options: AzureStorageOptions) -> Any:
    if options.credential is not None:
        return options.credential
    if options.account_key:
        from azure.core.credentials import AzureNamedKeyCredential

        return AzureNamedKeyCredential(location.account, options.account_key)
    if options.sas_token:
        from azure.core.credentials import AzureSasCredential

        return AzureSasCredential(options.sas_token.lstrip("?"))
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise ConfigError(
            "no Azure account key, SAS token or connection string is set, and azure-identity is missing "
            "for DefaultAzureCredential: pip install 'twophase[azure]'"
        ) from None
    return DefaultAzureCredential()


def azure_options_from_env(
    options: AzureStorageOptions | None, env: Mapping[str, str] | None
) -> AzureStorageOptions:
    """``options`` (or the defaults) with unset credentials from ``env`` (default ``os.environ``)."""
    return (options or AzureStorageOptions()).resolved(os.environ if env is None else env)
