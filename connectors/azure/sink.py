"""The Azure Blob Storage two-phase-commit file sink: Parquet, JSON lines and CSV.

Transaction = staged blocks per file (Azure "Put Block" / "Put Block List"): begin = a file's
first row picks its blob name (unique: checkpoint, subtask, job token, uuid); write = Put Block of
every full block, invisible to readers; pre-commit = the last block, at the checkpoint; commit =
Put Block List with ``If-None-Match: *``, by the driver. Data becomes visible only on commit, and
atomically per file. A repeated commit is decided from the committed blob's block list (see
``internal.committer``); staged blocks no checkpoint holds are discarded by
:meth:`AzureBlobSink.abort_lingering`. Every file rolls at every checkpoint: staged blocks live at
most one checkpoint interval before their commit, far within the seven days Azure keeps them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from twophase.connectors.azure.config import AzureBlobSinkConfig
from twophase.connectors.azure.internal import committer, lingering
from twophase.connectors.azure.internal.blobs import BlobOps, ClientFactory, cached_client
from twophase.connectors.azure.internal.committable import COMMITTABLE_CODEC, AzureCommittable
from twophase.connectors.azure.internal.writer import AzureTransaction
from twophase.sinks.api import TwoPhaseCommitSink, commit_each
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.files.formats import validate_schema
from twophase.sinks.internal.files.rolling import Clock, wall_clock_ms
from twophase.sinks.outcome import CommitOutcome, CommittableSize


class AzureBlobSink(TwoPhaseCommitSink[AzureTransaction, AzureCommittable]):
    """Exactly-once files on Azure Blob Storage / ADLS Gen2 (or Azurite) through staged blocks.

    Args:
        name: the sink's name, unique within the job; with the job id it forms the name token.
        config: where and how to write (:class:`AzureBlobSinkConfig`).
        client_factory: makes the ``ContainerClient`` from ``config`` (default: one cached client
            per process and configuration). Must be picklable for Spark.
        clock: wall clock in ms since the epoch, for the rolling policy (default: ``time.time``).

    Raises:
        ConfigError: an empty name, or a config of another type.
    """

    # committables are independent blobs and the SDK's clients are thread-safe
    commit_concurrency = 8

    def __init__(
        self,
        name: str,
        config: AzureBlobSinkConfig,
        *,
        client_factory: ClientFactory | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError("an Azure Blob Storage sink needs a non-empty name")
        if not isinstance(config, AzureBlobSinkConfig):
            raise ConfigError(f"config must be an AzureBlobSinkConfig, got {type(config).__name__}")
        self.name = name
        self.config = config
        self.codec = COMMITTABLE_CODEC
        self._client_factory = client_factory
        self._clock = clock or wall_clock_ms

    def __repr__(self) -> str:
        return f"AzureBlobSink(name={self.name!r}, config={self.config!r})"

    def _ops(self) -> BlobOps:
        return BlobOps((self._client_factory or cached_client)(self.config), self.config)

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the schema (projected to ``config.columns``) against the configuration, then that
        the container exists and is readable. Nothing is written.

        Raises:
            SchemaError: a column of the projection or a partition column is missing, ...
            ConfigError: the container does not exist or the credentials are refused.
            ServiceUnavailableError: the account cannot be reached.
        """
        validate_schema(self.config, schema)
        self._ops().check_container()

    # --- executor side -------------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> AzureTransaction:
        """Open the subtask's transaction (no request is sent before the first block)."""
        return AzureTransaction(ctx, self.config, self._ops(), self._clock)

    def write(self, txn: AzureTransaction, batch: pa.RecordBatch) -> None:
        """Write one Arrow batch: split by partition path; full blocks are staged as they fill.

        Raises:
            SchemaError / RecordError: the batch cannot be written.
            ConfigError: container missing or access denied; ServiceUnavailableError: unreachable.
        """
        txn.write(batch)

    def pre_commit(self, txn: AzureTransaction) -> AzureCommittable | None:
        """Stage the last block of every file; return them all, or ``None`` when nothing was written."""
        return txn.pre_commit()

    def abort_open(self, txn: AzureTransaction) -> None:
        """Discard the blocks the transaction staged (best effort)."""
        txn.abort_open()

    # --- driver side ---------------------------------------------------------------------------

    def commit(self, committable: AzureCommittable) -> CommitOutcome:
        """Put Block List of every file; idempotent (see ``internal.committer`` for the outcome table)."""
        return committer.commit(self._ops(), committable, sink=self.name)

    def commit_batch(self, committables: Sequence[AzureCommittable]) -> list[CommitOutcome]:
        """:meth:`commit` of one checkpoint's committables, ``commit_concurrency`` at once."""
        return commit_each(self.commit, committables, self.commit_concurrency)

    def measure(self, committable: AzureCommittable) -> CommittableSize:
        """Records and bytes of the committable's files."""
        files = committable.files
        return CommittableSize(sum(f.record_count for f in files), sum(f.byte_count for f in files))

    def abort(self, committable: AzureCommittable) -> None:
        """Discard the staged blocks of every file (a committed blob is never touched). Idempotent."""
        committer.abort(self._ops(), committable)

    def abort_lingering(self, scope: LingeringScope[AzureCommittable]) -> int:
        """Discard this job's and sink's staged blocks no checkpoint holds; returns how many blobs'."""
        return lingering.abort_lingering(self._ops(), scope)
