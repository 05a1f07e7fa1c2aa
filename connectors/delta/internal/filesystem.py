"""The pyarrow file system of a Delta table root: local, or S3 built from the sink's S3Options."""

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
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.s3_access import access_denied, denied_delete
from twophase.sinks.s3_options import S3Options


@dataclass(frozen=True)
class TableLocation:
    """A table root as pyarrow sees it.

    Attributes:
        fs: the file system (``LocalFileSystem`` or ``S3FileSystem``).
        root: the root inside ``fs``: an absolute local path, or ``bucket/prefix`` on S3.
        is_local: local file systems need parent directories created; S3 does not (and must not
            get directory marker objects).
        s3: how to reach S3 (resolved), for deletes on S3 through boto3 (pyarrow's
            ``delete_file`` leaves a directory marker object behind). Masks its secrets.
    """

    fs: pafs.FileSystem
    root: str
    is_local: bool
    s3: S3Options = field(default_factory=S3Options)

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
            pyarrow cannot take a CA bundle.
    """
    if not config.is_s3:
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
    tls: dict[str, str] = {}
    ca_bundle = aws_ca_bundle() if scheme == "https" else None
    if ca_bundle is not None:  # pyarrow's S3 client does not read AWS_CA_BUNDLE itself
        tls["tls_ca_file_path"] = ca_bundle
    try:
        fs = pafs.S3FileSystem(
            access_key=access_key,
            secret_key=secret_key,
            session_token=session_token,
            region=options.region or "us-east-1",
            endpoint_override=endpoint,
            scheme=scheme,
            force_virtual_addressing=not options.use_path_style and endpoint is not None,
            **tls,
        )
    except TypeError as e:
        if not tls:
            raise
        raise ConfigError(
            f"AWS_CA_BUNDLE is set but pyarrow {pa.__version__} cannot take a CA bundle "
            "(tls_ca_file_path): upgrade pyarrow"
        ) from e
    return TableLocation(fs, root, is_local=False, s3=options)
