"""The common body of the part-file sinks (Azure Blob Storage, GCS): construction checks, the
schema check, the executor side handed to :class:`~.writer.PartFileTransaction`, and measuring.
Each store's sink adds how it reaches the store (its clients), the check that its place exists,
and the driver side (commit, abort, lingering cleanup), which differ store by store.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from twophase.connectors.objectstore.internal import committer
from twophase.connectors.objectstore.internal.config import PartFileSinkConfig
from twophase.connectors.objectstore.internal.formats import validate_schema
from twophase.connectors.objectstore.internal.rolling import Clock, wall_clock_ms
from twophase.connectors.objectstore.internal.writer import PartFileTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome, CommittableSize

T = TypeVar("T", bound=PartFileTransaction[Any, Any, Any])
"""The store's transaction."""
C = TypeVar("C", bound=committer.FilesCommittable[Any])
"""The store's committable."""


class PartFileSink(TwoPhaseCommitSink[T, C]):
    """A file sink whose every file is one part-file transfer committed by the driver.

    Args:
        name: the sink's name, unique within the job; with the job id it forms the name token.
        config: where and how to write (an instance of the store's :attr:`CONFIG`).
        client_factory: makes the store's clients from ``config`` (default: the store's cached
            ones, one set per process and configuration). Must be picklable for Spark.
        clock: wall clock in ms since the epoch, for the rolling policy (default: ``time.time``).

    Raises:
        ConfigError: an empty name, or a config of another type.
    """

    CONFIG: ClassVar[type[PartFileSinkConfig]]
    """The store's config class."""
    TITLE: ClassVar[str]
    """The sink in messages, with its article (``"a GCS file sink"``)."""
    COMMIT_LOG: ClassVar[logging.Logger]
    """The store's committer's logger (``commit done`` lines carry its name)."""

    # committables are independent files and the stores' clients are thread-safe for requests
    commit_concurrency = 8

    def __init__(
        self,
        name: str,
        config: PartFileSinkConfig,
        *,
        client_factory: Callable[[Any], Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError(f"{self.TITLE} needs a non-empty name")
        if not isinstance(config, self.CONFIG):
            wanted = self.CONFIG.__name__
            article = "an" if wanted[0] in "AEIOU" else "a"
            raise ConfigError(f"config must be {article} {wanted}, got {type(config).__name__}")
        self._client_factory = client_factory
        self._clock = clock or wall_clock_ms
        self.name = name
        self.config = config

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, config={self.config!r})"

    @abstractmethod
    def _ops(self) -> Any:
        """The store's requests for this configuration: an object whose ``place`` is the log
        field and value of the place files go (``("container", "c")``)."""

    @abstractmethod
    def commit_file(self, ops: Any, file: Any) -> CommitOutcome:
        """Commit one rolled file with ``ops`` (:meth:`_ops`), decided from the store's own
        evidence; never raises (see the store's ``internal.committer`` for its outcome table)."""

    @abstractmethod
    def abort_file(self, ops: Any, file: Any) -> None:
        """Undo one rolled file with ``ops``; a committed file is never touched. Idempotent.

        Raises:
            ServiceUnavailableError / ConfigError: the store keeps failing or refuses.
        """

    @abstractmethod
    def check_store(self) -> None:
        """Check that the place files go exists and the identity may read it. Nothing is written.

        Raises:
            ConfigError: the place does not exist or the credentials are refused.
            ServiceUnavailableError: the store cannot be reached.
        """

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the schema (projected to ``config.columns``) against the configuration, then the
        store (:meth:`check_store`). Nothing is written.

        Raises:
            SchemaError: a column of the projection or a partition column is missing, ...
            ConfigError: the place does not exist or the credentials are refused.
            ServiceUnavailableError: the store cannot be reached.
        """
        validate_schema(self.config, schema)
        self.check_store()

    # --- executor side -------------------------------------------------------------------------

    def write(self, txn: T, batch: pa.RecordBatch) -> None:
        """Write one Arrow batch: split by partition path; full parts are sent as they fill.

        Raises:
            SchemaError / RecordError: the batch cannot be written.
            ConfigError: the place is missing or access denied; ServiceUnavailableError: unreachable.
        """
        txn.write(batch)

    def pre_commit(self, txn: T) -> C | None:
        """Roll every file (the checkpoint); return them all, or ``None`` when nothing was written.

        Raises:
            ConfigError / ServiceUnavailableError: the last parts could not be sent.
        """
        committable: C | None = txn.pre_commit()
        return committable

    def abort_open(self, txn: T) -> None:
        """Undo what the transaction sent (best effort; what is left is lingering)."""
        txn.abort_open()

    # --- driver side ---------------------------------------------------------------------------

    def commit(self, committable: C) -> CommitOutcome:
        """Commit every file of ``committable`` (:meth:`commit_file`); the worst of their outcomes.
        Idempotent: a repeated commit answers ``ALREADY_COMMITTED`` for the files already visible."""
        ops = self._ops()
        return committer.commit_files(
            committable, lambda f: self.commit_file(ops, f), self.COMMIT_LOG, sink=self.name, place=ops.place
        )

    def abort(self, committable: C) -> None:
        """Undo every file of ``committable`` (:meth:`abort_file`). Idempotent.

        Raises:
            ServiceUnavailableError / ConfigError: the store keeps failing or refuses.
        """
        ops = self._ops()
        for f in committable.files:
            self.abort_file(ops, f)

    def measure(self, committable: C) -> CommittableSize:
        """Records and bytes of the committable's files."""
        return committer.measure(committable)
