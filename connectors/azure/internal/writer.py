"""Executor side of the Azure file sink: one subtask's transaction (open files, staged blocks).

The routing of rows to one file per Hive partition path, rolling and the state machine are the
object-store file layer's (:mod:`twophase.connectors.objectstore.internal.writer`). Here, each
file is a blob name (the shared data file name, unique per file) under which full blocks of
``block_size_bytes`` are staged with Put Block as data arrives; nothing is visible until the
driver's Put Block List. Azure's limit of 50,000 blocks per blob rolls a file too.

``abort_open`` discards the blocks this attempt staged (best effort); whatever it cannot discard
is lingering and ``abort_lingering`` finds it by name.
"""

from __future__ import annotations

import logging
from typing import Any

from twophase.connectors.azure.config import MAX_BLOCKS, AzureBlobSinkConfig
from twophase.connectors.azure.internal import naming
from twophase.connectors.azure.internal.blobs import BlobOps
from twophase.connectors.azure.internal.committable import AzureCommittable, StagedFile
from twophase.connectors.objectstore.internal.writer import PartFile, PartFileTransaction

log = logging.getLogger(__name__)


class OpenFile(PartFile[StagedFile]):
    """A file being written as blocks staged under its blob name (arguments: those of
    :class:`~twophase.connectors.objectstore.internal.writer.PartFile`)."""

    ops: BlobOps
    config: AzureBlobSinkConfig
    LEFT_BEHIND = "abort_open: could not discard %s (left for abort_lingering)"
    TRANSACTION = "AzureTransaction"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.nonce = naming.new_nonce()
        self.block_ids: list[str] = []
        self.staged_bytes = 0

    @property
    def parts_sent(self) -> int:
        """Blocks staged so far."""
        return len(self.block_ids)

    @property
    def max_parts(self) -> int:
        """Azure's 50,000 blocks per blob."""
        return MAX_BLOCKS

    def send_full_parts(self) -> None:
        """Stage every full block of ``block_size_bytes``."""
        size = self.config.block_size_bytes
        while len(self.buffer) >= size:
            self._stage(self.buffer.drain(size))

    def _stage(self, data: bytes) -> None:
        block = naming.block_id(self.nonce, len(self.block_ids) + 1)
        self.ops.stage_block(self.name, block, data)
        self.block_ids.append(block)
        self.staged_bytes += len(data)

    def finish(self) -> StagedFile:
        """Stage the last block; return the file waiting for its Put Block List."""
        self.send_full_parts()
        rest = self.buffer.drain_all()
        if rest or not self.block_ids:
            self._stage(rest)
        return StagedFile(
            container=self.config.container,
            blob=self.name,
            block_ids=tuple(self.block_ids),
            byte_count=self.staged_bytes,
            record_count=self.record_count,
            content_type=self.content_type,
        )

    def discard(self) -> None:
        """Discard the blocks staged under the blob name (never a committed blob)."""
        self.ops.discard_staged(self.name)

    def log_rolled(self, pending: StagedFile) -> None:
        """DEBUG: the blob, its size and records."""
        log.debug(
            "rolled file blob=%s bytes=%d records=%d", pending.blob, pending.byte_count, pending.record_count
        )


AzureTransaction = PartFileTransaction[OpenFile, StagedFile, AzureCommittable]
"""One subtask's transaction whose files are blobs of staged blocks (:class:`OpenFile`)."""
