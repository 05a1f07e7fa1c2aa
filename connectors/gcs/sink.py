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

from collections.abc import Sequence

import pyarrow as pa

from twophase.connectors.gcs.config import GcsFileSinkConfig
from twophase.connectors.gcs.internal import committer, lingering
from twophase.connectors.gcs.internal.committable import COMMITTABLE_CODEC, GcsCommittable
from twophase.connectors.gcs.internal.sessions import ClientFactory, SessionOps, cached_clients
from twophase.connectors.gcs.internal.writer import GcsTransaction
from twophase.sinks.api import TwoPhaseCommitSink, commit_each
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.files.formats import validate_schema
from twophase.sinks.internal.files.rolling import Clock, wall_clock_ms
from twophase.sinks.outcome import CommitOutcome, CommittableSize


class GcsFileSink(TwoPhaseCommitSink[GcsTransaction, GcsCommittable]):
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

    # committables are independent objects; the clients' sessions are thread-safe for requests
    commit_concurrency = 8

    def __init__(
        self,
        name: str,
        config: GcsFileSinkConfig,
        *,
        client_factory: ClientFactory | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError("a GCS file sink needs a non-empty name")
        if not isinstance(config, GcsFileSinkConfig):
            raise ConfigError(f"config must be a GcsFileSinkConfig, got {type(config).__name__}")
        self.name = name
        self.config = config
        self.codec = COMMITTABLE_CODEC
        self._client_factory = client_factory
        self._clock = clock or wall_clock_ms

    def __repr__(self) -> str:
        return f"GcsFileSink(name={self.name!r}, config={self.config!r})"

    def _ops(self) -> SessionOps:
        return SessionOps((self._client_factory or cached_clients)(self.config), self.config)

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the schema (projected to ``config.columns``) against the configuration, then that
        the bucket exists and is readable. Nothing is written.

        Raises:
            SchemaError: a column of the projection or a partition column is missing, ...
            ConfigError: the bucket does not exist or the credentials are refused.
            ServiceUnavailableError: GCS cannot be reached.
        """
        validate_schema(self.config, schema)
        self._ops().check_bucket()

    # --- executor side -------------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> GcsTransaction:
        """Open the subtask's transaction (no request is sent before a file's first chunk)."""
        return GcsTransaction(ctx, self.config, self._ops(), self._clock)

    def write(self, txn: GcsTransaction, batch: pa.RecordBatch) -> None:
        """Write one Arrow batch: split by partition path; full chunks are uploaded as they fill.

        Raises:
            SchemaError / RecordError: the batch cannot be written.
            ConfigError: bucket missing or access denied; ServiceUnavailableError: unreachable.
        """
        txn.write(batch)

    def pre_commit(self, txn: GcsTransaction) -> GcsCommittable | None:
        """Upload every whole 256 KiB of every file; return them all (sessions, tails, digests), or
        ``None`` when nothing was written."""
        return txn.pre_commit()

    def abort_open(self, txn: GcsTransaction) -> None:
        """Cancel the sessions the transaction opened (best effort)."""
        txn.abort_open()

    # --- driver side ---------------------------------------------------------------------------

    def commit(self, committable: GcsCommittable) -> CommitOutcome:
        """Finalize every file's session; idempotent (see ``internal.committer`` for the outcome table)."""
        return committer.commit(self._ops(), committable, sink=self.name)

    def commit_batch(self, committables: Sequence[GcsCommittable]) -> list[CommitOutcome]:
        """:meth:`commit` of one checkpoint's committables, ``commit_concurrency`` at once."""
        return commit_each(self.commit, committables, self.commit_concurrency)

    def measure(self, committable: GcsCommittable) -> CommittableSize:
        """Records and bytes of the committable's files."""
        files = committable.files
        return CommittableSize(sum(f.record_count for f in files), sum(f.byte_count for f in files))

    def abort(self, committable: GcsCommittable) -> None:
        """Cancel the session of every file (a committed object is never touched). Idempotent."""
        committer.abort(self._ops(), committable)

    def abort_lingering(self, scope: LingeringScope[GcsCommittable]) -> int:
        """Sessions cannot be listed on GCS: nothing is found, 0 (see ``internal.lingering``)."""
        return lingering.abort_lingering(scope)
