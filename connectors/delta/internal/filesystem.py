"""The pyarrow file system of a Delta table root: local, S3 built from the sink's S3Options, or Azure
Blob Storage / ADLS Gen2 built from its AzureStorageOptions (issue #46)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
from botocore.exceptions import ClientError

from twophase.connectors.delta.config import DeltaSinkConfig
from twophase.connectors.delta.internal.tls import aws_ca_bundle
from twophase.coordinator.storage.azure_blob import (
    AzureLocation,
    AzureStorageOptions,
    open_container,
    parse_location,
)
from twophase.coordinator.storage.object_store import StoreError
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.s3_access import access_denied, denied_delete
from twophase.sinks.s3_options import S3Options


@dataclass(frozen=True)
class TableLocation:
    """A table root as pyarrow sees it.

    Attributes:
        fs: the file system (``LocalFileSystem``, ``S3FileSystem`` or ``AzureFileSystem``).
        root: the root inside ``fs``: an absolute local path, ``bucket/prefix`` on S3 or
            ``container/prefix`` on Azure.
        is_local: local file systems need parent directories created; S3 does not (and must not
            get directory marker objects).
        azure: for an Azure table, its location and options: deletes go through the Blob SDK
            (pyarrow's ``delete_file`` leaves a directory marker blob behind, as on S3).
        s3: how to reach S3 (resolved), for deletes on S3 through boto3 (pyarrow's
            ``delete_file`` leaves a directory marker object behind). Masks its secrets.
    """

    fs: pafs.FileSystem
    root: str
    is_local: bool
    s3: S3Options = field(default_factory=S3Options)
    azure: tuple[AzureLocation, AzureStorageOptions] | None = None

    def path(self, relative: str) -> str:
        """The ``fs`` path of a file given relative to the table root (``/``-separated, not URI-encoded)."""
        return f"{self.root}/{relative}" if self.root != "/" else f"/{relative}"

    def relative(self, path: str) -> str:
        """Inverse of :meth:`path`."""
        prefix = self.root.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise ValueError(f"{path!r} is not under the table root")
        return path[len(prefix) :]

    def delete(self, relatives: Sequence[str]) -> None:
        """Delete files given relative to the root; missing files are not an error.

        Raises:
            OSError: the local file system refused (permissions).
            S3AccessDeniedError: S3 refused a delete for lack of ``s3:DeleteObject``.
            botocore.exceptions.BotoCoreError, ClientError: S3 refused or is unreachable.
        """
        if self.azure is not None:
            _, _, prefix = self.root.partition("/")
            container = open_container(*self.azure)
            keys = [f"{prefix}/{rel}" if prefix else rel for rel in relatives]
            try:
                container.delete_keys(keys)
            except StoreError as e:
                raise OSError(f"Azure refused to delete under {container.uri(prefix)}: {e}") from e
            return
        if self.is_local:
            for rel in relatives:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(self.path(rel))
            return
        bucket, _, prefix = self.root.partition("/")
        client = self.s3.boto3_client(max_attempts=5)  # botocore's standard retries
        for start in range(0, len(relatives), 1000):  # DeleteObjects takes at most 1000 keys
            keys = [f"{prefix}/{rel}" if prefix else rel for rel in relatives[start : start + 1000]]
            try:
                response = client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
                )
            except ClientError as e:
                denied = access_denied(e, bucket, keys[0])
                if denied is not None:
                    raise denied from e
                raise
            errors = response.get("Errors", [])
            denied = denied_delete(bucket, list(errors))
            if denied is not None:
                raise denied
            if errors:
                raise OSError(f"S3 refused to delete {len(errors)} objects, e.g. {errors[0]}")


def open_location(config: DeltaSinkConfig) -> TableLocation:
    """Build the pyarrow file system for ``config.table_uri``.

    For S3: ``config.storage_options`` over this process's standard AWS chain (endpoint, region,
    credentials; a profile is resolved through boto3, as pyarrow cannot take one), trusting the
    CAs of ``AWS_CA_BUNDLE`` when it is set (HTTPS endpoints).

    Raises:
        pyarrow.ArrowInvalid: malformed options (the sink turns it into a ``ConfigError``).
        ConfigError: a profile without credentials; ``AWS_CA_BUNDLE`` names no file, or this
            pyarrow cannot take a CA bundle or, with an endpoint, virtual-hosted addressing.
    """
    if config.is_azure:
        return _azure_location(config)
    if not config.is_s3 or not isinstance(config.storage_options, S3Options):
        return TableLocation(pafs.LocalFileSystem(), config.table_uri, is_local=True)
    parts = urlsplit(config.table_uri)
    root = parts.netloc + parts.path.rstrip("/")
    options = config.storage_options.resolved(os.environ)
    scheme, endpoint = "https", None
    if options.endpoint_url is not None:
        ep = urlsplit(options.endpoint_url)
        scheme, endpoint = ep.scheme, ep.netloc + ep.path.rstrip("/")
    keys = options.frozen_credentials()
    access_key, secret_key, session_token = keys if keys is not None else (None, None, None)
    # keywords pyarrow 14.0.1 lacks are passed only when a setting needs them
    newer: dict[str, str | bool] = {}
    ca_bundle = aws_ca_bundle() if scheme == "https" else None
    if ca_bundle is not None:  # pyarrow's S3 client does not read AWS_CA_BUNDLE itself
        newer["tls_ca_file_path"] = ca_bundle
    if not options.use_path_style and endpoint is not None:  # else pyarrow's default addressing
        newer["force_virtual_addressing"] = True
    try:
        fs = pafs.S3FileSystem(
            access_key=access_key,
            secret_key=secret_key,
            session_token=session_token,
            region=options.region or "us-east-1",
            endpoint_override=endpoint,
            scheme=scheme,
            **newer,
        )
    except TypeError as e:
        if not newer:
            raise
        why = {
            "tls_ca_file_path": "AWS_CA_BUNDLE is set",
            "force_virtual_addressing": "the endpoint is addressed virtual-hosted (use_path_style=False)",
        }
        needed = next((k for k in newer if k in str(e)), next(iter(newer)))
        raise ConfigError(
            f"{why[needed]} but pyarrow {pa.__version__} has no S3FileSystem({needed}=...): upgrade pyarrow"
        ) from e
    return TableLocation(fs, root, is_local=False, s3=options)


def _azure_location(config: DeltaSinkConfig) -> TableLocation:
    """pyarrow's ``AzureFileSystem`` on the table's account: the same key, SAS token or Blob
    endpoint delta-rs gets (:meth:`DeltaSinkConfig.delta_storage_options`); with neither key nor
    SAS token, pyarrow's own ``DefaultAzureCredential``."""
    options = config.delta_storage_options() or {}
    location = parse_location(config.table_uri)
    kwargs: dict[str, str] = {}
    if "account_key" in options:
        kwargs["account_key"] = options["account_key"]
    elif "sas_token" in options:
        kwargs["sas_token"] = options["sas_token"]
    endpoint = options.get("azure_storage_endpoint")
    if endpoint:  # an emulator or a custom domain: its authority, for blob and dfs alike
        parts = urlsplit(endpoint)
        kwargs |= {
            "blob_storage_authority": parts.netloc,
            "blob_storage_scheme": parts.scheme,
            "dfs_storage_authority": parts.netloc,
            "dfs_storage_scheme": parts.scheme,
        }
    fs = pafs.AzureFileSystem(account_name=location.account, **kwargs)
    root = f"{location.container}/{location.path.strip('/')}"
    return TableLocation(fs, root, is_local=False, azure=(location, config.azure_options()))
