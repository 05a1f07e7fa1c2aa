"""Checkpoint storage backends (local/POSIX, S3, Azure, GCS) and :func:`open_storage`, the factory
by location.

Locations:

- a plain path or ``file:///abs/path`` → :class:`~twophase.coordinator.storage.local.LocalCheckpointStorage`;
- ``s3://bucket[/prefix]`` → :class:`~twophase.coordinator.storage.s3.S3CheckpointStorage`;
- ``abfss://container@account.dfs.core.windows.net[/prefix]`` or
  ``wasbs://container@account.blob.core.windows.net[/prefix]`` → an
  :class:`~twophase.coordinator.storage.object_store.ObjectCheckpointStorage` on
  :mod:`~twophase.coordinator.storage.azure_blob`;
- ``gs://bucket[/prefix]`` → the same on :mod:`~twophase.coordinator.storage.gcs`.

S3 settings: :class:`~twophase.sinks.s3_options.S3Options`, whose unset fields come from the
standard AWS chain (``AWS_*`` variables, profiles, roles); Azure:
:class:`~twophase.coordinator.storage.azure_blob.AzureStorageOptions` (``AZURE_STORAGE_*``, else
``DefaultAzureCredential``); GCS: :class:`~twophase.coordinator.storage.gcs.GcsStorageOptions`
(Application Default Credentials, ``STORAGE_EMULATOR_HOST``). Credentials are never logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from twophase.coordinator.storage.azure_blob import AzureStorageOptions
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.coordinator.storage.gcs import GcsStorageOptions
from twophase.coordinator.storage.layout import validate_job_id
from twophase.coordinator.storage.local import LocalCheckpointStorage, local_path
from twophase.sinks.errors import ConfigError, MissingExtraError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.s3_options import S3Options, is_boto3_missing

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "AzureStorageOptions",
    "CheckpointRef",
    "CheckpointStorage",
    "GcsStorageOptions",
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
    azure_options: AzureStorageOptions | None = None,
    gcs_options: GcsStorageOptions | None = None,
) -> CheckpointStorage:
    """Open the checkpoint storage of ``job_id`` at ``location``. Writes nothing.

    Args:
        location: a local path, ``file:///abs/path``, ``s3://bucket[/prefix]``,
            ``abfss://container@account.dfs.core.windows.net[/prefix]``,
            ``wasbs://container@account.blob.core.windows.net[/prefix]`` or ``gs://bucket[/prefix]``.
        job_id: the job's stable id (one safe path segment).
        s3_options: explicit S3 settings; unset fields come from the standard AWS chain.
        s3_client_factory: builds the boto3 client from the resolved options (default:
            :func:`default_s3_client`); tests pass their own.
        env: the environment the endpoint, region and credentials are resolved from (default
            ``os.environ``).
        azure_options: explicit Azure settings; unset credentials come from ``AZURE_STORAGE_*``,
            else ``DefaultAzureCredential``.
        gcs_options: explicit GCS settings; unset ones from Application Default Credentials and
            ``STORAGE_EMULATOR_HOST``.

    Raises:
        ConfigError: bad job id, empty location, unknown scheme, bucket or container missing, bad
            options, or the Azure/GCS extra not installed.
        MissingExtraError: an ``s3://`` location where boto3 (the ``s3`` extra) is not installed.
    """
    validate_job_id(job_id)
    if not location:
        raise ConfigError("checkpoint location is empty")
    scheme = urlparse(location).scheme if "://" in location else ""
    if scheme in ("", "file"):
        return LocalCheckpointStorage(local_path(location), job_id)
    if scheme == "s3":
        try:
            from twophase.coordinator.storage.s3 import S3CheckpointStorage
        except ModuleNotFoundError as e:  # boto3 is the s3 extra's, not the core install's
            if not is_boto3_missing(e):
                raise
            raise MissingExtraError("s3", "s3", "boto3", needed_by="S3 checkpoint storage (s3://)") from None

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
    if scheme in ("abfss", "wasbs", "abfs", "wasb"):
        return _open_azure(location, job_id, azure_options, env)
    if scheme == "gs":
        return _open_gcs(location, job_id, gcs_options, env)
    hint = " (use s3://)" if scheme in ("s3a", "s3n") else ""
    raise ConfigError(
        f"unsupported checkpoint location scheme {scheme!r}{hint} in {location!r}: "
        "use a local path, file://, s3://, abfss://, wasbs:// or gs://"
    )


def _open_azure(
    location: str, job_id: str, options: AzureStorageOptions | None, env: Mapping[str, str] | None
) -> CheckpointStorage:
    from twophase.coordinator.storage.azure_blob import azure_options_from_env, open_container, parse_location
    from twophase.coordinator.storage.object_store import ObjectCheckpointStorage

    parsed = parse_location(location)
    store = open_container(parsed, azure_options_from_env(options, env))
    log_event(
        log,
        logging.INFO,
        "opening Azure checkpoint storage",
        job=job_id,
        account=parsed.account,
        container=parsed.container,
        prefix=parsed.path.strip("/"),
    )
    return ObjectCheckpointStorage(store, parsed.path, job_id)


def _open_gcs(
    location: str, job_id: str, options: GcsStorageOptions | None, env: Mapping[str, str] | None
) -> CheckpointStorage:
    from twophase.coordinator.storage.gcs import gcs_options_from_env, open_bucket, parse_location
    from twophase.coordinator.storage.object_store import ObjectCheckpointStorage

    bucket, path = parse_location(location)
    resolved = gcs_options_from_env(options, env)
    store = open_bucket(bucket, resolved)
    log_event(
        log,
        logging.INFO,
        "opening GCS checkpoint storage",
        job=job_id,
        bucket=bucket,
        prefix=path.strip("/"),
        emulator=resolved.emulator_host or "",
    )
    return ObjectCheckpointStorage(store, path, job_id)
