"""The Delta Lake two-phase-commit sink: executor-side writer plus driver-side per-checkpoint committer.

Protocol (DESIGN.md §7 "Delta"): each subtask writes Parquet data files under the table root
and pre-commits them as a :class:`DeltaCommittable` (its Add actions). Delta needs ONE commit per
checkpoint holding every subtask's Adds, so the coordinator commits a checkpoint of this sink
with :meth:`DeltaSink.commit_checkpoint` (all its committables at once) instead of calling
:meth:`DeltaSink.commit` per committable. ``commit`` alone is only safe for a single-partition
epoch and returns ``FATAL`` otherwise (committing one subtask's Adds under the checkpoint's
``txn`` version would make the others look already committed, losing their data).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from twophase.connectors.delta.config import DeltaSinkConfig
from twophase.connectors.delta.internal import naming
from twophase.connectors.delta.internal.committable import CODEC, DeltaCommittable
from twophase.connectors.delta.internal.committer import DeltaCommitter
from twophase.connectors.delta.internal.filesystem import TableLocation, open_location
from twophase.connectors.delta.internal.lingering import (
    OwnCommits,
    ReferenceIndex,
    RemovedReferences,
    delete_unreferenced,
    load_table,
    own_files,
)
from twophase.connectors.delta.internal.schema import delta_schema_json, new_columns, project_schema
from twophase.connectors.delta.internal.writer import DeltaFileWriter
from twophase.sinks.api import CheckpointCommitSink
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError, IllegalTransitionError, SchemaError, ServiceUnavailableError
from twophase.sinks.internal.s3_access import denied_in_message
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.internal.sweep import SweepSchedule
from twophase.sinks.outcome import CommitOutcome, CommittableSize

log = logging.getLogger(__name__)

TXN_RETENTION = "delta.setTransactionRetentionDuration"
"""The table property after which readers drop a ``txn`` (Delta PROTOCOL.md, "Transaction
Identifiers"); the sink warns when it is set."""


@dataclass
class DeltaTransaction:
    """One subtask's open transaction: its context and file writer. Lives only inside the task.

    ``state`` is ``"open"`` → ``"pre_committed"`` | ``"aborted"``; other transitions raise
    :class:`~twophase.sinks.errors.IllegalTransitionError`.
    """

    ctx: WriterContext
    writer: DeltaFileWriter
    state: str = "open"

    def transition(self, action: str, to: str) -> None:
        """Move from ``open`` to ``to`` for ``action``, or raise IllegalTransitionError."""
        if self.state != "open":
            raise IllegalTransitionError("delta transaction", self.state, action)
        self.state = to


class DeltaSink(CheckpointCommitSink[DeltaTransaction, DeltaCommittable]):
    """Exactly-once Delta Lake sink.

    Args:
        name: the sink's name, unique and stable within the job; with the job id it forms the
            ``txn.appId`` ``"<job-id>:<name>"`` and the file-name token.
        config: where and how to write (:class:`DeltaSinkConfig`).

    Driver-side entry points: :meth:`validate` (before writing), :meth:`commit_checkpoint` (per
    completed checkpoint, in checkpoint order), :meth:`abort` and :meth:`abort_lingering`.
    """

    codec = CODEC

    def __init__(self, name: str, config: DeltaSinkConfig) -> None:
        if not name or ":" in name:
            raise ConfigError(f"Delta sink name must be non-empty and free of ':', got {name!r}")
        self.name = name
        self.config = config
        self._committer: DeltaCommitter | None = None  # the driver's, made at its first commit
        self._sweep = SweepSchedule()  # the driver's: when a routine lingering cleanup lists again
        self._removed = RemovedReferences()  # the driver's: referenced files the snapshot dropped

    def __repr__(self) -> str:
        return f"DeltaSink(name={self.name!r}, config={self.config!r})"

    def __getstate__(self) -> dict[str, Any]:
        # executors get the sink, not the driver's committer and the table it keeps
        return {**self.__dict__, "_committer": None, "_sweep": None, "_removed": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        fresh = {"_sweep": SweepSchedule(), "_removed": RemovedReferences()}
        self.__dict__.update({"_committer": None, **state, **fresh})

    # --- driver side, before writing ---------------------------------------------------------

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check ``schema`` (projected to ``config.columns``) and the table root before anything is written.

        Raises:
            SchemaError: columns of the projection missing (all of them named), partition columns
                missing or of a non-partitionable type, a type with no
                Delta counterpart, or a clash with the existing table's schema or partitioning
                (new columns only with ``merge_schema``).
            ConfigError: a local table root that cannot be created or written, bad S3 options.
            S3AccessDeniedError: S3 refused for lack of permission (names the IAM action and key).
            ServiceUnavailableError: the table's storage cannot be reached.

        Logs a WARNING when the table sets ``delta.setTransactionRetentionDuration``.
        """
        data_json = delta_schema_json(project_schema(schema, self.config.columns), self.config.partition_by)
        self._check_root()
        try:
            table = load_table(self.config)
        except Exception as e:
            denied = denied_in_message(e)
            if denied is not None:
                raise denied from e
            if isinstance(e, OSError):
                raise ServiceUnavailableError(f"cannot read Delta table {self.config.table_uri}: {e}") from e
            raise ServiceUnavailableError(
                f"cannot read Delta table {self.config.table_uri}: {str(e).splitlines()[0]}"
            ) from e
        if table is None:
            return
        partition_columns = list(table.metadata().partition_columns)
        if partition_columns != list(self.config.partition_by):
            raise SchemaError(
                f"Delta table {self.config.table_uri} is partitioned by {partition_columns}, "
                f"the sink by {list(self.config.partition_by)}"
            )
        new_columns(table.schema().to_json(), data_json, merge_schema=self.config.merge_schema)
        retention = table.metadata().configuration.get(TXN_RETENTION)
        if retention is not None:
            # not refused: the property may be set at any time later, and the committer decides
            # from the table's files and log without the txn; only an outage past the log's
            # retention too cannot be decided (DESIGN.md §7)
            log.warning(
                "the table sets %s=%r: a checkpoint re-committed after a stop longer than that is "
                "decided from the Delta log, and fails FATAL once its log entries are cleaned up too "
                "(delta.logRetentionDuration); unset it to keep the txn",
                TXN_RETENTION,
                retention,
                extra={"sink": self.name, "table": self.config.table_uri},
            )

    # --- executor side -----------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> DeltaTransaction:
        """Open a transaction; files are created lazily when rows arrive.

        Raises:
            ConfigError: S3 options pyarrow cannot use.
        """
        return DeltaTransaction(ctx, DeltaFileWriter(self.config, ctx, self._location()))

    def write(self, txn: DeltaTransaction, batch: pa.RecordBatch) -> None:
        """Append an Arrow batch, only ``config.columns`` of it (see
        :class:`~twophase.connectors.delta.internal.writer.DeltaFileWriter` for errors)."""
        if txn.state != "open":
            raise IllegalTransitionError("delta transaction", txn.state, "write")
        txn.writer.write(batch)

    def pre_commit(self, txn: DeltaTransaction) -> DeltaCommittable | None:
        """Close all data files; return their Add actions, or ``None`` if no row was written."""
        txn.transition("pre_commit", "pre_committed")
        adds = txn.writer.finish()
        if not adds:
            return None
        assert txn.writer.schema_json is not None
        ctx = txn.ctx
        committable = DeltaCommittable(
            table_uri=self.config.table_uri,
            app_id=naming.app_id(ctx.job_id, ctx.sink_name),
            checkpoint_id=ctx.checkpoint_id,
            partition=ctx.partition,
            attempt=ctx.attempt,
            num_partitions=ctx.num_partitions,
            schema_json=txn.writer.schema_json,
            partition_columns=self.config.partition_by,
            adds=tuple(adds),
        )
        log_event(log, logging.INFO, "pre-committed", files=len(adds), rows=committable.num_records)
        return committable

    def abort_open(self, txn: DeltaTransaction) -> None:
        """Delete the files of a transaction never pre-committed. Best effort."""
        if txn.state == "open":
            txn.state = "aborted"
            txn.writer.abort()

    # --- driver side -------------------------------------------------------------------------

    def commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[DeltaCommittable]
    ) -> CommitOutcome:
        """Commit every committable of this sink for ``checkpoint_id`` as ONE Delta commit.

        Idempotent (``ALREADY_COMMITTED`` when the table's ``txn`` version for the appId is ≥
        ``checkpoint_id``, or, the txn expired, the table's files or log show the commit), so it
        also serves recovery. Call it per completed checkpoint in
        increasing checkpoint order with all the checkpoint's committables of this sink. See
        :meth:`twophase.connectors.delta.internal.committer.DeltaCommitter.commit_checkpoint` for
        the outcomes.
        """
        if self._committer is None:
            self._committer = DeltaCommitter(self.config, self.name)
        return self._committer.commit_checkpoint(checkpoint_id, committables)

    def recover_and_commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[DeltaCommittable]
    ) -> CommitOutcome:
        """After a restore: the same as :meth:`commit_checkpoint` (which is idempotent)."""
        return self.commit_checkpoint(checkpoint_id, committables)

    def commit(self, committable: DeltaCommittable) -> CommitOutcome:
        """Commit one committable: only valid when its epoch ran with one partition.

        Returns ``FATAL`` (and logs why) for multi-partition epochs: use :meth:`commit_checkpoint`.
        """
        if committable.num_partitions == 1:
            return self.commit_checkpoint(committable.checkpoint_id, [committable])
        log.error(
            "DeltaSink.commit called per committable for a %d-partition epoch; Delta needs one commit "
            "per checkpoint: the runtime must call commit_checkpoint(checkpoint_id, committables)",
            committable.num_partitions,
            extra={"sink": self.name, "checkpoint": committable.checkpoint_id},
        )
        return CommitOutcome.FATAL

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        """The highest checkpoint committed for appId ``<job>:<sink>``: the table's ``txn``
        version, or, when the table holds none (a new job, or the txn expired after
        ``delta.setTransactionRetentionDuration``), the checkpoint of the newest commit of ours
        the log still holds (commitInfo ``twophase.checkpoint``; the committer decides from the
        same log, so the id floor never falls below a checkpoint it answers ALREADY_COMMITTED
        for). ``None`` if the table does not exist or neither records a commit of ours.

        Raises:
            DeltaError, OSError: the table cannot be read.
        """
        table = load_table(self.config)
        if table is None:
            return None
        app_id = naming.app_id(job_id, self.name)
        version = table.transaction_version(app_id)
        if version is not None:
            return int(version)
        newest = OwnCommits(table, app_id).newest()
        return None if newest is None else newest.checkpoint_id

    def measure(self, committable: DeltaCommittable) -> CommittableSize:
        """Records and bytes of the committable's data files."""
        return CommittableSize(committable.num_records, sum(a.size for a in committable.adds))

    def abort(self, committable: DeltaCommittable) -> None:
        """Delete the committable's files unless a commit references them. Idempotent."""
        self.abort_batch([committable])

    def abort_batch(self, committables: Sequence[DeltaCommittable]) -> None:
        """Delete the committables' files unless a commit references them, reading the table's
        log once for all of them (per ``txn.appId``) and deleting in S3's batches of 1,000 keys.
        Idempotent.

        Raises:
            OSError, S3AccessDeniedError, botocore errors: as the table root's deletes raise.
        """
        location = self._location()
        table = load_table(self.config)
        by_app: dict[str, list[DeltaCommittable]] = {}
        for c in committables:
            by_app.setdefault(c.app_id, []).append(c)
        for app_id, group in by_app.items():
            index = ReferenceIndex(location, table, app_id)
            candidates = [(naming.decode_add_path(a.path), c.checkpoint_id) for c in group for a in c.adds]
            checkpoints = sorted({c.checkpoint_id for c in group})
            deleted = delete_unreferenced(
                location, index, candidates, {"sink": self.name, "checkpoints": checkpoints}
            )
            log_event(log, logging.INFO, "aborted", files=deleted, transactions=len(group))

    def abort_lingering(self, scope: LingeringScope[DeltaCommittable]) -> int:
        """Delete this job's and sink's data files of checkpoints ≤ ``scope.up_to_checkpoint``
        that neither ``scope.held`` nor any commit references; return how many were deleted.

        Files are recognised by the job/sink token in their names (``naming``); other writers'
        files never match. See :mod:`twophase.connectors.delta.internal.lingering` for how
        "referenced" is decided. Listing the table costs in proportion to it, so a routine cleanup
        (``scope.routine``) lists only when :class:`~twophase.sinks.internal.sweep.SweepSchedule`
        says so, and returns 0 otherwise: the files it leaves are referenced by no commit, so no
        reader sees them, and the next cleanup that lists deletes them.
        """
        if scope.routine and not self._sweep.due():
            return 0
        location = self._location()
        token = naming.job_token(scope.job_id, scope.sink_name)
        ours = own_files(location, token)
        self._sweep.listed(len(ours))  # our files are the bulk of the listing
        self._removed.keep_only(rel for rel, _ in ours)
        up_to = scope.up_to_checkpoint
        in_scope = [(rel, parsed.checkpoint_id) for rel, parsed in ours if parsed.checkpoint_id <= up_to]
        if not in_scope:  # what is held is read only when a file could go (issue #42: it decodes)
            return 0
        held = {naming.decode_add_path(a.path) for c in scope.held for a in c.adds}
        candidates = [(rel, checkpoint_id) for rel, checkpoint_id in in_scope if rel not in held]
        if not candidates:
            return 0
        app = naming.app_id(scope.job_id, scope.sink_name)
        index = ReferenceIndex(location, load_table(self.config), app, self._removed)
        fields: dict[str, object] = {"job": scope.job_id, "sink": scope.sink_name}
        deleted = delete_unreferenced(location, index, candidates, fields)
        log_event(log, logging.INFO, "aborted lingering", files=deleted)
        return deleted

    # --- helpers -----------------------------------------------------------------------------

    def _location(self) -> TableLocation:
        try:
            return open_location(self.config)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"Delta sink {self.name!r}: unusable storage options: {e}") from e

    def _check_root(self) -> None:
        location = self._location()
        if location.is_local:
            try:
                os.makedirs(location.root, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"Delta table root {location.root} cannot be created: {e}") from e
            if not os.access(location.root, os.W_OK | os.X_OK):
                raise ConfigError(f"Delta table root {location.root} is not writable")
            return
        bucket = location.root.split("/", 1)[0]
        store = "Azure container" if self.config.is_azure else "S3 bucket"
        try:
            info = location.fs.get_file_info(bucket)
        except OSError as e:
            denied = denied_in_message(e)
            if denied is not None:
                raise denied from e
            raise ServiceUnavailableError(f"cannot reach {store} {bucket!r}: {e}") from e
        if info.type.name == "NotFound":
            raise ConfigError(f"{store} {bucket!r} of {self.config.table_uri} does not exist")
