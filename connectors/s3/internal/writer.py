"""Executor side of the S3 sink: one subtask's transaction (open files, parts, rolling).

A transaction owns the files one subtask writes in one epoch, one per Hive partition path. Each
file is a multipart upload opened (CreateMultipartUpload) at its first row; full parts of
``part_size_bytes`` are uploaded as data arrives.

State machine (every transition checked; illegal ones raise ``IllegalTransitionError``)::

    OPEN ──write──► OPEN
    OPEN ──pre_commit──► PRE_COMMITTED ──snapshot_in_progress──► SNAPSHOTTED
    OPEN ──finish──► FINISHED                       (end of input, FLIP-147)
    any ──abort_open──► ABORTED                     (task failure; idempotent)

Files that span checkpoints (row formats) are resumed from ``WriterContext.restored_state``
lazily: a restored file is only touched (its tail read back) when new rows arrive for its
partition path or when it rolls. Uploads this transaction did not create (resumed ones) are never
aborted here: they belong to a completed checkpoint, and a retry of the epoch resumes them again.
"""

from __future__ import annotations

import enum
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from twophase.connectors.objectstore.internal.formats import (
    CONTENT_TYPES,
    FileEncoder,
    OutputBuffer,
    open_encoder,
)
from twophase.connectors.objectstore.internal.rolling import Clock as Clock
from twophase.connectors.objectstore.internal.rolling import wall_clock_ms as wall_clock_ms
from twophase.connectors.objectstore.internal.routing import FileRouter
from twophase.connectors.s3.config import S3SinkConfig
from twophase.connectors.s3.internal import naming
from twophase.connectors.s3.internal.committable import (
    IN_PROGRESS_CODEC,
    InProgressFile,
    InProgressState,
    PendingFile,
    S3Committable,
)
from twophase.connectors.s3.internal.part_uploads import PartUploads
from twophase.connectors.s3.internal.resume import completed_by_a_later_checkpoint
from twophase.connectors.s3.internal.rolling import (
    FileStats,
    TailAction,
    full_parts,
    should_roll_after_write,
    should_roll_on_checkpoint,
    tail_action,
)
from twophase.connectors.s3.internal.uploads import S3Ops
from twophase.sinks.context import JsonObject, WriterContext
from twophase.sinks.errors import ConfigError, IllegalTransitionError, TransactionLostError

log = logging.getLogger(__name__)


class TxnState(enum.Enum):
    """States of :class:`S3Transaction`."""

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    SNAPSHOTTED = "snapshotted"
    FINISHED = "finished"
    ABORTED = "aborted"


_TRANSITIONS: dict[str, tuple[frozenset[TxnState], TxnState | None]] = {
    "write": (frozenset({TxnState.OPEN}), None),
    "pre_commit": (frozenset({TxnState.OPEN}), TxnState.PRE_COMMITTED),
    "snapshot_in_progress": (frozenset({TxnState.PRE_COMMITTED}), TxnState.SNAPSHOTTED),
    "finish": (frozenset({TxnState.OPEN}), TxnState.FINISHED),
}


