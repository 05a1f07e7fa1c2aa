"""Checkpoint storage backends (local/POSIX and S3) and :func:`open_storage`, the factory by location.

Locations:

- a plain path or ``file:///abs/path`` → :class:`~twophase.coordinator.storage.local.LocalCheckpointStorage`;
- ``s3://bucket[/prefix]`` → :class:`~twophase.coordinator.storage.s3.S3CheckpointStorage`.

S3 settings come from explicit :class:`S3Options`, else the environment (``TWOPHASE_S3_ENDPOINT``,
``TWOPHASE_S3_ACCESS_KEY``, ``TWOPHASE_S3_SECRET_KEY``, ``TWOPHASE_S3_REGION``), else boto3's own
defaults (its credential chain, ``AWS_*`` variables, profiles). Credentials are never logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.coordinator.storage.layout import validate_job_id
from twophase.coordinator.storage.local import LocalCheckpointStorage, local_path
from twophase.sinks.errors import ConfigError
from twophase.sinks.structured_log import log_event

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "CheckpointRef",
    "CheckpointStorage",
    "LocalCheckpointStorage",
    "S3Options",
    "default_s3_client",
    "open_storage",
]

log = logging.getLogger(__name__)

ENV_ENDPOINT = "TWOPHASE_S3_ENDPOINT"
ENV_ACCESS_KEY = "TWOPHASE_S3_ACCESS_KEY"
ENV_SECRET_KEY = "TWOPHASE_S3_SECRET_KEY"
ENV_REGION = "TWOPHASE_S3_REGION"


@dataclass(frozen=True)
class S3Options:
    """How to reach S3. ``None`` fields fall back to the environment, then to boto3 defaults.

    Attributes:
        endpoint_url: e.g. ``http://127.0.0.1:9000`` for MinIO; ``None`` = AWS.
        access_key / secret_key / session_token: explicit credentials (hidden from ``repr``).
        region: e.g. ``us-east-1``.
    """

    endpoint_url: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Options:
        """Options from ``TWOPHASE_S3_*`` variables (empty values count as unset)."""
        e = os.environ if env is None else env
        return cls(
            endpoint_url=e.get(ENV_ENDPOINT) or None,
            access_key=e.get(ENV_ACCESS_KEY) or None,
            secret_key=e.get(ENV_SECRET_KEY) or None,
            region=e.get(ENV_REGION) or None,
        )

    def or_else(self, fallback: S3Options) -> S3Options:
        """These options, with unset fields taken from ``fallback``."""
        return replace(
            self,
            endpoint_url=self.endpoint_url or fallback.endpoint_url,
            access_key=self.access_key or fallback.access_key,
            secret_key=self.secret_key or fallback.secret_key,
            session_token=self.session_token or fallback.session_token,
            region=self.region or fallback.region,
        )

    def validate(self) -> None:
        """Raises ConfigError: only one of access key and secret key, or a malformed endpoint URL."""
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigError("S3 access key and secret key must be given together")
        if self.endpoint_url is not None:
            u = urlparse(self.endpoint_url)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise ConfigError(f"S3 endpoint must be an http(s):// URL, got {self.endpoint_url!r}")


def default_s3_client(options: S3Options) -> S3Client:
    """A boto3 S3 client for ``options``; botocore's own retries are off (tenacity retries instead).

    Path-style addressing is used with an explicit endpoint (MinIO and most S3-compatible servers).
    """
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "total_max_attempts": 1},
        connect_timeout=10,
        read_timeout=60,
        s3={"addressing_style": "path"} if options.endpoint_url else None,
    )
    session = boto3.session.Session(
        aws_access_key_id=options.access_key,
        aws_secret_access_key=options.secret_key,
        aws_session_token=options.session_token,
        region_name=options.region,
    )
    return session.client("s3", endpoint_url=options.endpoint_url, config=config)


def open_storage(
    location: str,
    job_id: str,
    *,
    s3_options: S3Options | None = None,
    s3_client_factory: Callable[[S3Options], S3Client] | None = None,
    env: Mapping[str, str] | None = None,
) -> CheckpointStorage:
    """Open the checkpoint storage of ``job_id`` at ``location``. Writes nothing.

    Args:
        location: a local path, ``file:///abs/path`` or ``s3://bucket[/prefix]``.
        job_id: the job's stable id (one safe path segment).
        s3_options: explicit S3 settings; unset fields come from ``env`` (``TWOPHASE_S3_*``).
        s3_client_factory: builds the boto3 client from the merged options (default:
            :func:`default_s3_client`); tests pass their own.
        env: the environment to read (default ``os.environ``).

    Raises:
        ConfigError: bad job id, empty location, unknown scheme, bucket missing, or bad S3 options.
    """
    validate_job_id(job_id)
    if not location:
        raise ConfigError("checkpoint location is empty")
    scheme = urlparse(location).scheme if "://" in location else ""
    if scheme in ("", "file"):
        return LocalCheckpointStorage(local_path(location), job_id)
    if scheme == "s3":
        from twophase.coordinator.storage.s3 import S3CheckpointStorage

        parsed = urlparse(location)
        if not parsed.netloc:
            raise ConfigError(f"S3 checkpoint location needs a bucket: {location}")
        options = (s3_options or S3Options()).or_else(S3Options.from_env(env))
        options.validate()
        client = (s3_client_factory or default_s3_client)(options)
        log_event(
            log,
            logging.INFO,
            "opening S3 checkpoint storage",
            job=job_id,
            bucket=parsed.netloc,
            prefix=parsed.path.strip("/"),
            endpoint=options.endpoint_url or "aws-default",
        )
        return S3CheckpointStorage(parsed.netloc, parsed.path, job_id, client)
    hint = " (use s3://)" if scheme in ("s3a", "s3n") else ""
    raise ConfigError(
        f"unsupported checkpoint location scheme {scheme!r}{hint} in {location!r}: "
        "use a local path, file:// or s3://"
    )
