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

from typing import ClassVar

from twophase.connectors.azure.config import AzureBlobSinkConfig
from twophase.connectors.azure.internal import committer, lingering
from twophase.connectors.azure.internal.blobs import BlobOps, ClientFactory, cached_client
from twophase.connectors.azure.internal.committable import COMMITTABLE_CODEC, AzureCommittable, StagedFile
from twophase.connectors.azure.internal.writer import AzureTransaction, OpenFile
from twophase.connectors.objectstore.internal.rolling import Clock
from twophase.connectors.objectstore.internal.sink import PartFileSink
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome


class AzureBlobSink(PartFileSink[AzureTransaction, AzureCommittable]):
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

    CONFIG = AzureBlobSinkConfig
    TITLE: ClassVar[str] = "an Azure Blob Storage sink"
    COMMIT_LOG = committer.log
    config: AzureBlobSinkConfig

    def __init__(
        self,
        name: str,
        config: AzureBlobSinkConfig,
        *,
        client_factory: ClientFactory | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name, config, client_factory=client_factory, clock=clock)
        self.codec = COMMITTABLE_CODEC

    def _ops(self) -> BlobOps:
        return BlobOps((self._client_factory or cached_client)(self.config), self.config)

    def check_store(self) -> None:
        """Get Container Properties: the container exists and is readable. Nothing is written.

        Raises:
            ConfigError: the container does not exist or the credentials are refused.
            ServiceUnavailableError: the account cannot be reached.
        """
        self._ops().check_container()

    def begin_transaction(self, ctx: WriterContext) -> AzureTransaction:
        """Open the subtask's transaction (no request is sent before the first block)."""
        return AzureTransaction(ctx, self.config, self._ops(), OpenFile, AzureCommittable, self._clock)

    def commit_file(self, ops: BlobOps, file: StagedFile) -> CommitOutcome:
        """Put Block List of the file's blocks, created only if absent; a repeated commit is
        decided from the committed blob's block list (see ``internal.committer``). Never raises."""
        return committer.commit_file(ops, file)

    def abort_file(self, ops: BlobOps, file: StagedFile) -> None:
        """Discard the file's staged blocks (a committed blob is never touched). Idempotent.

        Raises:
            ServiceUnavailableError / ConfigError: Azure keeps failing or access is denied.
        """
        ops.discard_staged(file.blob)

    def abort_lingering(self, scope: LingeringScope[AzureCommittable]) -> int:
        """Discard this job's and sink's staged blocks no checkpoint holds; returns how many blobs'."""
        return lingering.abort_lingering(self._ops(), scope)
