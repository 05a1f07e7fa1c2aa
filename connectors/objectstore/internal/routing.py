"""Rows to files, the same for every object-store file sink (S3's spanning files and the part-file
sinks alike): a batch is projected and split by partition path, each path's rows go to that path's
open file, a path without one opens it (after rolling the least recently written file when
``max_open_files`` are open, as Flink's bucket limit), and the sink decides after each write
whether the file rolls."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, Protocol, TypeVar

import pyarrow as pa

from twophase.connectors.objectstore.internal.layout import FileLayout
from twophase.connectors.objectstore.internal.partitioning import file_batches
from twophase.connectors.objectstore.internal.rolling import Clock


class RoutedFile(Protocol):
    """An open file as the router sees it."""

    partition_path: str
    last_write_ms: int

    def write(self, batch: pa.RecordBatch, now_ms: int) -> None:
        """Append ``batch``'s rows (``now_ms``: wall clock in ms)."""
        ...


W = TypeVar("W", bound=RoutedFile)


class FileRouter(ABC, Generic[W]):
    """Routes batches to one open file per partition path (``files``); the sink's transaction
    sets ``config``, ``clock``, ``files`` and ``file_schema``, and says how a path's file opens,
    what follows a write and how a file rolls."""

    config: FileLayout
    clock: Clock
    files: dict[str, W]
    file_schema: pa.Schema | None

    @abstractmethod
    def open_path(self, path: str, now: int) -> W:
        """The file of partition ``path`` when none is open (opened, or resumed)."""

    @abstractmethod
    def after_write(self, path: str, f: W, rows: pa.RecordBatch, now: int) -> None:
        """What follows a write of ``rows`` into ``f`` (the file of ``path``): roll it on limits."""

    @abstractmethod
    def _roll(self, path: str) -> None:
        """Close the file of ``path`` and keep it for the committable."""

    def route(self, batch: pa.RecordBatch) -> None:
        """Project ``batch`` to the configured columns, split it by partition path and append each
        path's rows to its file.

        Raises:
            SchemaError: the batch lacks a column of the projection or does not fit the configuration.
            ServiceUnavailableError / ConfigError: the store failed or refused.
        """
        if batch.num_rows == 0:
            return
        self.file_schema, by_file = file_batches(self.config, batch, self.file_schema)
        now = self.clock()
        for path, rows in by_file:
            f = self._file_for(path, now)
            f.write(rows, now)
            self.after_write(path, f, rows, now)

    def _file_for(self, path: str, now: int) -> W:
        f = self.files.get(path)
        if f is None:
            if len(self.files) >= self.config.max_open_files:
                lru = min(self.files.values(), key=lambda o: o.last_write_ms)
                self._roll(lru.partition_path)
            f = self.files[path] = self.open_path(path, now)
        return f
