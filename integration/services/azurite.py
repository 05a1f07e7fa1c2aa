"""Azurite, Microsoft's Azure Storage emulator, run natively (blob service only) (issue #46).

The npm package ``azurite`` (pinned in :mod:`~twophase.integration.services.versions`) is installed
once with ``npm install`` into ``<cache>/azurite-<version>/`` and its blob server is run with the
machine's ``node`` on 127.0.0.1, a free port, its own data folder and one storage account with a
fresh random key (``AZURITE_ACCOUNTS``), so no well-known key is ever relied on. Telemetry is off:
nothing leaves the machine. ``--loose`` lets through headers Azurite does not implement and
``--skipApiVersionCheck`` accepts the newer service versions of current ``azure-storage-blob``.

Resolution order, as for the other services (:mod:`twophase.integration.services.launcher`):
``TWOPHASE_AZURE_CONNECTION_STRING`` (a standard Azure Storage connection string with
``BlobEndpoint``), else a server recorded by ``twophase services up --azure`` (entry ``azure``),
else a native one for the block.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twophase.coordinator.storage.azure_blob import connection_string_parts
from twophase.integration.services.cache import cache_dir, file_lock
from twophase.integration.services.native_service import NativeServer, NativeService, wait_started
from twophase.integration.services.process import HOST, ManagedProcess
from twophase.integration.services.versions import AZURITE_VERSION
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

CONNECTION_STRING_ENV = "TWOPHASE_AZURE_CONNECTION_STRING"
ACCOUNT_NAME = "twophase"


@dataclass(frozen=True)
class AzureBlobEndpoint:
    """A blob service and one account on it. The key never appears in ``repr``.

    Attributes:
        blob_url: the account's blob endpoint, e.g. ``http://127.0.0.1:10000/twophase`` (Azurite's
            path style) or ``https://<account>.blob.core.windows.net``.
        account_name: the storage account.
        account_key: its base64 shared key.
    """

    blob_url: str
    account_name: str
    account_key: str = field(repr=False)

    def connection_string(self) -> str:
        """The standard connection string (``AZURE_STORAGE_CONNECTION_STRING``); holds the key."""
        scheme = self.blob_url.split("://", 1)[0]
        return (
            f"DefaultEndpointsProtocol={scheme};AccountName={self.account_name};"
            f"AccountKey={self.account_key};BlobEndpoint={self.blob_url};"
        )

    def azure_env(self) -> dict[str, str]:
        """The Azure CLI/SDK variables that point a process at this account."""
        return {
            "AZURE_STORAGE_CONNECTION_STRING": self.connection_string(),
            "AZURE_STORAGE_ACCOUNT": self.account_name,
        }

    def service_client(self, timeout_s: float = 10.0) -> Any:
        """An ``azure.storage.blob.BlobServiceClient`` signed with the account key (SDK retries off)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            self.blob_url,
            credential={"account_name": self.account_name, "account_key": self.account_key},
            connection_timeout=timeout_s,
            read_timeout=timeout_s,
            retry_total=0,
        )

    def ensure_container(self, container: str) -> None:
        """Create ``container`` unless it exists."""
        from azure.core.exceptions import ResourceExistsError

        with contextlib.suppress(ResourceExistsError):
            self.service_client().create_container(container)


def endpoint_from_connection_string(text: str) -> AzureBlobEndpoint:
    """The endpoint a connection string names (``AccountName``, ``AccountKey``, ``BlobEndpoint``).

    Raises:
        ConfigError: one of the three is missing (the key is not in the message).
    """
    parts = connection_string_parts(text)
    missing = [k for k in ("AccountName", "AccountKey", "BlobEndpoint") if not parts.get(k)]
    if missing:
        raise ConfigError(
            f"{CONNECTION_STRING_ENV} lacks {', '.join(missing)}: give a full connection string"
        )
    return AzureBlobEndpoint(parts["BlobEndpoint"].rstrip("/"), parts["AccountName"], parts["AccountKey"])


def env_azure_endpoint() -> AzureBlobEndpoint | None:
    """The endpoint of ``TWOPHASE_AZURE_CONNECTION_STRING``, or None when it is unset.

    Raises:
        ConfigError: the connection string is incomplete.
    """
    text = os.environ.get(CONNECTION_STRING_ENV)
    return endpoint_from_connection_string(text) if text else None


def azurite_main() -> Path:
    """Azurite's blob server script, installed with ``npm install`` on first use (about a minute, once).

    Raises:
        ServiceUnavailableError: ``npm`` is missing or the install fails (npm's last line).
    """
    prefix = cache_dir() / f"azurite-{AZURITE_VERSION}"
    main = prefix / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    with file_lock(cache_dir() / f".azurite-{AZURITE_VERSION}.lock"):
        if main.is_file():
            return main
        npm = shutil.which("npm")
        if npm is None:
            raise ServiceUnavailableError("npm is not on PATH; it is needed once to install Azurite")
        prefix.mkdir(parents=True, exist_ok=True)
        log_event(log, logging.INFO, "installing azurite", version=AZURITE_VERSION, prefix=prefix)
        package = f"azurite@{AZURITE_VERSION}"
        proc = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--omit=dev", "--prefix", str(prefix), package],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not main.is_file():
            lines = [line for line in proc.stderr.splitlines() if line.strip()] or ["no azurite installed"]
            raise ServiceUnavailableError(f"installing Azurite with npm failed: {lines[-1]}")
    return main


