"""Executor side of the part-file sinks (Azure staged blocks, GCS resumable uploads): one subtask's
transaction, routing rows to one file per Hive partition path and rolling files.

A transaction owns the files one subtask writes in one epoch. Each file is one transfer to the
store at the file's final, unique name (the shared data file name, :mod:`.naming`), made of parts
sent as the encoder fills them; nothing is visible until the driver commits it. A file rolls on
size, age or the store's limit of parts within the epoch, on ``max_open_files`` (the least
recently written one), and always at the checkpoint (``pre_commit``): files never span
checkpoints, so there is no in-progress state to snapshot.

State machine (every transition checked; illegal ones raise ``IllegalTransitionError``)::

    OPEN ──write──► OPEN ──pre_commit──► PRE_COMMITTED
    any ──abort_open──► ABORTED          (task failure; idempotent)

What a part is, how it is sent, what a rolled file records and how ``abort_open`` undoes a file
are the store's: its :class:`PartFile`, which the transaction is given with the committable's class.
"""

from __future__ import annotations

import enum
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from twophase.connectors.objectstore.internal import naming
from twophase.connectors.objectstore.internal.config import PartFileSinkConfig
from twophase.connectors.objectstore.internal.formats import (
    CONTENT_TYPES,
    FileEncoder,
    OutputBuffer,
    open_encoder,
)
from twophase.connectors.objectstore.internal.rolling import (
    Clock,
    FileStats,
    roll_after_write,
    wall_clock_ms,
)
from twophase.connectors.objectstore.internal.routing import FileRouter
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import IllegalTransitionError

log = logging.getLogger(__name__)

P = TypeVar("P")
"""A rolled file, as the committable records it."""
C = TypeVar("C")
"""The committable of a subtask's rolled files."""


class TxnState(enum.Enum):
    """States of a :class:`PartFileTransaction`."""

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    ABORTED = "aborted"


class PartFile(ABC, Generic[P]):
    """One file being written: its name, encoder and buffered bytes; the store's subclass sends
    the parts and says what a rolled file records.

    Args:
        ops: the store's requests (its clients).
        config: the sink's configuration.
        partition_path: the Hive partition path the file's rows belong to (``""``: none).
        name: the file's final name in the store (unique to this file).
        schema: the schema of the rows written into the file (partition columns dropped).
        now: wall clock in ms (the rolling policy's open time).
    """

    LEFT_BEHIND: ClassVar[str] = "abort_open: could not undo %s"
    """The WARNING logged (``%s``: the file's name) when ``abort_open`` cannot undo a file."""
    TRANSACTION: ClassVar[str] = "PartFileTransaction"
    """The transaction's name in ``IllegalTransitionError`` (``"GcsTransaction"``)."""

    def __init__(
        self,
        ops: Any,
        config: PartFileSinkConfig,
        partition_path: str,
        name: str,
        schema: pa.Schema,
        now: int,
    ) -> None:
        self.content_type = CONTENT_TYPES[config.file_format]
        self.ops = ops
        self.config = config
        self.partition_path = partition_path
        self.name = name
        self.record_count = 0
        self.opened_at_ms = now
        self.last_write_ms = now
        self.buffer = OutputBuffer()
        self.encoder: FileEncoder = open_encoder(config, schema, self.buffer, resumed=False)

    @property
    @abstractmethod
    def parts_sent(self) -> int:
        """How many parts the store holds for this file."""

    @property
    @abstractmethod
    def max_parts(self) -> int:
        """The store's limit of parts in one file: a file that reaches it rolls."""

    @abstractmethod
    def send_full_parts(self) -> None:
        """Send every full part the buffer holds.

        Raises:
            ServiceUnavailableError / ConfigError: the store failed or refused.
        """

    @abstractmethod
    def finish(self) -> P:
        """After the encoder closed: send what is left as the store wants it; return the rolled file.

        Raises:
            ServiceUnavailableError / ConfigError: the store failed or refused.
        """

    @abstractmethod
    def discard(self) -> None:
        """Undo what the store holds of this file (``abort_open``; best effort, may raise)."""

    @abstractmethod
    def log_rolled(self, pending: P) -> None:
        """Log (DEBUG) the rolled file, without secrets."""

    def stats(self) -> FileStats:
        """The rolling policy's view of this file."""
        return FileStats(self.buffer.tell(), self.parts_sent, self.opened_at_ms, self.last_write_ms)

    def write(self, batch: pa.RecordBatch, now_ms: int) -> None:
        """Encode ``batch`` and send every full part.

        Raises:
            SchemaError / RecordError: the batch cannot be encoded.
            ServiceUnavailableError / ConfigError: the store failed or refused.
        """
        self.encoder.write(batch)
        self.record_count += batch.num_rows
        self.last_write_ms = now_ms
        self.send_full_parts()

    def close(self) -> P:
        """End the file (Parquet footer), send the rest; return the file waiting for its commit."""
        self.encoder.close()
        pending = self.finish()
        self.log_rolled(pending)
        return pending


