"""Object names, session URLs and digests of the GCS file sink, as pure functions (no I/O).

Object names are the shared data file names (:mod:`twophase.connectors.objectstore.internal.naming`)::

    <prefix>/<partition path>/part-<partition>-<checkpoint>-<token>-<uuid>.<ext>

Resumable uploads are initiated at the JSON API's upload endpoint (GCS "Perform resumable
uploads"): ``POST <base>/upload/storage/v1/b/<bucket>/o?uploadType=resumable&ifGenerationMatch=0``;
the precondition is checked when the upload is finalized, so the session can only ever create its
object, never replace one.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import quote, urlsplit

import google_crc32c

PUBLIC_ENDPOINT = "https://storage.googleapis.com"
"""The JSON API's base URL on Google Cloud."""


def initiate_url(base: str, bucket: str) -> str:
    """The URL that initiates a resumable upload into ``bucket``, created only if absent."""
    path = f"/upload/storage/v1/b/{quote(bucket, safe='')}/o"
    return f"{base.rstrip('/')}{path}?uploadType=resumable&ifGenerationMatch=0"


def mask_session(uri: str) -> str:
    """``uri`` with its upload id cut to 6 characters: enough to tell sessions apart in logs, too
    little to use the capability."""
    parts = urlsplit(uri)
    ids = [p.split("=", 1)[1] for p in parts.query.split("&") if p.startswith("upload_id=")]
    short = (ids[0][:6] + "…") if ids else "?"
    return f"{parts.scheme}://{parts.netloc}{parts.path}?upload_id={short}"


class Digests:
    """The CRC32C and MD5 of a file, fed as its bytes are produced, as GCS reports them (base64
    of the big-endian CRC32C, base64 of the MD5)."""

    def __init__(self) -> None:
        # google-crc32c ships no annotations
        self._crc: Any = google_crc32c.Checksum()  # type: ignore[no-untyped-call]
        self._md5 = hashlib.md5(usedforsecurity=False)

    def update(self, data: bytes) -> None:
        """Feed the next bytes of the file."""
        self._crc.update(data)
        self._md5.update(data)

    def crc32c(self) -> str:
        """Base64 of the big-endian CRC32C so far."""
        return base64.b64encode(self._crc.digest()).decode()

    def md5(self) -> str:
        """Base64 of the MD5 so far."""
        return base64.b64encode(self._md5.digest()).decode()
