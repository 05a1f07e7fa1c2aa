"""A native MinIO over TLS with a certificate authority made at start-up, and least-privilege users.

:func:`make_s3_certificates` writes a fresh CA (``ca.crt``) and a server certificate for
``127.0.0.1`` and ``localhost`` signed by it, in the layout MinIO's ``--certs-dir`` reads
(``public.crt``, ``private.key``, ``CAs/ca.crt``). Only the ``cryptography`` library is used: no
``openssl`` or ``certgen`` binary. Clients trust the CA through the standard ``AWS_CA_BUNDLE``
(boto3, pyarrow through the connectors, delta-rs through the Delta sink).

:class:`TlsMinioServer` is a :class:`~twophase.integration.services.minio_server.MinioServer` on
``https://127.0.0.1:<port>`` whose admin calls (IAM users and policies) also verify the CA.
:func:`least_privilege_policy` is the IAM policy documented in ``docs/secured-s3.md``: the S3
actions the S3 sink, the Delta sink and ``s3://`` checkpoint storage need, on one bucket and its
prefixes, and nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twophase.integration.services.minio_server import MinioServer
from twophase.integration.services.process import HOST, ManagedProcess
from twophase.integration.services.s3 import S3Endpoint, minio_binary, wait_s3_ready

log = logging.getLogger(__name__)

#: S3 actions of the least-privilege policy, each with why it is needed (docs/secured-s3.md).
#: Object actions apply to ``arn:aws:s3:::<bucket>/<prefix>*``, bucket actions to the bucket.
OBJECT_ACTIONS: dict[str, str] = {
    "s3:PutObject": "PutObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload: "
    "data files, S3-sink tails, Delta log entries, checkpoint metadata and markers",
    "s3:GetObject": "GetObject and HeadObject: tails on resume, Delta log, checkpoint metadata",
    "s3:DeleteObject": "DeleteObject(s): tails after commit, lingering cleanup, checkpoint retention",
    "s3:AbortMultipartUpload": "aborting lingering and failed multipart uploads of the S3 sink",
    "s3:ListMultipartUploadParts": "ListParts: resuming and checking an S3-sink upload",
}
BUCKET_ACTIONS: dict[str, str] = {
    "s3:ListBucket": "ListObjectsV2 and HeadBucket: checkpoint listing, Delta log listing, lingering",
    "s3:ListBucketMultipartUploads": "ListMultipartUploads: finding lingering S3-sink uploads",
}
LEAST_PRIVILEGE_ACTIONS: tuple[str, ...] = (*OBJECT_ACTIONS, *BUCKET_ACTIONS)


@dataclass(frozen=True)
class S3Certificates:
    """Files of a CA and a server certificate it signed (PEM).

    Attributes:
        certs_dir: MinIO's ``--certs-dir``: ``public.crt``, ``private.key``, ``CAs/ca.crt``.
        ca_bundle: the CA certificate alone, the value for ``AWS_CA_BUNDLE``.
    """

    certs_dir: Path
    ca_bundle: Path


def make_s3_certificates(folder: Path, hosts: Sequence[str] = (HOST, "localhost")) -> S3Certificates:
    """Make a CA and a server certificate for ``hosts`` (IP addresses or DNS names) in ``folder``,
    laid out as MinIO's ``--certs-dir`` wants them; the Kafka launcher's own maker makes them
    (:func:`~twophase.integration.services.certificates.make_tls_files`, keys mode 0600).

    Returns:
        Where the files are.
    """
    from twophase.integration.services.certificates import make_tls_files  # cryptography: dev only

    made = make_tls_files(folder / "pem", tuple(hosts), name="minio")
    certs_dir = folder / "certs"
    (certs_dir / "CAs").mkdir(parents=True, exist_ok=True)
    ca_bundle = folder / "ca.crt"
    shutil.copyfile(made.ca_cert, ca_bundle)
    shutil.copyfile(made.ca_cert, certs_dir / "CAs" / "ca.crt")
    shutil.copyfile(made.server_cert, certs_dir / "public.crt")
    private = certs_dir / "private.key"
    private.touch(mode=0o600)
    shutil.copyfile(made.server_key, private)
    return S3Certificates(certs_dir=certs_dir, ca_bundle=ca_bundle)


def least_privilege_policy(
    bucket: str, prefixes: Sequence[str], actions: Sequence[str] = ()
) -> dict[str, Any]:
    """The minimal IAM policy of a job writing under ``prefixes`` of ``bucket``.

    Args:
        bucket: the job's bucket.
        prefixes: key prefixes without a leading ``/`` (e.g. ``"tables/orders"``); objects under
            each, and listings restricted to each, are allowed.
        actions: the actions to grant; empty: all of :data:`LEAST_PRIVILEGE_ACTIONS` (a test
            removes one to see which error its absence gives).

    Returns:
        The policy document (``Version`` 2012-10-17), ready for ``json.dumps``.
    """
    granted = tuple(actions) or LEAST_PRIVILEGE_ACTIONS
    objects = [a for a in granted if a in OBJECT_ACTIONS]
    buckets = [a for a in granted if a in BUCKET_ACTIONS]
    statements: list[dict[str, Any]] = []
    if objects:
        resources = [f"arn:aws:s3:::{bucket}/{p.strip('/')}/*" for p in prefixes]
        statements.append({"Effect": "Allow", "Action": objects, "Resource": resources})
    if buckets:
        statements.append(
            {
                "Effect": "Allow",
                "Action": buckets,
                "Resource": [f"arn:aws:s3:::{bucket}"],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


class TlsMinioServer(MinioServer):
    """A native MinIO serving HTTPS on 127.0.0.1 with a certificate of a CA made for it.

    Args:
        data_dir: MinIO's folder (objects under ``data_dir/data``, certificates under
            ``data_dir/tls``).
        timeout_s: bound of every readiness wait, seconds.

    Attributes:
        certificates: the CA bundle and MinIO's certificate folder.
        endpoint: ``https://127.0.0.1:<port>`` and the root credentials (secret hidden in ``repr``).

    Readiness waits and admin calls verify the server against :attr:`certificates`; the calling
    process must have ``AWS_CA_BUNDLE`` set to :attr:`S3Certificates.ca_bundle` for boto3 to
    verify it (:func:`tls_minio_server` does not set it: the caller chooses its scope).
    """

    def __init__(self, data_dir: Path, timeout_s: float = 180.0) -> None:
        super().__init__(data_dir, timeout_s)
        self.certificates = make_s3_certificates(data_dir / "tls")
        self.endpoint = S3Endpoint(
            f"https://{HOST}:{self.port}",
            self.endpoint.access_key,
            self.endpoint.secret_key,
            self.endpoint.region,
        )

    def start(self) -> float:
        """Start MinIO over TLS (again) on the same folder, port and credentials; wait until a
        ``ListBuckets`` call over verified TLS works.

        Returns:
            Seconds until it was ready.

        Raises:
            ServiceUnavailableError: it exited or was not ready within ``timeout_s``.
        """
        import time

        if self.process is not None and self.process.running():
            return 0.0
        started = time.monotonic()
        self.process = self._spawn()
        with _ca_bundle_env(self.certificates.ca_bundle):
            wait_s3_ready(self.endpoint, self.timeout_s, self.process)
        return time.monotonic() - started

    def heal(self) -> None:
        """Resume a paused MinIO or start a dead one, and wait until it answers."""
        if self.process is not None and self.process.paused:
            self.process.resume()
        self.start()

    def _spawn(self) -> ManagedProcess:
        import os

        binary = minio_binary()
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "MINIO_ROOT_USER": self.endpoint.access_key,
            "MINIO_ROOT_PASSWORD": self.endpoint.secret_key,
            "MINIO_SITE_REGION": self.endpoint.region,
            "MINIO_UPDATE": "off",
            "MINIO_BROWSER": "off",
        }
        argv = [
            str(binary),
            "server",
            "--quiet",
            "--certs-dir",
            str(self.certificates.certs_dir),
            "--address",
            f"{HOST}:{self.port}",
            "--console-address",
            f"{HOST}:{self.console_port}",
            str(self.data_dir / "data"),
        ]
        log.info("starting minio over tls endpoint=%s", self.endpoint.endpoint_url)
        return ManagedProcess("minio-tls", argv, self.data_dir / "minio.out", env, cwd=self.data_dir)

    def add_policy(self, name: str, policy: dict[str, Any]) -> None:
        """Create or replace the IAM policy ``name``.

        Raises:
            minio.error.MinioAdminException: the admin API refused the document.
        """
        self._admin().policy_add(name, policy=policy)

    def add_user_with_policy(self, access_key: str, secret_key: str, policy: dict[str, Any]) -> S3Endpoint:
        """Create an IAM user whose only policy is ``policy`` (named after the user).

        Returns:
            An endpoint signing with the user's keys.
        """
        name = f"policy-{access_key}"
        self.add_policy(name, policy)
        return self.add_user(access_key, secret_key, policies=(name,))

    def remove_user(self, access_key: str) -> None:
        """Delete an IAM user and the policy :meth:`add_user_with_policy` made for it; idempotent."""
        admin = self._admin()
        with contextlib.suppress(Exception):
            admin.user_remove(access_key)
        with contextlib.suppress(Exception):
            admin.policy_remove(f"policy-{access_key}")

    def _admin(self) -> Any:
        import urllib3
        from minio.credentials.providers import StaticProvider
        from minio.minioadmin import MinioAdmin

        http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(self.certificates.ca_bundle))
        return MinioAdmin(
            endpoint=f"{HOST}:{self.port}",
            credentials=StaticProvider(self.endpoint.access_key, self.endpoint.secret_key),
            region=self.endpoint.region,
            secure=True,
            http_client=http,
        )


@contextlib.contextmanager
def _ca_bundle_env(bundle: Path) -> Iterator[None]:
    import os

    before = os.environ.get("AWS_CA_BUNDLE")
    os.environ["AWS_CA_BUNDLE"] = str(bundle)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AWS_CA_BUNDLE", None)
        else:
            os.environ["AWS_CA_BUNDLE"] = before


@contextlib.contextmanager
def tls_minio_server(timeout_s: float | None = None) -> Iterator[TlsMinioServer]:
    """Start a native MinIO over TLS in a temporary folder (fresh CA, fresh random root
    credentials, free ports), yield its handle, then stop it and delete the folder (keys included).

    Raises:
        ConfigError: ``TWOPHASE_S3_ACCESS_KEY``/``..._SECRET_KEY`` too short.
        ServiceUnavailableError: MinIO cannot be built, started or reached in time.
    """
    from twophase.integration.services.launcher import start_timeout_s

    root = Path(tempfile.mkdtemp(prefix="twophase-minio-tls-"))
    server = TlsMinioServer(root, timeout_s or start_timeout_s())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


COMPOSE_HOSTS: tuple[str, ...] = ("minio-secured", HOST, "localhost")
"""Names the compose MinIO's certificate is valid for: the service, and the host's port mapping."""


def compose_config(directory: Path, uid: int | None = None) -> S3Certificates:
    """Write the compose MinIO's CA and certificate into ``directory`` (the ``minio-secured``
    volume): ``certs/`` for ``minio server --certs-dir`` and ``ca.crt`` for clients'
    ``AWS_CA_BUNDLE``, valid for :data:`COMPOSE_HOSTS`.

    Args:
        directory: the folder (created if missing).
        uid: owner of the files when running as root (MinIO's image runs as root: ``None``).

    Returns:
        Where the files are.
    """
    certificates = make_s3_certificates(directory, COMPOSE_HOSTS)
    if uid is not None:
        for path in (directory, *directory.rglob("*")):
            os.chown(path, uid, uid)
    log.info("compose minio certificates written certs_dir=%s", certificates.certs_dir)
    return certificates


if __name__ == "__main__":
    # docker-compose's minio-secured-config service: python -m ... <volume folder>
    compose_config(Path(sys.argv[1]))
