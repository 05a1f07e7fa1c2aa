"""Checkpoint storage backends (local/POSIX and S3) and :func:`open_storage`, the factory by location.

Locations:

- a plain path or ``file:///abs/path`` → :class:`~twophase.coordinator.storage.local.LocalCheckpointStorage`;
- ``s3://bucket[/prefix]`` → :class:`~twophase.coordinator.storage.s3.S3CheckpointStorage`.

S3 settings: :class:`~twophase.sinks.s3_options.S3Options`, whose unset fields come from the
standard AWS chain (``AWS_*`` variables, profiles, roles). Credentials are never logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.coordinator.storage.layout import validate_job_id
from twophase.coordinator.storage.local import LocalCheckpointStorage, local_path
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.s3_options import S3Options

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


def default_s3_client(options: S3Options) -> S3Client:
    """A boto3 S3 client for resolved ``options`` (botocore's retries off: tenacity retries)."""
    return options.boto3_client()


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
        s3_options: explicit S3 settings; unset fields come from the standard AWS chain.
        s3_client_factory: builds the boto3 client from the resolved options (default:
            :func:`default_s3_client`); tests pass their own.
        env: the environment the endpoint and region are resolved from (default ``os.environ``).

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
        options = (s3_options or S3Options()).resolved(os.environ if env is None else env)
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