class OpenFile:
    """One file being written: its multipart upload, uploaded parts and buffered bytes."""

    def __init__(
        self,
        *,
        ops: S3Ops,
        config: S3SinkConfig,
        partition_path: str,
        key: str,
        token: str,
        file_id: str,
        upload_id: str,
        encoder_schema: pa.Schema,
        opened_at_ms: int,
        restored: InProgressFile | None = None,
        tail: bytes = b"",
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        self.ops = ops
        self.config = config
        self.partition_path = partition_path
        self.key = key
        self.token = token
        self.file_id = file_id
        self.upload_id = upload_id
        self.parts = PartUploads(
            ops, key, upload_id, restored.parts if restored else (), pool, max(1, config.uploads_in_flight)
        )
        self.record_count = restored.record_count if restored else 0
        self.opened_at_ms = restored.opened_at_ms if restored else opened_at_ms
        self.last_write_ms = restored.last_write_ms if restored else opened_at_ms
        self.has_tails = restored.has_tails if restored else False
        uploaded = restored.uploaded_bytes if restored else 0
        self.buffer = OutputBuffer(initial=tail, position=uploaded)
        self.encoder: FileEncoder = open_encoder(
            config, encoder_schema, self.buffer, resumed=restored is not None
        )
        self.tails_written: list[str] = []
        """Tail objects written by this task (deleted by ``abort_open``)."""
        self.resumed = restored is not None

    def stats(self) -> FileStats:
        """The rolling policy's view of this file."""
        return FileStats(
            byte_count=self.buffer.tell(),
            parts_used=self.parts.last_number,
            opened_at_ms=self.opened_at_ms,
            last_write_ms=self.last_write_ms,
        )

    def write(self, batch: pa.RecordBatch, now_ms: int) -> None:
        """Encode ``batch`` and upload every full part."""
        self.encoder.write(batch)
        self.record_count += batch.num_rows
        self.last_write_ms = now_ms
        self._upload_full_parts()

    def _upload_full_parts(self) -> None:
        for _ in range(full_parts(len(self.buffer), self.config.part_size_bytes)):
            self._upload(self.buffer.drain(self.config.part_size_bytes))

    def _upload(self, data: bytes) -> None:
        self.parts.add(data)

    def close(self) -> PendingFile:
        """End the file (Parquet footer), upload the last part; return it pending completion."""
        self.encoder.close()
        self._upload_full_parts()
        rest = self.buffer.drain_all()
        if rest or not self.parts.last_number:
            self._upload(rest)
        parts = self.parts.wait()
        return PendingFile(
            bucket=self.config.bucket,
            key=self.key,
            upload_id=self.upload_id,
            parts=parts,
            byte_count=self.parts.byte_count,
            record_count=self.record_count,
            tail_prefix=naming.tail_prefix(self.config.prefix, self.token, self.file_id)
            if self.has_tails
            else None,
            resumed=self.resumed,
        )

    def snapshot(self, checkpoint_id: int, attempt: int) -> InProgressFile:
        """Keep the file open across the checkpoint: upload or park the buffered rest; return its state."""
        rest = self.buffer.drain_all()
        tail_key: str | None = None
        action = tail_action(len(rest))
        if action is TailAction.UPLOAD_PART:
            self._upload(rest)
        elif action is TailAction.TAIL_OBJECT:
            tail_key = naming.tail_key(
                self.config.prefix,
                self.token,
                self.file_id,
                checkpoint_id,
                attempt,
                uuid.uuid4().hex[:8],
            )
            self.ops.put_object(tail_key, rest)
            self.tails_written.append(tail_key)
            self.has_tails = True
        parts = self.parts.wait()
        return InProgressFile(
            partition_path=self.partition_path,
            bucket=self.config.bucket,
            key=self.key,
            file_id=self.file_id,
            upload_id=self.upload_id,
            parts=parts,
            uploaded_bytes=self.parts.byte_count,
            tail_key=tail_key,
            tail_size=len(rest) if tail_key else 0,
            record_count=self.record_count,
            opened_at_ms=self.opened_at_ms,
            last_write_ms=self.last_write_ms,
            has_tails=self.has_tails,
            resumed=self.resumed,
        )


def _restored_stats(f: InProgressFile) -> FileStats:
    return FileStats(
        byte_count=f.byte_count,
        parts_used=f.parts[-1].number if f.parts else 0,
        opened_at_ms=f.opened_at_ms,
        last_write_ms=f.last_write_ms,
    )


class S3Transaction(FileRouter[OpenFile]):
    """One subtask's open transaction (never serialized; lives in the Spark task).

    Args:
        ctx: the subtask's writer context (its ``restored_state`` is decoded here).
        config: the sink configuration.
        ops: S3 operations with retries.
        clock: wall clock in ms.

    Raises:
        CommittableDecodeError: ``ctx.restored_state`` is not an S3 in-progress state.
        ConfigError: the restored state belongs to another bucket, prefix, job or sink.
    """

    config: S3SinkConfig

    def __init__(
        self, ctx: WriterContext, config: S3SinkConfig, ops: S3Ops, clock: Clock = wall_clock_ms
    ) -> None:
        self.ctx = ctx
        self.config = config
        self.ops = ops
        self.clock = clock
        self.token = naming.job_token(ctx.job_id, ctx.sink_name)
        self.state = TxnState.OPEN
        self.files: dict[str, OpenFile] = {}
        self.rolled: list[PendingFile] = []
        self.restored: dict[str, InProgressFile] = {}
        self.tails_written: list[str] = []
        self.created: dict[str, str] = {}
        """Upload id → key of every upload this transaction created (``abort_open`` aborts them)."""
        self.file_schema: pa.Schema | None = None
        self.records = 0
        self._upload_pool: ThreadPoolExecutor | None = None
        if ctx.restored_state is not None:
            if not config.file_format.spans_checkpoints:
                raise ConfigError(
                    f"sink {ctx.sink_name!r} writes {config.file_format.value}, which cannot resume the "
                    "in-progress files of the restored checkpoint (was the format changed?)"
                )
            for f in IN_PROGRESS_CODEC.from_json(ctx.restored_state).files:
                self._check_restored(f)
                self.restored[f.partition_path] = f

    def _check_restored(self, f: InProgressFile) -> None:
        parsed = naming.parse_data_key(self.config.prefix, f.key)
        ext = "." + self.config.file_format.extension
        if (
            f.bucket != self.config.bucket
            or parsed is None
            or parsed.token != self.token
            or not f.key.endswith(ext)
        ):
            raise ConfigError(
                f"restored in-progress file s3://{f.bucket}/{f.key} does not belong to sink "
                f"{self.ctx.sink_name!r} of job {self.ctx.job_id!r} (bucket, prefix, format or job changed?)"
            )

    def _transition(self, name: str) -> None:
        allowed, target = _TRANSITIONS[name]
        if self.state not in allowed:
            raise IllegalTransitionError("S3Transaction", self.state.name, name)
        if target is not None:
            self.state = target

    def _pool(self) -> ThreadPoolExecutor | None:
        """The subtask's part-upload threads (created at the first file), or None: synchronous."""
        if self.config.uploads_in_flight == 0:
            return None
        if self._upload_pool is None:
            self._upload_pool = ThreadPoolExecutor(
                self.config.uploads_in_flight, thread_name_prefix=f"s3-parts-{self.ctx.partition}"
            )
        return self._upload_pool

    def _release_pool(self) -> None:
        # every file's uploads were waited for (or settled) before this
        pool, self._upload_pool = self._upload_pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _log(self, msg: str, **fields: object) -> None:
        if log.isEnabledFor(logging.DEBUG):
            kv = " ".join(f"{k}={v}" for k, v in {**self.ctx.log_fields(), **fields}.items())
            log.debug("%s %s", msg, kv)

    # --- writing -------------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        """Write one batch: project it to ``config.columns``, split it by partition path, append to
        each path's file, roll on limits.

        Raises:
            SchemaError: the batch lacks a column of the projection or does not fit the configuration.
        """
        self._transition("write")
        self.route(batch)

    def after_write(self, path: str, f: OpenFile, rows: pa.RecordBatch, now: int) -> None:
        """Count the rows; roll ``f`` on size, age or S3's 10,000 parts."""
        self.records += rows.num_rows
        if should_roll_after_write(f.stats(), self.config.rolling, now):
            self._roll(path)

    def open_path(self, path: str, now: int) -> OpenFile:
        """The restored file of ``path`` resumed, unless a later checkpoint completed it; else a
        new multipart upload."""
        restored = self.restored.pop(path, None)
        f = self._resume(restored, now) if restored is not None else None
        return f if f is not None else self._open(path, now)

    def _open(self, path: str, now: int) -> OpenFile:
        assert self.file_schema is not None
        file_id = uuid.uuid4().hex
        fmt = self.config.file_format
        key = naming.data_key(
            self.config.prefix,
            path,
            self.ctx.partition,
            self.ctx.checkpoint_id,
            self.token,
            file_id,
            fmt.extension,
        )
        upload_id = self.ops.create_upload(key, CONTENT_TYPES[fmt])
        self.created[upload_id] = key
        self._log("opened file", key=key)
        return OpenFile(
            ops=self.ops,
            config=self.config,
            partition_path=path,
            key=key,
            token=self.token,
            file_id=file_id,
            upload_id=upload_id,
            encoder_schema=self.file_schema,
            opened_at_ms=now,
            pool=self._pool(),
        )

    def _resume(self, restored: InProgressFile, now: int) -> OpenFile | None:
        """Resume a restored file, or ``None`` if a later checkpoint completed it (see
        :func:`~twophase.connectors.s3.internal.resume.completed_by_a_later_checkpoint`).

        Raises:
            TransactionLostError: the file can neither be resumed nor was completed (named).
        """
        tail = b""
        if restored.tail_key is None:
            if completed_by_a_later_checkpoint(self.ops, restored, self.ctx):
                return None
        else:
            try:
                tail = self.ops.get_object(restored.tail_key, restored.tail_size)
            except TransactionLostError as e:
                if completed_by_a_later_checkpoint(self.ops, restored, self.ctx):
                    return None
                raise TransactionLostError(
                    f"S3 sink {self.ctx.sink_name!r}: the in-progress file s3://{restored.bucket}/"
                    f"{restored.key} of the restored checkpoint ({restored.record_count} records) cannot "
                    f"be resumed and was never completed: {e}"
                ) from e
        schema = self.file_schema if self.file_schema is not None else pa.schema([])
        self._log("resumed file", key=restored.key, parts=len(restored.parts), tail=restored.tail_size)
        return OpenFile(
            ops=self.ops,
            config=self.config,
            partition_path=restored.partition_path,
            key=restored.key,
            token=self.token,
            file_id=restored.file_id,
            upload_id=restored.upload_id,
            encoder_schema=schema,
            opened_at_ms=now,
            restored=restored,
            tail=tail,
            pool=self._pool(),
        )

    def _roll(self, path: str) -> None:
        pending = self.files.pop(path).close()
        self.rolled.append(pending)
        self._log("rolled file", key=pending.key, bytes=pending.byte_count, records=pending.record_count)

    def _roll_restored(self, path: str) -> None:
        f = self._resume(self.restored.pop(path), self.clock())
        if f is not None:
            self.files[path] = f
            self._roll(path)

    # --- checkpoint / end of input ----------------------------------------------------------------

    def _committable(self) -> S3Committable | None:
        return S3Committable(files=tuple(self.rolled)) if self.rolled else None

    def pre_commit(self) -> S3Committable | None:
        """Roll what the policy says must roll at a checkpoint; return every rolled file (or None)."""
        self._transition("pre_commit")
        now = self.clock()
        fmt, policy = self.config.file_format, self.config.rolling
        for path in list(self.files):
            if should_roll_on_checkpoint(self.files[path].stats(), policy, fmt, now):
                self._roll(path)
        for path in list(self.restored):
            if should_roll_on_checkpoint(_restored_stats(self.restored[path]), policy, fmt, now):
                self._roll_restored(path)
        if not self.files:
            self._release_pool()
        return self._committable()

    def snapshot_in_progress(self) -> JsonObject | None:
        """The state of every file still open (written this epoch or restored untouched), or None."""
        self._transition("snapshot_in_progress")
        entries = [f.snapshot(self.ctx.checkpoint_id, self.ctx.attempt) for f in self.files.values()]
        self.tails_written.extend(t for f in self.files.values() for t in f.tails_written)
        entries.extend(self.restored.values())
        self.files.clear()
        self._release_pool()
        if not entries:
            return None
        return IN_PROGRESS_CODEC.to_json(InProgressState(files=tuple(entries)))

    def finish(self) -> S3Committable | None:
        """End of input (FLIP-147): roll every file, in progress or restored; return them (or None)."""
        self._transition("finish")
        for path in list(self.files):
            self._roll(path)
        for path in list(self.restored):
            self._roll_restored(path)
        self._release_pool()
        return self._committable()

    def abort_open(self) -> None:
        """Best effort: abort uploads this transaction created, delete tails it wrote. Idempotent.

        Resumed uploads are left alone: a completed checkpoint holds them, and a retry of the
        epoch resumes them again.
        """
        if self.state is TxnState.ABORTED:
            return
        self.state = TxnState.ABORTED
        tails = self.tails_written + [t for f in self.files.values() for t in f.tails_written]
        for f in self.files.values():
            f.parts.settle()  # a part still uploading could outlive the abort
        self._release_pool()
        self.files.clear()
        self.rolled.clear()
        for upload_id, key in self.created.items():
            try:
                self.ops.abort_upload(key, upload_id)
            except Exception:  # leftovers are lingering; abort_lingering removes them later
                log.warning("abort_open: could not abort %s (left for abort_lingering)", key, exc_info=True)
        if tails:
            try:
                self.ops.delete_keys(tails)
            except Exception:
                log.warning("abort_open: could not delete %d tails (left for abort_lingering)", len(tails))
