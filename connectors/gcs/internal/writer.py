"""Executor side of the GCS file sink: one subtask's transaction (open files, their sessions).

A transaction owns the files one subtask writes in one epoch, one per Hive partition path. Each
file is a resumable upload session, opened at the file's first full chunk (or at the checkpoint),
into which full chunks of ``chunk_size_bytes`` are uploaded as data arrives; nothing is visible
until the driver finalizes the session. At the checkpoint (``pre_commit``) every whole 256 KiB of
what is left is uploaded too, and the rest (under 256 KiB) is the file's tail, carried in the
committable for the finalizing request. A file rolls on size or age within the epoch, on
``max_open_files``, and always at the checkpoint: files never span checkpoints.

State machine (every transition checked; illegal ones raise ``IllegalTransitionError``)::

    OPEN ──write──► OPEN ──pre_commit──► PRE_COMMITTED
    any ──abort_open──► ABORTED          (task failure; idempotent)

``abort_open`` cancels the sessions this attempt opened (best effort). A session nobody cancels
cannot be listed (GCS has no listing of resumable uploads): it holds no object, is invisible to
readers, and GCS drops it a week after it was opened.
"""

from __future__ import annotations

import enum
import logging
import uuid
from typing import Any

import pyarrow as pa

from twophase.connectors.gcs.config import CHUNK_QUANTUM, MAX_OBJECT_BYTES, GcsFileSinkConfig
from twophase.connectors.gcs.internal.committable import GcsCommittable, PendingUpload
from twophase.connectors.gcs.internal.naming import Digests
from twophase.connectors.gcs.internal.sessions import SessionOps
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import IllegalTransitionError
from twophase.sinks.internal.files import naming as files_naming
from twophase.sinks.internal.files.formats import CONTENT_TYPES, FileEncoder, OutputBuffer, open_encoder
from twophase.sinks.internal.files.partitioning import file_batches
from twophase.sinks.internal.files.rolling import Clock, FileStats, roll_after_write, wall_clock_ms

log = logging.getLogger(__name__)


class TxnState(enum.Enum):
    """States of :class:`GcsTransaction`."""

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    ABORTED = "aborted"


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


class OpenFile:
    """One file being written: its object name, session and buffered bytes."""

    def __init__(
        self,
        ops: SessionOps,
        config: GcsFileSinkConfig,
        partition_path: str,
        name: str,
        schema: pa.Schema,
        now: int,
    ) -> None:
        self.ops = ops
        self.config = config
        self.partition_path = partition_path
        self.name = name
        self.content_type = CONTENT_TYPES[config.file_format]
        self.upload: Any = None
        self.stream = ChunkStream()
        self.digests = Digests()
        self.byte_count = 0
        self.record_count = 0
        self.chunks = 0
        self.opened_at_ms = now
        self.last_write_ms = now
        self.buffer = OutputBuffer()
        self.encoder: FileEncoder = open_encoder(config, schema, self.buffer, resumed=False)

    @property
    def session_uri(self) -> str | None:
        """The session's URI, once opened."""
        return None if self.upload is None else str(self.upload.resumable_url)

    def stats(self) -> FileStats:
        """The rolling policy's view of this file."""
        return FileStats(self.buffer.tell(), self.chunks, self.opened_at_ms, self.last_write_ms)

    def write(self, batch: pa.RecordBatch, now_ms: int) -> None:
        """Encode ``batch`` and upload every full chunk."""
        self.encoder.write(batch)
        self.record_count += batch.num_rows
        self.last_write_ms = now_ms
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

    def close(self) -> PendingUpload:
        """End the file (Parquet footer), upload every whole 256 KiB, keep the tail; return the
        file waiting for its commit."""
        self.encoder.close()
        self._take(self.buffer.drain_all())
        self._upload(self.config.chunk_size_bytes)
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


class GcsTransaction:
    """One subtask's open transaction (never serialized; lives in the Spark task).

    Args:
        ctx: the subtask's writer context.
        config: the sink configuration.
        ops: the bucket's requests.
        clock: wall clock in ms.
    """

    def __init__(
        self, ctx: WriterContext, config: GcsFileSinkConfig, ops: SessionOps, clock: Clock = wall_clock_ms
    ) -> None:
        self.ctx = ctx
        self.config = config
        self.ops = ops
        self.clock = clock
        self.token = files_naming.job_token(ctx.job_id, ctx.sink_name)
        self.prefix = config.prefix
        self.state = TxnState.OPEN
        self.files: dict[str, OpenFile] = {}
        self.rolled: list[PendingUpload] = []
        self.opened: list[OpenFile] = []
        """Every file this transaction opened (``abort_open`` cancels their sessions)."""
        self.file_schema: pa.Schema | None = None

    def _expect(self, name: str) -> None:
        if self.state is not TxnState.OPEN:
            raise IllegalTransitionError("GcsTransaction", self.state.name, name)

    def write(self, batch: pa.RecordBatch) -> None:
        """Write one batch: project it to ``config.columns``, split it by partition path, append to
        each path's file, roll on limits.

        Raises:
            SchemaError: the batch lacks a column of the projection or does not fit the configuration.
            ServiceUnavailableError / ConfigError: a session could not be opened or a chunk uploaded.
        """
        self._expect("write")
        if batch.num_rows == 0:
            return
        self.file_schema, by_file = file_batches(self.config, batch, self.file_schema)
        now = self.clock()
        for path, rows in by_file:
            f = self._file_for(path, now)
            f.write(rows, now)
            max_chunks = MAX_OBJECT_BYTES // self.config.chunk_size_bytes
            if roll_after_write(f.stats(), self.config.rolling, now, max_chunks):
                self._roll(path)

    def _file_for(self, path: str, now: int) -> OpenFile:
        f = self.files.get(path)
        if f is not None:
            return f
        if len(self.files) >= self.config.max_open_files:
            lru = min(self.files.values(), key=lambda o: o.last_write_ms)
            self._roll(lru.partition_path)
        assert self.file_schema is not None
        name = files_naming.data_key(
            self.prefix,
            path,
            self.ctx.partition,
            self.ctx.checkpoint_id,
            self.token,
            uuid.uuid4().hex,
            self.config.file_format.extension,
        )
        f = OpenFile(self.ops, self.config, path, name, self.file_schema, now)
        self.files[path] = f
        self.opened.append(f)
        return f

    def _roll(self, path: str) -> None:
        pending = self.files.pop(path).close()
        self.rolled.append(pending)
        log.debug(
            "rolled file object=%s session=%s bytes=%d tail=%d records=%d",
            pending.name,
            pending.session,
            pending.byte_count,
            len(pending.tail),
            pending.record_count,
        )

    def pre_commit(self) -> GcsCommittable | None:
        """Roll every open file (the checkpoint); return every file rolled in the epoch, or None."""
        self._expect("pre_commit")
        for path in list(self.files):
            self._roll(path)
        self.state = TxnState.PRE_COMMITTED
        return GcsCommittable(files=tuple(self.rolled)) if self.rolled else None

    def abort_open(self) -> None:
        """Best effort: cancel the session of every file this transaction opened. Idempotent."""
        if self.state is TxnState.ABORTED:
            return
        self.state = TxnState.ABORTED
        self.files.clear()
        self.rolled.clear()
        for f in self.opened:
            uri = f.session_uri
            if uri is None:
                continue
            try:
                self.ops.cancel(uri)
            except Exception:  # left to expire: GCS drops a session a week after it was opened
                log.warning(
                    "abort_open: could not cancel the session of %s (it expires within 7 days)",
                    f.name,
                    exc_info=True,
                )
