"""The Google Cloud Storage two-phase-commit file sink: Parquet, JSON lines and CSV.

Transaction = one resumable upload session per file (GCS "Perform resumable uploads"): begin = a
file's first row picks its object name (unique: checkpoint, subtask, job token, uuid); write =
full chunks uploaded into the session, invisible to readers; pre-commit = every whole 256 KiB
uploaded at the checkpoint, the session left unfinalized, its URI, the file's tail (under 256 KiB),
size, CRC32C and MD5 in the committable; commit = the driver's finalizing request, under the
session's ``ifGenerationMatch=0`` so that an existing object is never replaced. Data becomes
visible only on commit, and atomically per file. A repeated commit is decided from the object at
the name, its size, CRC32C and MD5 (see ``internal.committer``); abort cancels the sessions
(``DELETE`` on the session URI). Sessions cannot be listed: one whose URI died with its process
is invisible and GCS drops it seven days after it was opened (``internal.lingering``). Every file
rolls at every checkpoint, so a session waits at most one checkpoint interval for its commit.
"""

from __future__ import annotations

from typing import ClassVar

from twophase.connectors.gcs.config import GcsFileSinkConfig
from twophase.connectors.gcs.internal import committer, lingering
from twophase.connectors.gcs.internal.committable import COMMITTABLE_CODEC, GcsCommittable, PendingUpload
from twophase.connectors.gcs.internal.sessions import ClientFactory, SessionOps, cached_clients
from twophase.connectors.gcs.internal.writer import GcsTransaction, OpenFile
from twophase.connectors.objectstore.internal.rolling import Clock
from twophase.connectors.objectstore.internal.sink import PartFileSink
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome


class GcsFileSink(PartFileSink[GcsTransaction, GcsCommittable]):
    """Exactly-once files on Google Cloud Storage (or fake-gcs-server) through resumable uploads.

    Args:
        name: the sink's name, unique within the job; with the job id it forms the name token.
        config: where and how to write (:class:`GcsFileSinkConfig`).
        client_factory: makes the clients from ``config`` (default: one cached set per process and
            configuration). Must be picklable for Spark.
        clock: wall clock in ms since the epoch, for the rolling policy (default: ``time.time``).

    Raises:
        ConfigError: an empty name, or a config of another type.
    """

    CONFIG = GcsFileSinkConfig
    TITLE: ClassVar[str] = "a GCS file sink"
    COMMIT_LOG = committer.log
    config: GcsFileSinkConfig

    def __init__(
        self,
        name: str,
        config: GcsFileSinkConfig,
        *,
        client_factory: ClientFactory | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name, config, client_factory=client_factory, clock=clock)
        self.codec = COMMITTABLE_CODEC

    def _ops(self) -> SessionOps:
        return SessionOps((self._client_factory or cached_clients)(self.config), self.config)

    def check_store(self) -> None:
        """``buckets.get``: the bucket exists and is readable. Nothing is written.

        Raises:
            ConfigError: the bucket does not exist or the credentials are refused.
            ServiceUnavailableError: GCS cannot be reached.
        """
        self._ops().check_bucket()

    def begin_transaction(self, ctx: WriterContext) -> GcsTransaction:
        """Open the subtask's transaction (no request is sent before a file's first chunk)."""
        return GcsTransaction(ctx, self.config, self._ops(), OpenFile, GcsCommittable, self._clock)

    def commit_file(self, ops: SessionOps, file: PendingUpload) -> CommitOutcome:
        """Finalize the file's session unless the object is there already; decided from the object
        at the name, its size, CRC32C and MD5 (see ``internal.committer``). Never raises."""
        return committer.commit_file(ops, file)

    def abort_file(self, ops: SessionOps, file: PendingUpload) -> None:
        """Cancel the file's session (a finalized session's object is never touched). Idempotent.

        Raises:
            ServiceUnavailableError / ConfigError: GCS keeps failing or refuses.
        """
        ops.cancel(file.session_uri)

    def abort_lingering(self, scope: LingeringScope[GcsCommittable]) -> int:
        """Sessions cannot be listed on GCS: nothing is found, 0 (see ``internal.lingering``)."""
        return lingering.abort_lingering(scope)
