"""Finding and deleting the Iceberg sink's data files that no snapshot references.

A file is *lingering* when all of these hold:

- it lies under this job's and sink's data prefix (``naming.job_data_prefix``) and carries our
  name pattern, for a checkpoint ``<= LingeringScope.up_to_checkpoint``;
- no committable of a retained checkpoint holds it (``LingeringScope.held``);
- no snapshot the table still holds references it (every snapshot of every branch and tag, live
  or deleted manifest entries alike: a time-travel read may need it);
- it is older than ``lingering_grace_ms`` (a younger one may belong to an attempt still writing).

Such files come from failed, speculative or zombie task attempts and from crashes before a
checkpoint's commit. Files a snapshot references are never deleted here: removing data from the
table is Iceberg's own expiry and orphan-file business.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from twophase.connectors.iceberg.config import StoreOptions
from twophase.connectors.iceberg.internal import naming
from twophase.sinks.internal.s3_access import denied_delete
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.s3_options import S3Options

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OwnFile:
    """One of our data files found on storage.

    Attributes:
        path: its full location (as written into manifests).
        name: its parsed name.
        modified_ms: its modification time (ms since the epoch), or ``None`` if unknown.
    """

    path: str
    name: naming.DataFileName
    modified_ms: int | None


def own_files(io: FileIO, prefix: str) -> list[OwnFile]:
    """Our data files under ``prefix`` (a full location: ``s3://bucket/…`` or ``file:///…``)."""
    if not isinstance(io, PyArrowFileIO):
        raise TypeError(f"listing needs pyiceberg's PyArrowFileIO, got {type(io).__name__}")
    scheme, netloc, path = io.parse_location(prefix, io.properties)
    fs = io.fs_by_scheme(scheme, netloc)
    found = []
    for info in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        parsed = naming.parse_data_file_path(info.path)
        if parsed is None:
            continue
        mtime = None if info.mtime_ns is None else info.mtime_ns // 1_000_000
        # the location is the prefix's plus the file's path below it: an Azure location's host
        # is not in the file system's path (CloudFileIO)
        found.append(OwnFile(prefix + info.path[len(path) :], parsed, mtime))
    return found


def delete_files(io: FileIO, storage: StoreOptions, paths: Sequence[str]) -> int:
    """Delete data files; missing ones are not an error. Return how many were asked for.

    ``s3://`` files go through boto3's ``DeleteObjects`` (``storage`` resolved against the
    environment): pyarrow's ``delete_file``, which pyiceberg's FileIO uses, leaves an empty
    folder marker object behind when it deletes a folder's last file. Other files go through
    the table's FileIO.

    Raises:
        S3AccessDeniedError: S3 refused for lack of ``s3:DeleteObject`` (names the key).
        OSError: another per-key error, or the local file system refused.
    """
    by_bucket: dict[str, list[str]] = {}
    for path in paths:
        parts = urlsplit(path)
        if parts.scheme in ("s3", "s3a"):
            by_bucket.setdefault(parts.netloc, []).append(parts.path.lstrip("/"))
        else:
            with contextlib.suppress(FileNotFoundError):
                io.delete(path)
    if by_bucket:
        s3 = storage if isinstance(storage, S3Options) else S3Options()
        client = s3.resolved(os.environ).boto3_client(max_attempts=3)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), 1000):
                chunk = keys[start : start + 1000]
                answer = client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
                )
                errors = list(answer.get("Errors", []))
                denied = denied_delete(bucket, errors)
                if denied is not None:
                    raise denied
                if errors:
                    first = errors[0]
                    raise OSError(f"cannot delete s3://{bucket}/{first.get('Key')}: {first.get('Code')}")
    return len(paths)


def delete_lingering(
    io: FileIO,
    storage: StoreOptions,
    candidates: Collection[OwnFile],
    referenced: Collection[str],
    held: Collection[str],
    up_to_checkpoint: int,
    grace_ms: int,
    log_fields: dict[str, Any],
    now_ms: int | None = None,
) -> int:
    """Delete every candidate that is lingering (module docstring); return how many were deleted.

    Raises:
        OSError: the storage refused a delete (files deleted before it stay deleted).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    doomed = []
    for f in candidates:
        if f.name.checkpoint_id > up_to_checkpoint or f.path in referenced or f.path in held:
            continue
        if f.modified_ms is None or now - f.modified_ms < grace_ms:
            log_event(log, logging.INFO, "kept young unreferenced file", file=f.path, **log_fields)
            continue
        doomed.append(f)
    deleted = delete_files(io, storage, [f.path for f in doomed])
    for f in doomed:
        log_event(
            log,
            logging.INFO,
            "deleted lingering file",
            file=f.path,
            checkpoint=f.name.checkpoint_id,
            **log_fields,
        )
    return deleted
