"""Executor side of the GCS file sink: one subtask's transaction (open files, their sessions).

The routing of rows to one file per Hive partition path, rolling and the state machine are the
object-store file layer's (:mod:`twophase.connectors.objectstore.internal.writer`). Here, each
file is a resumable upload session, opened at the file's first full chunk (or at the checkpoint),
into which full chunks of ``chunk_size_bytes`` are uploaded as data arrives; nothing is visible
until the driver finalizes the session. At the checkpoint (``pre_commit``) every whole 256 KiB of
what is left is uploaded too, and the rest (under 256 KiB) is the file's tail, carried in the
committable for the finalizing request. GCS's 5 TiB per object rolls a file too.

``abort_open`` cancels the sessions this attempt opened (best effort). A session nobody cancels
cannot be listed (GCS has no listing of resumable uploads): it holds no object, is invisible to
readers, and GCS drops it a week after it was opened.
"""

from __future__ import annotations

import logging
from typing import Any

from twophase.connectors.gcs.config import CHUNK_QUANTUM, MAX_OBJECT_BYTES, GcsFileSinkConfig
from twophase.connectors.gcs.internal.committable import GcsCommittable, PendingUpload
from twophase.connectors.gcs.internal.naming import Digests
from twophase.connectors.gcs.internal.sessions import SessionOps
from twophase.connectors.objectstore.internal.writer import PartFile, PartFileTransaction

log = logging.getLogger(__name__)


class ChunkStream:
    """The readable, seekable stream ``ResumableUpload`` reads chunks from, holding only the bytes
    not yet persisted by GCS: the library seeks back to what the server confirmed, never before it.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._base = 0  # stream offset of _data[0]
        self._position = 0

    def append(self, data: bytes) -> None:
        """Add the next bytes of the file."""
        self._data += data

    def tell(self) -> int:
        """The read position, as a file offset."""
        return self._position

    def seek(self, position: int, whence: int = 0) -> int:
        """Move the read position (absolute, at or after the first byte still held)."""
        if whence != 0 or position < self._base:
            raise ValueError(f"cannot seek to {position} (bytes before {self._base} were persisted)")
        self._position = position
        return position

    def read(self, n: int = -1) -> bytes:
        """Read up to ``n`` bytes from the position."""
        start = self._position - self._base
        end = len(self._data) if n < 0 else start + n
        out = bytes(self._data[start:end])
        self._position += len(out)
        return out

    def unread(self) -> int:
        """Bytes after the read position."""
        return self._base + len(self._data) - self._position

    def forget(self, upto: int) -> None:
        """Drop the bytes before file offset ``upto`` (GCS persisted them)."""
        del self._data[: upto - self._base]
        self._base = upto

    def rest(self) -> bytes:
        """Every byte still held."""
        return bytes(self._data)


class OpenFile(PartFile[PendingUpload]):
    """A file being written into a resumable upload session, opened at its first full chunk
    (arguments: those of :class:`~twophase.connectors.objectstore.internal.writer.PartFile`)."""

    LEFT_BEHIND = "abort_open: could not cancel the session of %s (it expires within 7 days)"
    TRANSACTION = "GcsTransaction"
    ops: SessionOps
    config: GcsFileSinkConfig

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.upload: Any = None
        self.stream = ChunkStream()
        self.digests = Digests()
        self.byte_count = 0
        self.chunks = 0

    @property
    def session_uri(self) -> str | None:
        """The session's URI, once opened."""
        return None if self.upload is None else str(self.upload.resumable_url)

    @property
    def parts_sent(self) -> int:
        """Chunks uploaded so far."""
        return self.chunks

    @property
    def max_parts(self) -> int:
        """Chunks of ``chunk_size_bytes`` in GCS's largest object (5 TiB)."""
        return MAX_OBJECT_BYTES // self.config.chunk_size_bytes

    def send_full_parts(self) -> None:
        """Upload every full chunk of ``chunk_size_bytes``."""
        self._take(self.buffer.drain_all())
        self._upload(self.config.chunk_size_bytes)

    def _take(self, data: bytes) -> None:
        self.digests.update(data)
        self.byte_count += len(data)
        self.stream.append(data)

    def _open(self) -> None:
        if self.upload is None:
            self.upload = self.ops.open_upload(
                self.name, self.content_type, self.config.chunk_size_bytes, self.stream
            )

    def _upload(self, size: int) -> None:
        """Upload chunks of ``size`` bytes while that many are held."""
        if self.stream.unread() < size:
            return
        self._open()
        # the library reads one chunk_size per request and takes a shorter read for the end of the
        # upload, which would finalize it: at the checkpoint the last whole 256 KiB go as one
        # chunk of their own size, never a short read
        self.upload._chunk_size = size
        if self.upload.chunk_size != size:
            raise RuntimeError(
                "google-resumable-media's ResumableUpload no longer takes a chunk size per chunk"
            )
        while self.stream.unread() >= size:
            self.ops.send_chunk(self.upload, self.name)
            self.stream.forget(int(self.upload.bytes_uploaded))
            self.chunks += 1

    def finish(self) -> PendingUpload:
        """Upload every whole 256 KiB, keep the tail; return the file waiting for its commit."""
        self.send_full_parts()
        whole = self.stream.unread() // CHUNK_QUANTUM * CHUNK_QUANTUM
        if whole:
            self._upload(whole)
        self._open()  # a file under 256 KiB is all tail: its session holds nothing yet
        assert self.upload is not None
        persisted = int(self.upload.bytes_uploaded)
        return PendingUpload(
            bucket=self.config.bucket,
            name=self.name,
            session_uri=str(self.upload.resumable_url),
            persisted_bytes=persisted,
            tail=self.stream.rest(),
            byte_count=self.byte_count,
            crc32c=self.digests.crc32c(),
            md5=self.digests.md5(),
            record_count=self.record_count,
            content_type=self.content_type,
        )

    def discard(self) -> None:
        """Cancel the file's session, if one was opened."""
        uri = self.session_uri
        if uri is not None:
            self.ops.cancel(uri)

    def log_rolled(self, pending: PendingUpload) -> None:
        """DEBUG: the object, its masked session, size, tail and records."""
        log.debug(
            "rolled file object=%s session=%s bytes=%d tail=%d records=%d",
            pending.name,
            pending.session,
            pending.byte_count,
            len(pending.tail),
            pending.record_count,
        )


GcsTransaction = PartFileTransaction[OpenFile, PendingUpload, GcsCommittable]
"""One subtask's transaction whose files are resumable upload sessions (:class:`OpenFile`)."""