def start_azurite(
    data_dir: Path, port: int, endpoint: AzureBlobEndpoint, detach: bool = False
) -> ManagedProcess:
    """Start Azurite's blob service for ``endpoint``'s account on 127.0.0.1:``port``, data in
    ``data_dir``. Call :func:`wait_azurite_ready` afterwards.

    Raises:
        ServiceUnavailableError: ``node`` is missing or Azurite cannot be installed.
    """
    main = azurite_main()
    node = shutil.which("node")
    if node is None:
        raise ServiceUnavailableError("node is not on PATH; Azurite runs on Node.js")
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AZURITE_ACCOUNTS": f"{endpoint.account_name}:{endpoint.account_key}"}
    argv = [
        node,
        str(main),
        "--blobHost",
        HOST,
        "--blobPort",
        str(port),
        "--location",
        str(data_dir / "data"),
        "--loose",
        "--skipApiVersionCheck",
        "--disableProductStyleUrl",
        "--disableTelemetry",
    ]
    return ManagedProcess("azurite", argv, data_dir / "azurite.out", env, cwd=data_dir, detach=detach)


def check_azure(endpoint: AzureBlobEndpoint, timeout_s: float) -> str | None:
    """One ``List Containers`` call signed with the account key; None when it works, else why not.

    Raises:
        ConfigError: the service answered 403 (wrong account or key; never retried).
    """
    from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError

    try:
        next(iter(endpoint.service_client(min(timeout_s, 5.0)).list_containers(results_per_page=1)), None)
    except ClientAuthenticationError:
        raise ConfigError(
            f"Azure blob service {endpoint.blob_url} refused account {endpoint.account_name!r}'s key: "
            f"check {CONNECTION_STRING_ENV}"
        ) from None
    except HttpResponseError as e:
        return f"HTTP {e.status_code}: {e.reason}"
    except AzureError as e:
        return type(e).__name__
    return None


def wait_azurite_ready(
    endpoint: AzureBlobEndpoint, timeout_s: float, process: ManagedProcess | None = None
) -> None:
    """Block until a real blob call (``List Containers``) succeeds against ``endpoint``.

    Raises:
        ConfigError: the key is refused.
        ServiceUnavailableError: not ready within ``timeout_s`` seconds, or the process exited.
    """

    wait_started("Azurite", endpoint.blob_url, lambda: check_azure(endpoint, timeout_s), timeout_s, process)
    log_event(log, logging.INFO, "azure blob ready", endpoint=endpoint.blob_url)


class AzuriteServer(NativeServer[AzureBlobEndpoint]):
    """One native Azurite (blob service) with its folder (data under ``root/data``, log
    ``root/azurite.out``), port and one account with a fresh random key."""

    def endpoint_on(self, port: int) -> AzureBlobEndpoint:
        """The account's path-style endpoint on ``port`` with a fresh random key."""
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        return AzureBlobEndpoint(f"http://{HOST}:{port}/{ACCOUNT_NAME}", ACCOUNT_NAME, key)

    def launch(self, detach: bool) -> ManagedProcess:
        """:func:`start_azurite` in :attr:`root` on :attr:`port`."""
        return start_azurite(self.root, self.port, self.endpoint, detach=detach)

    def wait_ready(self, timeout_s: float, process: ManagedProcess) -> None:
        """:func:`wait_azurite_ready`."""
        wait_azurite_ready(self.endpoint, timeout_s, process)

    def reach(self) -> dict[str, Any]:
        """The blob URL, account and key (the key too: ``services.json`` is 0600)."""
        return {
            "blob_url": self.endpoint.blob_url,
            "account_name": self.endpoint.account_name,
            "account_key": self.endpoint.account_key,
        }


def _endpoint_of(entry: dict[str, Any]) -> AzureBlobEndpoint:
    return AzureBlobEndpoint(str(entry["blob_url"]), str(entry["account_name"]), str(entry["account_key"]))


AZURITE: NativeService[AzureBlobEndpoint] = NativeService(
    name="azure",
    what="Azurite",
    env_var=CONNECTION_STRING_ENV,
    given=env_azure_endpoint,
    recorded=_endpoint_of,
    wait=lambda endpoint, timeout_s: wait_azurite_ready(endpoint, timeout_s),
    text=lambda endpoint: endpoint.blob_url,
    server=AzuriteServer,
)
"""Azurite in ``services up --azure`` (:meth:`~NativeService.up`), ``services status`` and the tests."""

up_azurite = AZURITE.up
azure_status = AZURITE.status
azure_service = AZURITE.service
