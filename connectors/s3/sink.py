"""The S3 two-phase-commit sink: one class for Parquet, JSON lines and CSV.

``S3Sink`` is an :class:`~twophase.sinks.api.InProgressSink` for every format, so the runtime treats all
formats alike:

- Parquet rolls every file at each checkpoint, so ``pre_commit`` returns everything written,
  ``snapshot_in_progress`` returns ``None`` and ``finish`` equals ``pre_commit``.
- JSON lines and CSV keep files open across checkpoints per :class:`RollingPolicy`:
  ``pre_commit`` returns the files that rolled, ``snapshot_in_progress`` the open ones (upload
  id, parts so far, the sub-5 MiB tail as a temporary object), the next epoch's task for the same
  partition resumes them from ``WriterContext.restored_state``, and ``finish`` (end of input)
  rolls everything into the committable of the final checkpoint (FLIP-147).

Transaction = multipart upload per file (DESIGN.md §7): begin = CreateMultipartUpload at a file's
first row, write = buffered UploadPart, pre-commit = the last part, commit =
CompleteMultipartUpload. Data becomes visible only on commit.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from botocore.exceptions import ClientError

from twophase.connectors.objectstore.internal.formats import validate_schema
from twophase.connectors.s3.config import S3SinkConfig
from twophase.connectors.s3.internal import committer, lingering, staged_write
from twophase.connectors.s3.internal.committable import (
    COMMITTABLE_CODEC,
    IN_PROGRESS_CODEC,
    S3Committable,
    UploadedPart,
)
from twophase.connectors.s3.internal.naming import job_token
from twophase.connectors.s3.internal.uploads import ClientFactory, S3Ops, cached_client
from twophase.connectors.s3.internal.writer import Clock, S3Transaction, wall_clock_ms
from twophase.sinks.api import InProgressSink
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ConcurrentAttemptError, ConfigError
from twophase.sinks.outcome import CommitOutcome, CommittableSize
from twophase.sinks.spark_staging import StagedTask


class S3Sink(InProgressSink[S3Transaction, S3Committable]):
    """Exactly-once files on S3 (or MinIO) through multipart uploads.

    Args:
        name: the sink's name, unique within the job; with the job id it forms the key token.
        config: where and how to write (:class:`S3SinkConfig`).
        client_factory: makes the boto3 S3 client from ``config`` (default: one cached client per
            process and configuration). Tests inject fakes; must be picklable for Spark.
        clock: wall clock in ms since the epoch, for the rolling policy (default: ``time.time``).

    Raises:
        ConfigError: an empty name.
    """

    # committables are independent uploads and boto3 clients are thread-safe (the client's pool
    # holds 10 connections)
    commit_concurrency = 8

    def __init__(
        self,
        name: str,
        config: S3SinkConfig,
        *,
        client_factory: ClientFactory | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError("an S3 sink needs a non-empty name")
        if not isinstance(config, S3SinkConfig):
            raise ConfigError(f"config must be an S3SinkConfig, got {type(config).__name__}")
        self.name = name
        # attempts resuming one spanning file would upload over each other's parts (Parquet opens
        # a new upload per attempt)
        self.speculation_safe = not config.file_format.spans_checkpoints
        self.config = config
        self.codec = COMMITTABLE_CODEC
        self._client_factory = client_factory
        self._clock = clock or wall_clock_ms

    def __repr__(self) -> str:
        return f"S3Sink(name={self.name!r}, config={self.config!r})"

    def _ops(self) -> S3Ops:
        client = (self._client_factory or cached_client)(self.config)
        return S3Ops(client, self.config)

    # --- checks before anything is written -----------------------------------------------------

    @property
    def keeps_in_progress(self) -> bool:
        """Row-format files may stay open across checkpoints unless they roll on every one."""
        return self.config.file_format.spans_checkpoints and not self.config.rolling.on_checkpoint

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the schema (projected to ``config.columns``) against the configuration, then that
        the bucket exists and is accessible. Nothing is written.

        Raises:
            SchemaError: a column of the projection is missing (all of them named), a partition
                column is missing or nested, CSV gets nested data, ...
            ConfigError: the bucket does not exist or the credentials are denied.
            ServiceUnavailableError: the endpoint cannot be reached.
        """
        validate_schema(self.config, schema)
        self._ops().head_bucket()

    # --- Spark-staged epochs (config.write_path "spark") ----------------------------------------

    def stages_with_spark(self) -> bool:
        """Whether Spark's Parquet writer stages this sink's epochs (``config.write_path``)."""
        return self.config.write_path == "spark"

    def stage_with_spark(self, df: Any, job_id: str, checkpoint_id: int) -> dict[int, StagedTask]:
        """Write the epoch with Spark's Parquet writer through the staging committer, and read
        back what it staged (:mod:`~twophase.connectors.s3.internal.staged_write`).

        Returns:
            Spark partition → what its task staged: attempt 0 (the one Spark let commit: its
            ``.pendingset`` names no attempt), its committable (its files' pending uploads, parts as
            S3 lists them), records unknown (S3A's pending commits carry bytes, not rows).

        Raises:
            ConfigError: the session lacks Spark's cloud commit protocol (named setting).
            ConcurrentAttemptError: an upload's parts are not those its task committed.
            Exception: whatever Spark's write raises; what it staged is left to the lingering cleanup.
        """
        spark = df.sparkSession
        staged_write.check_session(lambda key: spark.conf.get(key, None))
        target = self.staged_target(job_id, checkpoint_id)
        if self.config.columns is not None:  # the sink's projection, as the Python path applies it
            df = df.select(*self.config.columns)
        writer = df.write.mode("append").options(**target.options())
        writer = writer.option("compression", self.config.parquet_compression)
        if self.config.partition_by:
            writer = writer.partitionBy(*self.config.partition_by)
        writer.parquet(target.location)
        return {p: StagedTask(0, c) for p, c in self.read_staged(target).items()}

    def staged_target(self, job_id: str, checkpoint_id: int) -> staged_write.StagedTarget:
        """The names of one new staged write of ``checkpoint_id`` (a fresh job uuid per call, so
        each attempt of a checkpoint has its own folder and marker)."""
        token = job_token(job_id, self.name)
        job_uuid = staged_write.staged_job_uuid(token, checkpoint_id, secrets.token_hex(4))
        return staged_write.StagedTarget.of(self.config.bucket, self.config.prefix, token, job_uuid)

    def read_staged(self, target: staged_write.StagedTarget) -> dict[int, S3Committable]:
        """What a finished staged write staged: each Spark partition's committable, from the
        ``.pendingset`` files in its folder, every upload's parts listed back.

        Raises:
            ValueError: a bad or doubled ``.pendingset``.
            ConcurrentAttemptError: an upload's parts are not those its task committed.
        """
        ops = self._ops()
        pendingsets = staged_write.read_pendingsets(ops.list_keys(target.folder), ops.read_object)
        return staged_write.staged_committables(
            pendingsets, ops.list_part_sizes, self.commit_concurrency, target.folder
        )

    # --- executor side -------------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> S3Transaction:
        """Open the subtask's transaction; restored in-progress files are resumed lazily.

        Raises:
            CommittableDecodeError / ConfigError: ``ctx.restored_state`` is not this sink's.
        """
        return S3Transaction(ctx, self.config, self._ops(), self._clock)

    def write(self, txn: S3Transaction, batch: pa.RecordBatch) -> None:
        """Write one Arrow batch: only ``config.columns`` of it (every column without a projection),
        split by partition path; full parts are uploaded as they fill.

        Raises:
            SchemaError / RecordError: the batch cannot be written (e.g. a projected column is missing).
            ConfigError: bucket missing or access denied; ServiceUnavailableError: S3 unreachable.
            TransactionLostError: a resumed upload or tail vanished.
        """
        txn.write(batch)

    def pre_commit(self, txn: S3Transaction) -> S3Committable | None:
        """Upload the last part of every file that rolls now; return them, or ``None``."""
        return txn.pre_commit()

    def snapshot_in_progress(self, txn: S3Transaction) -> JsonObject | None:
        """The ``s3.in_progress`` state of files still open (row formats), or ``None``."""
        return txn.snapshot_in_progress()

    def finish(self, txn: S3Transaction) -> S3Committable | None:
        """End of input: roll every file, including restored ones (FLIP-147)."""
        return txn.finish()

    def abort_open(self, txn: S3Transaction) -> None:
        """Abort uploads the transaction created (resumed ones stay: a checkpoint holds them)."""
        txn.abort_open()

    # --- driver side ---------------------------------------------------------------------------

    def commit(self, committable: S3Committable) -> CommitOutcome:
        """CompleteMultipartUpload every file; idempotent (see ``committer`` for the outcome table)."""
        return committer.commit(self._ops(), committable, sink=self.name)

    def commit_batch(self, committables: Sequence[S3Committable]) -> list[CommitOutcome]:
        """CompleteMultipartUpload every file of one checkpoint's committables from a pool of
        ``commit_concurrency`` threads over one client; each committable decided as :meth:`commit`
        decides it (see ``committer``)."""
        return committer.commit_batch(
            self._ops(), committables, threads=self.commit_concurrency, sink=self.name
        )

    def recover_and_commit_batch(self, committables: Sequence[S3Committable]) -> list[CommitOutcome]:
        """:meth:`commit_batch`: S3 decides a re-commit from the object at each file's key."""
        return self.commit_batch(committables)

    def verify_pre_committed(
        self, committables: Sequence[S3Committable], in_progress: Sequence[JsonObject]
    ) -> None:
        """Row formats: every file the acknowledged attempt resumed still holds the parts it
        recorded (ListParts, ETags): another attempt resuming the same upload uploads the same part
        numbers and overwrites them. Files an attempt opened itself have uploads of their own.

        Raises:
            ConcurrentAttemptError: a part was overwritten, or the upload is gone (named).
        """
        if not self.config.file_format.spans_checkpoints:
            return
        files: list[tuple[str, str, tuple[UploadedPart, ...]]] = [
            (f.key, f.upload_id, f.parts) for c in committables for f in c.files if f.resumed
        ]
        for state in in_progress:
            files += [
                (f.key, f.upload_id, f.parts) for f in IN_PROGRESS_CODEC.from_json(state).files if f.resumed
            ]
        ops = self._ops()
        for key, upload_id, parts in files:
            try:
                now = ops.list_parts(key, upload_id)
            except ClientError as e:
                raise ConcurrentAttemptError(
                    f"S3 sink {self.name!r}: the upload of s3://{self.config.bucket}/{key} is gone ({e}); "
                    "another attempt of the same subtask completed or aborted it"
                ) from e
            changed = [p.number for p in parts if now.get(p.number) != p.etag]
            if changed:
                raise ConcurrentAttemptError(
                    f"S3 sink {self.name!r}: parts {changed} of s3://{self.config.bucket}/{key} were "
                    "overwritten by another attempt of the same subtask resuming the same upload"
                )

    def measure(self, committable: S3Committable) -> CommittableSize:
        """Records and bytes of the committable's files."""
        files = committable.files
        return CommittableSize(sum(f.record_count for f in files), sum(f.byte_count for f in files))

    def abort(self, committable: S3Committable) -> None:
        """Abort every file's upload and delete its tails. Idempotent."""
        committer.abort(self._ops(), committable)

    def abort_in_progress(self, state: JsonObject) -> None:
        """Delete the tail objects of an in-progress state that will never be resumed.

        The multipart uploads are left to :meth:`abort_lingering`: a file spanning checkpoints
        keeps one upload id in every checkpoint it spans, so this state's upload may still be held
        by the checkpoint being restored. ``abort_lingering`` sees everything that is held.

        Raises:
            CommittableDecodeError: ``state`` is not an S3 in-progress state.
        """
        tails = [f.tail_key for f in IN_PROGRESS_CODEC.from_json(state).files if f.tail_key is not None]
        if tails:
            self._ops().delete_keys(tails)

    def abort_lingering(self, scope: LingeringScope[S3Committable]) -> int:
        """Abort this job's and sink's uploads no checkpoint holds; delete orphaned tails.

        Returns the number of aborted uploads (see ``lingering``).
        """
        return lingering.abort_lingering(self._ops(), scope)
