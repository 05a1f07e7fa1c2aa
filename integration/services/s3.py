"""S3 endpoints: the :class:`S3Endpoint` value, and a native MinIO server built from source.

MinIO is built once with ``go install`` at the pinned module version into
``<cache>/bin/minio-<commit>/minio`` and run on 127.0.0.1 with its own data folder.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from twophase.integration.services.cache import go_install
from twophase.integration.services.process import HOST, ManagedProcess, wait_ready
from twophase.integration.services.versions import MINIO_MODULE, MINIO_MODULE_VERSION
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from twophase.connectors.s3 import S3SinkConfig
    from twophase.sinks.s3_options import S3Options

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"

#: S3 error codes that mean "your credentials are wrong", as opposed to "the server is down"
CREDENTIAL_ERRORS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken"})


@dataclass(frozen=True)
class S3Endpoint:
    """Where and how to reach an S3-compatible server. The secret never appears in ``repr``.

    Attributes:
        endpoint_url: e.g. ``"http://127.0.0.1:9000"``.
        access_key: access key id.
        secret_key: secret access key.
        region: signing region, e.g. ``"us-east-1"``.
    """

    endpoint_url: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = DEFAULT_REGION

    def boto3_client(self, connect_timeout_s: float = 5.0, max_attempts: int = 3) -> S3Client:
        """A boto3 S3 client for this endpoint (path-style addressing, standard retries)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=connect_timeout_s,
                read_timeout=60,
                retries={"mode": "standard", "max_attempts": max_attempts},
            ),
        )

    def s3_options(self) -> S3Options:
        """This endpoint as the project's :class:`~twophase.sinks.s3_options.S3Options`."""
        from twophase.sinks.s3_options import S3Options

        return S3Options(
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key,
            secret_access_key=self.secret_key,
        )

    def aws_env(self) -> dict[str, str]:
        """The standard AWS variables that point a process (a job, an executor) at this endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def sink_config(self, **fields: Any) -> S3SinkConfig:
        """An :class:`~twophase.connectors.s3.S3SinkConfig` writing to this endpoint; ``fields`` are the
        config's other fields (``bucket``, ``prefix``, ``format``, ...).

        Raises:
            ConfigError: invalid fields (from the config's validation).
        """
        from twophase.connectors.s3 import S3SinkConfig

        return S3SinkConfig(storage_options=self.s3_options(), **fields)

    def ensure_bucket(self, bucket: str) -> None:
        """Create ``bucket`` unless it exists already (owned by these credentials)."""
        client = self.boto3_client()
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError:
            client.create_bucket(Bucket=bucket)


def minio_binary() -> Path:
    """The MinIO server binary, built with ``go install`` on first use (a few minutes, once).

    Raises:
        ServiceUnavailableError: ``go`` is missing or the build fails (the message has Go's last line).
    """
    log.info("minio binary module=%s@%s", MINIO_MODULE, MINIO_MODULE_VERSION)
    return go_install(MINIO_MODULE, MINIO_MODULE_VERSION, "minio", "MinIO")


def local_credentials() -> tuple[str, str]:
    """Root credentials for a native MinIO: ``TWOPHASE_S3_ACCESS_KEY``/``..._SECRET_KEY`` when set,
    else fresh random ones for this server only (nothing secret is ever committed).

    Raises:
        ConfigError: the given keys are too short for MinIO (access key < 3, secret < 8 characters).
    """
    access = os.environ.get("TWOPHASE_S3_ACCESS_KEY") or f"twophase-{secrets.token_hex(4)}"
    secret = os.environ.get("TWOPHASE_S3_SECRET_KEY") or secrets.token_urlsafe(24)
    if len(access) < 3 or len(secret) < 8:
        raise ConfigError(
            "MinIO needs TWOPHASE_S3_ACCESS_KEY of >= 3 and TWOPHASE_S3_SECRET_KEY of >= 8 chars"
        )
    return access, secret


def start_minio(
    data_dir: Path, port: int, console_port: int, endpoint: S3Endpoint, detach: bool = False
) -> ManagedProcess:
    """Start MinIO serving ``data_dir`` on 127.0.0.1:``port`` with ``endpoint``'s credentials.

    Call :func:`wait_s3_ready` afterwards.
    """
    binary = minio_binary()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "MINIO_ROOT_USER": endpoint.access_key,
        "MINIO_ROOT_PASSWORD": endpoint.secret_key,
        "MINIO_SITE_REGION": endpoint.region,
        "MINIO_UPDATE": "off",
        "MINIO_BROWSER": "on",
    }
    argv = [
        str(binary),
        "server",
        "--quiet",
        "--address",
        f"{HOST}:{port}",
        "--console-address",
        f"{HOST}:{console_port}",
        str(data_dir / "data"),
    ]
    return ManagedProcess("minio", argv, data_dir / "minio.out", env, cwd=data_dir, detach=detach)


def check_s3(endpoint: S3Endpoint, timeout_s: float) -> str | None:
    """One ``ListBuckets`` call; None when it works, else the reason.

    Raises:
        ConfigError: the server answered but rejected the credentials (never retried).
    """
    client = endpoint.boto3_client(connect_timeout_s=min(timeout_s, 5.0), max_attempts=1)
    try:
        client.list_buckets()
        return None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in CREDENTIAL_ERRORS:
            raise ConfigError(
                f"S3 at {endpoint.endpoint_url} rejected the credentials ({code}): "
                "check TWOPHASE_S3_ACCESS_KEY / TWOPHASE_S3_SECRET_KEY"
            ) from None
        return f"{code or 'error'}: {exc}"
    except EndpointConnectionError:
        return "connection refused or host unreachable"
    except BotoCoreError as exc:
        return str(exc)


def wait_s3_ready(endpoint: S3Endpoint, timeout_s: float, process: ManagedProcess | None = None) -> None:
    """Block until a real S3 call (``ListBuckets``) succeeds against ``endpoint``.

    Raises:
        ConfigError: the credentials are rejected.
        ServiceUnavailableError: not ready within ``timeout_s`` seconds, or the server process exited.
    """

    def attempt() -> str | None:
        if process is not None and not process.running():
            raise ServiceUnavailableError(
                f"MinIO on {endpoint.endpoint_url} exited during start-up: {process.log_tail(3)}"
            )
        return check_s3(endpoint, timeout_s)

    reason = wait_ready(attempt, timeout_s, 0.3)
    if reason is None:
        log_event(log, logging.INFO, "s3 ready", endpoint=endpoint.endpoint_url)
        return
    raise ServiceUnavailableError(
        f"S3 at {endpoint.endpoint_url} is not reachable within {timeout_s:g} s ({reason})"
    )
