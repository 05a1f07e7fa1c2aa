"""A native MinIO that tests can crash, restart, stall and restrict (issue #16).

:class:`MinioServer` is a handle on one MinIO process serving one data directory: :meth:`kill`
(SIGKILL), :meth:`restart` (same data directory, port and credentials), :meth:`pause` /
:meth:`resume` (SIGSTOP / SIGCONT), plus IAM users and policies through MinIO's admin API (the
``minio`` SDK's ``MinioAdmin``, a dev dependency imported on use).

Why IAM policies and not a bucket policy: MinIO evaluates bucket policies for anonymous requests
only. Requests signed by the root user, by its STS credentials or by an IAM user are judged by IAM
policies alone (checked against the pinned MinIO: a bucket policy denying ``s3:PutObject`` lets all
three through). An explicit ``Deny`` in a policy attached to an IAM user takes effect at once, which
is how :meth:`MinioServer.deny` revokes a permission mid-run.

:func:`twophase.integration.services.s3_service` and :class:`S3Endpoint` are unchanged; this module
adds :func:`minio_server`, always native.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from twophase.integration.services.process import HOST, ManagedProcess, free_port
from twophase.integration.services.s3 import (
    DEFAULT_REGION,
    S3Endpoint,
    local_credentials,
    start_minio,
    wait_s3_ready,
)

log = logging.getLogger(__name__)


class MinioServer:
    """One native MinIO on 127.0.0.1 with its data directory; restartable on the same port.

    Args:
        data_dir: MinIO's folder (the objects live in ``data_dir/data``).
        timeout_s: bound of every readiness wait, seconds.

    Attributes:
        endpoint: the endpoint and root credentials (stable across restarts).
        console_port: the web console's port.
    """

    def __init__(self, data_dir: Path, timeout_s: float = 180.0) -> None:
        self.data_dir = data_dir
        self.timeout_s = timeout_s
        self.port = free_port()
        self.console_port = free_port()
        access, secret = local_credentials()
        region = os.environ.get("TWOPHASE_S3_REGION") or DEFAULT_REGION
        self.endpoint = S3Endpoint(f"http://{HOST}:{self.port}", access, secret, region)
        self.process: ManagedProcess | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> float:
        """Start MinIO (again) on the same data directory, port and credentials; wait until a real
        S3 call works.

        Returns:
            Seconds until it was ready.

        Raises:
            ServiceUnavailableError: it exited or was not ready within ``timeout_s``.
        """
        if self.process is not None and self.process.running():
            return 0.0
        started = time.monotonic()
        self.process = start_minio(self.data_dir, self.port, self.console_port, self.endpoint)
        wait_s3_ready(self.endpoint, self.timeout_s, self.process)
        return time.monotonic() - started

    def stop(self) -> None:
        """Stop MinIO (SIGTERM, then SIGKILL; a paused one is resumed first); idempotent."""
        if self.process is not None:
            self.process.stop()

    def running(self) -> bool:
        """True while the process exists (a paused MinIO counts as running)."""
        return self.process is not None and self.process.running()

    # -- faults -------------------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL MinIO: connections drop, in-flight requests fail, nothing is flushed."""
        if self.process is not None:
            self.process.kill()

    def restart(self) -> float:
        """Start a killed MinIO again (a running one is stopped first); see :meth:`start`.

        Returns:
            Seconds from the new process's start until it answered.
        """
        if self.process is not None and self.process.running():
            self.process.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP MinIO: it accepts connections (the kernel does) and answers nothing.

        Raises:
            ProcessLookupError: MinIO is not running.
        """
        if self.process is None:
            raise ProcessLookupError("MinIO was never started")
        self.process.pause()

    def resume(self) -> None:
        """SIGCONT a paused MinIO."""
        if self.process is not None:
            self.process.resume()

    def heal(self) -> None:
        """Resume a paused MinIO or start a dead one, and wait until it answers."""
        if self.process is not None and self.process.paused:
            self.process.resume()
        self.start()
        wait_s3_ready(self.endpoint, self.timeout_s, self.process)

    # -- IAM ----------------------------------------------------------------------------------------

    @property
    def iam(self) -> MinioIam:
        """IAM users and policies of this server (its root keys)."""
        return MinioIam(self.endpoint, self._admin)

    def add_user(
        self, access_key: str, secret_key: str, policies: Sequence[str] = ("readwrite",)
    ) -> S3Endpoint:
        """:meth:`MinioIam.add_user` on this server."""
        return self.iam.add_user(access_key, secret_key, policies)

    def deny(self, user: str, actions: Sequence[str], resources: Sequence[str], name: str) -> None:
        """:meth:`MinioIam.deny` on this server."""
        self.iam.deny(user, actions, resources, name)

    def allow_again(self, user: str, name: str) -> None:
        """:meth:`MinioIam.allow_again` on this server."""
        self.iam.allow_again(user, name)

    def _admin(self) -> Any:
        return minio_admin(self.endpoint)


class MinioIam:
    """IAM users and policies of a MinIO, through its admin API with the root keys of ``root``
    (any MinIO this machine runs: :class:`MinioServer`'s, or ``twophase services up``'s).

    Args:
        root: the server's endpoint signed with its root user.
        admin: makes the ``minio`` SDK's ``MinioAdmin`` (default: :func:`minio_admin` of ``root``).
    """

    def __init__(self, root: S3Endpoint, admin: Callable[[], Any] | None = None) -> None:
        self.root = root
        self._admin = admin or (lambda: minio_admin(root))

    def add_user(
        self, access_key: str, secret_key: str, policies: Sequence[str] = ("readwrite",)
    ) -> S3Endpoint:
        """Create an IAM user with ``policies`` attached (MinIO's built-in ``readwrite`` by default).

        Returns:
            An endpoint signing with the user's keys.

        Raises:
            minio.error.MinioAdminException: the admin API refused (e.g. keys too short).
        """
        admin = self._admin()
        admin.user_add(access_key, secret_key)
        admin.attach_policy(list(policies), user=access_key)
        return S3Endpoint(self.root.endpoint_url, access_key, secret_key, self.root.region)

    def deny(self, user: str, actions: Sequence[str], resources: Sequence[str], name: str) -> None:
        """Attach an explicit-``Deny`` IAM policy ``name`` to ``user``, effective at once.

        Args:
            user: the IAM user's access key.
            actions: e.g. ``["s3:PutObject"]``.
            resources: e.g. ``["arn:aws:s3:::bucket/prefix/*"]``.
            name: the policy's name (letters, digits, ``-``).
        """
        admin = self._admin()
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Deny", "Action": list(actions), "Resource": list(resources)}],
        }
        admin.policy_add(name, policy=policy)
        admin.attach_policy([name], user=user)
        log.warning("minio policy attached user=%s policy=%s deny=%s on=%s", user, name, actions, resources)

    def allow_again(self, user: str, name: str) -> None:
        """Detach the policy ``name`` that :meth:`deny` attached to ``user``."""
        self._admin().detach_policy([name], user=user)
        log.warning("minio policy detached user=%s policy=%s", user, name)


def minio_admin(root: S3Endpoint) -> Any:
    """The ``minio`` SDK's ``MinioAdmin`` of the MinIO at ``root`` (signed with its root keys)."""
    from minio.credentials.providers import StaticProvider
    from minio.minioadmin import MinioAdmin

    url = urlsplit(root.endpoint_url)
    return MinioAdmin(
        endpoint=url.netloc,
        credentials=StaticProvider(root.access_key, root.secret_key),
        region=root.region,
        secure=url.scheme == "https",
    )


@contextlib.contextmanager
def minio_server(timeout_s: float | None = None) -> Iterator[MinioServer]:
    """Start a native MinIO in a temporary folder (fresh random root credentials, free ports),
    yield its handle, stop it and delete the folder.

    Always native: ``TWOPHASE_S3_ENDPOINT`` does not apply (faults need the process).

    Raises:
        ConfigError: ``TWOPHASE_S3_ACCESS_KEY``/``..._SECRET_KEY`` too short.
        ServiceUnavailableError: MinIO cannot be built, started or reached in time.
    """
    from twophase.integration.services.launcher import start_timeout_s

    root = Path(tempfile.mkdtemp(prefix="twophase-minio-ctl-"))
    server = MinioServer(root, timeout_s or start_timeout_s())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