F = TypeVar("F", bound=PartFile[Any])
"""A store's open file."""


class PartFileTransaction(FileRouter[F], Generic[F, P, C]):
    """One subtask's open transaction (never serialized; lives in the Spark task).

    Args:
        ctx: the subtask's writer context.
        config: the sink configuration.
        ops: the store's requests (its clients), handed to the files it opens.
        file_class: the store's open file, made with ``ops``, ``config``, the partition path, the
            file's name, its schema and the time.
        committable_class: makes the committable of the rolled files (never empty).
        clock: wall clock in ms.
    """

    config: PartFileSinkConfig

    def __init__(
        self,
        ctx: WriterContext,
        config: PartFileSinkConfig,
        ops: Any,
        file_class: type[F],
        committable_class: Callable[[tuple[P, ...]], C],
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.ctx = ctx
        self.token = naming.job_token(ctx.job_id, ctx.sink_name)
        self.config = config
        self.prefix = config.prefix
        self.ops = ops
        self.file_class = file_class
        self.committable_class = committable_class
        self.clock = clock
        self.state = TxnState.OPEN
        self.files: dict[str, F] = {}
        self.rolled: list[P] = []
        self.opened: list[F] = []
        """Every file this transaction opened (``abort_open`` undoes them)."""
        self.file_schema: pa.Schema | None = None

    def _expect(self, name: str) -> None:
        if self.state is not TxnState.OPEN:
            raise IllegalTransitionError(self.file_class.TRANSACTION, self.state.name, name)

    def write(self, batch: pa.RecordBatch) -> None:
        """Write one batch: project it to ``config.columns``, split it by partition path, append to
        each path's file, roll on limits (:meth:`~.routing.FileRouter.route`).

        Raises:
            IllegalTransitionError: the transaction is not open.
            SchemaError: the batch lacks a column of the projection or does not fit the configuration.
            ServiceUnavailableError / ConfigError: a part could not be sent.
        """
        self._expect("write")
        self.route(batch)

    def open_path(self, path: str, now: int) -> F:
        """A new file of ``path`` at a fresh data file name (no request needs to be sent yet)."""
        assert self.file_schema is not None
        name = naming.data_key(
            self.prefix,
            path,
            self.ctx.partition,
            self.ctx.checkpoint_id,
            self.token,
            uuid.uuid4().hex,
            self.config.file_format.extension,
        )
        f = self.file_class(self.ops, self.config, path, name, self.file_schema, now)
        self.opened.append(f)
        return f

    def after_write(self, path: str, f: F, rows: pa.RecordBatch, now: int) -> None:
        """Roll ``f`` on size, age or the store's limit of parts."""
        if roll_after_write(f.stats(), self.config.rolling, now, f.max_parts):
            self._roll(path)

    def _roll(self, path: str) -> None:
        self.rolled.append(self.files.pop(path).close())

    def pre_commit(self) -> C | None:
        """Roll every open file (the checkpoint); return every file rolled in the epoch, or None.

        Raises:
            IllegalTransitionError: the transaction is not open.
            ServiceUnavailableError / ConfigError: a part could not be sent.
        """
        self._expect("pre_commit")
        for path in list(self.files):
            self._roll(path)
        self.state = TxnState.PRE_COMMITTED
        return self.committable_class(tuple(self.rolled)) if self.rolled else None

    def abort_open(self) -> None:
        """Best effort: undo every file this transaction opened (:meth:`PartFile.discard`). Idempotent."""
        if self.state is TxnState.ABORTED:
            return
        self.state = TxnState.ABORTED
        self.files.clear()
        self.rolled.clear()
        for f in self.opened:
            try:
                f.discard()
            except Exception:  # what is left is the store's lingering (see the connector)
                log.warning(f.LEFT_BEHIND, f.name, exc_info=True)
