"""Executor side of the Azure file sink: one subtask's transaction (open files, staged blocks).

A transaction owns the files one subtask writes in one epoch, one per Hive partition path. Each
file is a blob name (the shared data file name, unique per file) under which full blocks of
``block_size_bytes`` are staged with Put Block as data arrives; nothing is visible until the
driver's Put Block List. A file rolls on size, age or Azure's 50,000-block limit within the epoch,
on ``max_open_files``, and always at the checkpoint (``pre_commit``): files never span checkpoints.

State machine (every transition checked; illegal ones raise ``IllegalTransitionError``)::

    OPEN ──write──► OPEN ──pre_commit──► PRE_COMMITTED
    any ──abort_open──► ABORTED          (task failure; idempotent)

``abort_open`` discards the blocks this attempt staged (best effort); whatever it cannot discard
is lingering and ``abort_lingering`` finds it by name.
"""

from __future__ import annotations

import enum
import logging
import uuid

import pyarrow as pa

from twophase.connectors.azure.config import MAX_BLOCKS, AzureBlobSinkConfig
from twophase.connectors.azure.internal import naming
from twophase.connectors.azure.internal.blobs import BlobOps
from twophase.connectors.azure.internal.committable import AzureCommittable, StagedFile
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import IllegalTransitionError
from twophase.sinks.internal.files import naming as files_naming
from twophase.sinks.internal.files.formats import (
    CONTENT_TYPES,
    FileEncoder,
    OutputBuffer,
    open_encoder,
)
from twophase.sinks.internal.files.partitioning import file_batches
from twophase.sinks.internal.files.rolling import Clock, FileStats, roll_after_write, wall_clock_ms

log = logging.getLogger(__name__)


class TxnState(enum.Enum):
    """States of :class:`AzureTransaction`."""

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    ABORTED = "aborted"


class OpenFile:
    """One file being written: its blob name, staged blocks and buffered bytes."""

    def __init__(
        self,
        ops: BlobOps,
        config: AzureBlobSinkConfig,
        partition_path: str,
        blob: str,
        schema: pa.Schema,
        now: int,
    ) -> None:
        self.ops = ops
        self.config = config
        self.partition_path = partition_path
        self.blob = blob
        self.nonce = naming.new_nonce()
        self.block_ids: list[str] = []
        self.staged_bytes = 0
        self.record_count = 0
        self.opened_at_ms = now
        self.last_write_ms = now
        self.buffer = OutputBuffer()
        self.encoder: FileEncoder = open_encoder(config, schema, self.buffer, resumed=False)

    def stats(self) -> FileStats:
        """The rolling policy's view of this file."""
        return FileStats(self.buffer.tell(), len(self.block_ids), self.opened_at_ms, self.last_write_ms)

    def write(self, batch: pa.RecordBatch, now_ms: int) -> None:
        """Encode ``batch`` and stage every full block."""
        self.encoder.write(batch)
        self.record_count += batch.num_rows
        self.last_write_ms = now_ms
        self._stage_full_blocks()

    def _stage_full_blocks(self) -> None:
        size = self.config.block_size_bytes
        while len(self.buffer) >= size:
            self._stage(self.buffer.drain(size))

    def _stage(self, data: bytes) -> None:
        block = naming.block_id(self.nonce, len(self.block_ids) + 1)
        self.ops.stage_block(self.blob, block, data)
        self.block_ids.append(block)
        self.staged_bytes += len(data)

    def close(self) -> StagedFile:
        """End the file (Parquet footer), stage the last block; return it waiting for its commit."""
        self.encoder.close()
        self._stage_full_blocks()
        rest = self.buffer.drain_all()
        if rest or not self.block_ids:
            self._stage(rest)
        return StagedFile(
            container=self.config.container,
            blob=self.blob,
            block_ids=tuple(self.block_ids),
            byte_count=self.staged_bytes,
            record_count=self.record_count,
            content_type=CONTENT_TYPES[self.config.file_format],
        )


class AzureTransaction:
    """One subtask's open transaction (never serialized; lives in the Spark task).

    Args:
        ctx: the subtask's writer context.
        config: the sink configuration.
        ops: the container's requests.
        clock: wall clock in ms.
    """

    def __init__(
        self, ctx: WriterContext, config: AzureBlobSinkConfig, ops: BlobOps, clock: Clock = wall_clock_ms
    ) -> None:
        self.ctx = ctx
        self.config = config
        self.ops = ops
        self.clock = clock
        self.token = files_naming.job_token(ctx.job_id, ctx.sink_name)
        self.prefix = config.prefix
        self.state = TxnState.OPEN
        self.files: dict[str, OpenFile] = {}
        self.rolled: list[StagedFile] = []
        self.opened: list[str] = []
        """Blob names of every file this transaction opened (``abort_open`` discards them)."""
        self.file_schema: pa.Schema | None = None

    def _expect(self, name: str) -> None:
        if self.state is not TxnState.OPEN:
            raise IllegalTransitionError("AzureTransaction", self.state.name, name)

    def write(self, batch: pa.RecordBatch) -> None:
        """Write one batch: project it to ``config.columns``, split it by partition path, append to
        each path's file, roll on limits.

        Raises:
            SchemaError: the batch lacks a column of the projection or does not fit the configuration.
            ServiceUnavailableError / ConfigError: a block could not be staged.
        """
        self._expect("write")
        if batch.num_rows == 0:
            return
        self.file_schema, by_file = file_batches(self.config, batch, self.file_schema)
        now = self.clock()
        for path, rows in by_file:
            f = self._file_for(path, now)
            f.write(rows, now)
            if roll_after_write(f.stats(), self.config.rolling, now, MAX_BLOCKS):
                self._roll(path)

    def _file_for(self, path: str, now: int) -> OpenFile:
        f = self.files.get(path)
        if f is not None:
            return f
        if len(self.files) >= self.config.max_open_files:
            lru = min(self.files.values(), key=lambda o: o.last_write_ms)
            self._roll(lru.partition_path)
        assert self.file_schema is not None
        blob = files_naming.data_key(
            self.prefix,
            path,
            self.ctx.partition,
            self.ctx.checkpoint_id,
            self.token,
            uuid.uuid4().hex,
            self.config.file_format.extension,
        )
        f = OpenFile(self.ops, self.config, path, blob, self.file_schema, now)
        self.files[path] = f
        self.opened.append(blob)
        return f

    def _roll(self, path: str) -> None:
        staged = self.files.pop(path).close()
        self.rolled.append(staged)
        log.debug(
            "rolled file blob=%s bytes=%d records=%d", staged.blob, staged.byte_count, staged.record_count
        )

    def pre_commit(self) -> AzureCommittable | None:
        """Roll every open file (the checkpoint); return every file rolled in the epoch, or None."""
        self._expect("pre_commit")
        for path in list(self.files):
            self._roll(path)
        self.state = TxnState.PRE_COMMITTED
        return AzureCommittable(files=tuple(self.rolled)) if self.rolled else None

    def abort_open(self) -> None:
        """Best effort: discard the blocks of every file this transaction opened. Idempotent."""
        if self.state is TxnState.ABORTED:
            return
        self.state = TxnState.ABORTED
        self.files.clear()
        self.rolled.clear()
        for blob in self.opened:
            try:
                self.ops.discard_staged(blob)
            except Exception:  # leftovers are lingering; abort_lingering removes them later
                log.warning(
                    "abort_open: could not discard %s (left for abort_lingering)", blob, exc_info=True
                )
