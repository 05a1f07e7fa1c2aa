"""The pyarrow file system of a Delta table root: local, or S3 built from delta-rs storage options."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import boto3
import pyarrow.fs as pafs
from botocore.config import Config

from twophase.connectors.delta.config import DeltaSinkConfig

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class TableLocation:
    """A table root as pyarrow sees it.

    Attributes:
        fs: the file system (``LocalFileSystem`` or ``S3FileSystem``).
        root: the root inside ``fs``: an absolute local path, or ``bucket/prefix`` on S3.
        is_local: local file systems need parent directories created; S3 does not (and must not
            get directory marker objects).
        s3_client_args: keyword arguments of ``boto3.client("s3", ...)`` for deletes on S3
            (pyarrow's ``delete_file`` leaves a directory marker object behind). Holds secrets.
    """

    fs: pafs.FileSystem
    root: str
    is_local: bool
    s3_client_args: Mapping[str, Any] = field(default_factory=dict, repr=False)

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
            botocore.exceptions.BotoCoreError, ClientError: S3 refused or is unreachable.
        """
        if self.is_local:
            for rel in relatives:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(self.path(rel))
            return
        bucket, _, prefix = self.root.partition("/")
        client = boto3.client("s3", **self.s3_client_args)
        for start in range(0, len(relatives), 1000):  # DeleteObjects takes at most 1000 keys
            keys = [f"{prefix}/{rel}" if prefix else rel for rel in relatives[start : start + 1000]]
            response = client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
            errors = response.get("Errors", [])
            if errors:
                raise OSError(f"S3 refused to delete {len(errors)} objects, e.g. {errors[0]}")


def open_location(config: DeltaSinkConfig) -> TableLocation:
    """Build the pyarrow file system for ``config.table_uri``.

    For S3 the endpoint, credentials, region and ``AWS_ALLOW_HTTP`` come from
    ``config.storage_options`` (delta-rs keys); without them pyarrow's default credential chain applies.

    Raises:
        pyarrow.ArrowInvalid: malformed options (the sink turns it into a ``ConfigError``).
    """
    if not config.is_s3:
        return TableLocation(pafs.LocalFileSystem(), config.table_uri, is_local=True)
    parts = urlsplit(config.table_uri)
    root = parts.netloc + parts.path.rstrip("/")
    endpoint = config.option("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
    allow_http = (config.option("aws_allow_http", "allow_http") or "").lower() in _TRUE
    scheme = "https"
    if endpoint is not None:
        ep = urlsplit(endpoint)
        if ep.scheme:
            scheme = ep.scheme
            endpoint = ep.netloc + ep.path.rstrip("/")
    if scheme == "http" and not allow_http:
        # delta-rs refuses plain http without AWS_ALLOW_HTTP; behave the same so both sides agree.
        raise ValueError("an http:// S3 endpoint needs storage option AWS_ALLOW_HTTP=true")
    access_key = config.option("aws_access_key_id", "access_key_id")
    secret_key = config.option("aws_secret_access_key", "secret_access_key")
    session_token = config.option("aws_session_token", "session_token")
    region = config.option("aws_region", "region") or "us-east-1"
    fs = pafs.S3FileSystem(
        access_key=access_key,
        secret_key=secret_key,
        session_token=session_token,
        region=region,
        endpoint_override=endpoint,
        scheme=scheme,
    )
    client_args: dict[str, Any] = {
        "aws_access_key_id": access_key,
        "aws_secret_access_key": secret_key,
        "aws_session_token": session_token,
        "region_name": region,
        "endpoint_url": f"{scheme}://{endpoint}" if endpoint is not None else None,
        "config": Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 5}),
    }
    return TableLocation(fs, root, is_local=False, s3_client_args=client_args)
