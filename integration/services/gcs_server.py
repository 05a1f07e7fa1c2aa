"""fake-gcs-server, a Google Cloud Storage emulator, run natively (issue #46).

The Go module (pinned in :mod:`~twophase.integration.services.versions`) is built once with
``go install`` into ``<cache>/bin/fake-gcs-server-<version>/`` and run over plain HTTP on 127.0.0.1,
a free port and its own folder (filesystem backend, so a restart keeps the objects). It serves the
JSON API with generation preconditions (``ifGenerationMatch=0``), which is what the checkpoint
storage's conditional publish needs. Clients reach it through ``STORAGE_EMULATOR_HOST``, the
variable Google's own client libraries honour, without credentials.

Resolution order, as for the other services (:mod:`twophase.integration.services.launcher`):
``TWOPHASE_GCS_ENDPOINT`` (an emulator's ``http://host:port``), else a server recorded by
``twophase services up --gcs`` (entry ``gcs``), else a native one for the block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twophase.integration.services.cache import go_install
from twophase.integration.services.native_service import NativeServer, NativeService, wait_started
from twophase.integration.services.process import HOST, ManagedProcess
from twophase.integration.services.versions import FAKE_GCS_MODULE, FAKE_GCS_VERSION
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

ENDPOINT_ENV = "TWOPHASE_GCS_ENDPOINT"
PROJECT = "twophase-local"


@dataclass(frozen=True)
class GcsEndpoint:
    """A GCS emulator's base URL (``http://127.0.0.1:<port>``), reached without credentials."""

    url: str

    def gcs_env(self) -> dict[str, str]:
        """``STORAGE_EMULATOR_HOST`` (Google's client libraries) and a project id for a process."""
        return {"STORAGE_EMULATOR_HOST": self.url, "GOOGLE_CLOUD_PROJECT": PROJECT}

    def client(self) -> Any:
        """A ``google.cloud.storage.Client`` on this emulator (anonymous credentials)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage  # type: ignore[import-untyped]

        return storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.url},
        )

    def ensure_bucket(self, bucket: str) -> None:
        """Create ``bucket`` unless it exists."""
        from google.api_core.exceptions import Conflict

        with contextlib.suppress(Conflict):
            self.client().create_bucket(bucket)


def env_gcs_endpoint() -> GcsEndpoint | None:
    """The endpoint of ``TWOPHASE_GCS_ENDPOINT``, or None when unset.

    Raises:
        ConfigError: it is not an http(s) URL.
    """
    url = os.environ.get(ENDPOINT_ENV)
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{ENDPOINT_ENV}={url!r} must start with http:// or https://")
    return GcsEndpoint(url.rstrip("/"))


def fake_gcs_binary() -> Path:
    """fake-gcs-server's binary, built with ``go install`` on first use (a few minutes, once).

    Raises:
        ServiceUnavailableError: ``go`` is missing or the build fails.
    """
    return go_install(FAKE_GCS_MODULE, FAKE_GCS_VERSION, "fake-gcs-server", "fake-gcs-server")


def start_fake_gcs(data_dir: Path, port: int, detach: bool = False) -> ManagedProcess:
    """Start fake-gcs-server over HTTP on 127.0.0.1:``port``, objects under ``data_dir/data``.
    Call :func:`wait_gcs_ready` afterwards."""
    binary = fake_gcs_binary()
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    url = f"http://{HOST}:{port}"
    argv = [
        str(binary),
        "-scheme",
        "http",
        "-host",
        HOST,
        "-port",
        str(port),
        "-backend",
        "filesystem",
        "-filesystem-root",
        str(data_dir / "data"),
        "-public-host",
        f"{HOST}:{port}",
        "-external-url",
        url,
        "-log-level",
        "warn",
    ]
    return ManagedProcess("fake-gcs-server", argv, data_dir / "gcs.out", dict(os.environ), data_dir, detach)


def check_gcs(endpoint: GcsEndpoint, timeout_s: float) -> str | None:
    """One JSON-API ``buckets.list`` call; None when it answers 200, else why not."""
    request = f"{endpoint.url}/storage/v1/b?project={PROJECT}"
    try:
        with urllib.request.urlopen(request, timeout=min(timeout_s, 5.0)) as response:
            json.load(response)
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (OSError, ValueError) as e:
        return str(getattr(e, "reason", e))
    return None


def wait_gcs_ready(endpoint: GcsEndpoint, timeout_s: float, process: ManagedProcess | None = None) -> None:
    """Block until ``buckets.list`` answers on ``endpoint``.

    Raises:
        ServiceUnavailableError: not ready within ``timeout_s`` seconds, or the process exited.
    """

    wait_started("fake-gcs-server", endpoint.url, lambda: check_gcs(endpoint, timeout_s), timeout_s, process)
    log_event(log, logging.INFO, "gcs ready", endpoint=endpoint.url)


class GcsServer(NativeServer[GcsEndpoint]):
    """One native fake-gcs-server with its folder (objects under ``root/data``, log
    ``root/gcs.out``) and port."""

    def endpoint_on(self, port: int) -> GcsEndpoint:
        """``http://127.0.0.1:<port>``."""
        return GcsEndpoint(f"http://{HOST}:{port}")

    def launch(self, detach: bool) -> ManagedProcess:
        """:func:`start_fake_gcs` in :attr:`root` on :attr:`port`."""
        return start_fake_gcs(self.root, self.port, detach=detach)

    def wait_ready(self, timeout_s: float, process: ManagedProcess) -> None:
        """:func:`wait_gcs_ready`."""
        wait_gcs_ready(self.endpoint, timeout_s, process)

    def reach(self) -> dict[str, Any]:
        """The base URL."""
        return {"url": self.endpoint.url}


GCS: NativeService[GcsEndpoint] = NativeService(
    name="gcs",
    what="fake-gcs-server",
    env_var=ENDPOINT_ENV,
    given=env_gcs_endpoint,
    recorded=lambda entry: GcsEndpoint(str(entry["url"])),
    wait=lambda endpoint, timeout_s: wait_gcs_ready(endpoint, timeout_s),
    text=lambda endpoint: endpoint.url,
    server=GcsServer,
)
"""fake-gcs-server in ``services up --gcs`` (:meth:`~NativeService.up`), ``services status`` and the tests."""

up_gcs = GCS.up
gcs_status = GCS.status
gcs_service = GCS.service
