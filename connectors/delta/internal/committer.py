"""Driver side of the Delta sink: ONE Delta commit per checkpoint, idempotent through ``txn``.

All subtasks' Add actions of checkpoint ``c`` go into a single commit together with
``txn(appId="<job-id>:<sink>", version=c, lastUpdated=now)`` (Delta PROTOCOL.md, "Transaction
Identifiers": a writer records the latest version it committed per appId, and readers of the log
find it in the snapshot). Every attempt first brings the table to its latest version and returns
``ALREADY_COMMITTED`` if ``txn`` version ≥ ``c`` (delta-rs does not check this itself); a txn
version below ``c`` means ``c`` was never committed. The txn alone is not enough (issue #43): a
table with ``delta.setTransactionRetentionDuration`` drops it once ``lastUpdated`` is older, so a
driver down longer than that finds none. Then the table's own evidence decides
(:meth:`DeltaCommitter._committed_without_txn`): the checkpoint's files in the snapshot, or the
newest commit of ours in the log since they were written (``lingering.OwnCommits``) carrying a
checkpoint ≥ ``c``. When the log no longer reaches back that far (``delta.logRetentionDuration``)
the outcome is ``FATAL``, by name, never a second commit. The
committer keeps the table it loaded and reads only newer log entries at the next attempt: loading
it whole made each commit cost as much as the table's file count (the soak, issue #29). A
concurrent commit makes delta-rs fail with ``CommitFailedError`` (its own retries are off, so every
retry goes through this re-check); tenacity then reloads and tries again, up to
``commit_attempts`` times. The committer writes the table's log checkpoints itself, every
``delta.checkpointInterval`` versions (delta-spark's default of 10 when the table sets none, where
delta-rs would take 100): each commit's snapshot update reads every JSON commit since the newest log
checkpoint, and one commit a checkpoint with an Add per subtask made that a climb of 2 ms a commit
(the soak, issue #44); it cleans expired log entries only after them, where delta-rs's hook would
list the whole log after every commit. A log checkpoint that fails leaves the commit committed: it
only saves readers the replay.

Commits must happen in checkpoint order (the coordinator commits every pending checkpoint ≤ c in
order, DESIGN.md §5): once ``c`` is committed, an older checkpoint counts as committed too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import tenacity
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError, SchemaMismatchError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from twophase.connectors.delta.config import DeltaSinkConfig, checkpoint_interval
from twophase.connectors.delta.internal import naming
from twophase.connectors.delta.internal.committable import DeltaCommittable
from twophase.connectors.delta.internal.filesystem import open_location
from twophase.connectors.delta.internal.lingering import (
    META_APP_ID,
    META_CHECKPOINT,
    OwnCommits,
    load_table,
    snapshot_paths,
)
from twophase.connectors.delta.internal.schema import fields_for, new_columns
from twophase.sinks.errors import SchemaError
from twophase.sinks.internal.s3_access import denied_in_message
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)

_NO_HOOK_CHECKPOINT_OR_CLEANUP = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""delta-rs's post-commit hook without its own log checkpoint and without its log cleanup
(:meth:`DeltaCommitter._checkpoint_log` does both at this sink's interval): left on, the cleanup
lists the whole ``_delta_log`` after every commit, a cost that grows with the log for the 30 days
of ``delta.logRetentionDuration`` (the soak, issue #44: 5 → 13 ms a commit on a local disk over 900
commits, the commit's growth on MinIO); delta-spark cleans up only after a log checkpoint."""


class _Conflict(Exception):
    """A concurrent writer won the race; reload and re-check."""


class _Lost(Exception):
    """A data file to be added is gone or has another size."""


class _Undecidable(Exception):
    """Neither the txn nor the log can tell whether the checkpoint was committed."""


class DeltaCommitter:
    """Commits checkpoints of one Delta sink, on the driver; keeps the table it loaded (module
    docstring). Thread-safe: one commit at a time.

    Args:
        config: the sink's configuration.
        sink_name: for log fields only.
    """

    def __init__(self, config: DeltaSinkConfig, sink_name: str) -> None:
        self._config = config
        self._sink_name = sink_name
        self._table: DeltaTable | None = None
        self._lock = threading.Lock()

    def _latest(self) -> DeltaTable | None:
        """The table at its latest version (``None`` if there is none yet): the kept one brought
        up to date, else loaded."""
        if self._table is not None:
            self._table.update_incremental()
        else:
            self._table = load_table(self._config)
        return self._table

    def commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[DeltaCommittable]
    ) -> CommitOutcome:
        """Commit all ``committables`` of checkpoint ``checkpoint_id`` as one Delta commit.

        Args:
            checkpoint_id: the checkpoint; every committable must carry it.
            committables: every subtask's committable of this sink for the checkpoint (at most
                one per partition). Empty: nothing to commit, ``COMMITTED``.

        Returns:
            ``COMMITTED``; ``ALREADY_COMMITTED`` if the table's ``txn`` version for the appId is
            ≥ ``checkpoint_id``, or, with no txn, the table shows the commit (module docstring);
            ``LOST`` if a data file is missing or truncated; ``RETRY`` after ``commit_attempts``
            conflicts or a storage failure; ``FATAL`` for inconsistent committables, a schema
            mismatch with the table, a checkpoint the table can no longer tell committed or not
            (the txn expired and the log was cleaned), or an unknown error. Never raises.
        """
        fields: dict[str, object] = {"sink": self._sink_name, "checkpoint": checkpoint_id}
        if not committables:
            log.info("nothing to commit", extra=fields)
            return CommitOutcome.COMMITTED
        problem = self._inconsistency(checkpoint_id, committables)
        if problem is not None:
            log.error("refusing to commit: %s", problem, extra=fields)
            return CommitOutcome.FATAL
        fields["job_app_id"] = committables[0].app_id
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Conflict),
            stop=tenacity.stop_after_attempt(self._config.commit_attempts),
            wait=tenacity.wait_random_exponential(
                multiplier=0.05, max=self._config.commit_backoff_max_ms / 1000
            ),
            before_sleep=lambda rs: log_event(
                log, logging.INFO, "commit conflict, reloading", attempt=rs.attempt_number
            ),
            reraise=True,
        )
        try:
            with self._lock:
                outcome: CommitOutcome = retrying(self._attempt, checkpoint_id, committables)
        except _Conflict:
            log.warning("still conflicting after %d attempts", self._config.commit_attempts, extra=fields)
            return CommitOutcome.RETRY
        except _Lost as e:
            log.error("data file lost: %s", e, extra=fields)
            return CommitOutcome.LOST
        except _Undecidable as e:
            log.error("%s", e, extra=fields)
            return CommitOutcome.FATAL
        except (SchemaError, SchemaMismatchError, DeltaProtocolError) as e:
            log.error("cannot commit: %s", e, extra=fields)
            return CommitOutcome.FATAL
        except (DeltaError, OSError) as e:
            denied = denied_in_message(e)
            if denied is not None:  # retrying cannot help
                log.error("cannot commit: %s", denied, extra=fields)
                return CommitOutcome.FATAL
            log.warning("commit failed, transient: %s", str(e).splitlines()[0], extra=fields)
            return CommitOutcome.RETRY
        except Exception:
            log.exception("commit failed", extra=fields)
            return CommitOutcome.FATAL
        rows = sum(c.num_records for c in committables)
        files = sum(len(c.adds) for c in committables)
        log.info("outcome=%s files=%d rows=%d", outcome.value, files, rows, extra=fields)
        return outcome

    # --- internals ---------------------------------------------------------------------------

    def _inconsistency(self, checkpoint_id: int, committables: Sequence[DeltaCommittable]) -> str | None:
        first = committables[0]
        partitions = [c.partition for c in committables]
        if len(set(partitions)) != len(partitions):
            return f"two committables for one partition: {sorted(partitions)}"
        for c in committables:
            if c.checkpoint_id != checkpoint_id:
                return f"committable of checkpoint {c.checkpoint_id} in checkpoint {checkpoint_id}"
            if c.table_uri != self._config.table_uri:
                return f"committable for table {c.table_uri!r}, sink writes {self._config.table_uri!r}"
            if c.app_id != first.app_id:
                return f"committables of two appIds: {first.app_id!r}, {c.app_id!r}"
            if c.schema_json != first.schema_json:
                return "subtasks wrote different schemas"
            if c.partition_columns != self._config.partition_by:
                return (
                    f"partition columns {c.partition_columns} differ from config {self._config.partition_by}"
                )
            if not c.adds:
                return f"committable of partition {c.partition} has no files"
        return None

    def _attempt(self, checkpoint_id: int, committables: Sequence[DeltaCommittable]) -> CommitOutcome:
        try:
            return self._attempt_on_latest(checkpoint_id, committables)
        except BaseException:
            self._table = None  # whatever failed, the next attempt loads the table afresh
            raise

    def _attempt_on_latest(
        self, checkpoint_id: int, committables: Sequence[DeltaCommittable]
    ) -> CommitOutcome:
        first = committables[0]
        table = self._latest()
        if table is not None:
            version = table.transaction_version(first.app_id)
            if version is not None and version >= checkpoint_id:
                return CommitOutcome.ALREADY_COMMITTED
            if version is None and self._committed_without_txn(table, checkpoint_id, committables):
                return CommitOutcome.ALREADY_COMMITTED
        self._check_files(committables)
        adds = [
            AddAction(
                naming.decode_add_path(a.path),  # delta-rs URI-encodes the path itself
                a.size,
                a.partition_values_dict,
                a.modification_time,
                True,
                a.stats,
            )
            for c in committables
            for a in c.adds
        ]
        now_ms = int(time.time() * 1000)
        properties = CommitProperties(
            custom_metadata={META_APP_ID: first.app_id, META_CHECKPOINT: checkpoint_id},
            max_commit_retries=0,
            app_transactions=[Transaction(first.app_id, checkpoint_id, now_ms)],
        )
        try:
            if table is None:
                create_table_with_add_actions(
                    self._config.table_uri,
                    Schema.from_json(first.schema_json),
                    adds,
                    mode="error",
                    partition_by=list(self._config.partition_by),
                    name=self._config.table_name,
                    configuration=dict(self._config.table_configuration) or None,
                    storage_options=self._config.delta_storage_options(),
                    commit_properties=properties,
                )
            else:
                schema = self._table_schema(table, first.schema_json)
                read_version = table.version()
                actions: list[AddAction | RemoveAction] = list(adds)
                table.create_write_transaction(
                    actions,
                    "append",
                    schema,
                    partition_by=list(self._config.partition_by),
                    commit_properties=properties,
                    post_commithook_properties=_NO_HOOK_CHECKPOINT_OR_CLEANUP,
                )
        except CommitFailedError as e:
            raise _Conflict(str(e)) from e
        except DeltaError as e:
            if table is None and "already exists" in str(e).lower():
                raise _Conflict(str(e)) from e  # another committer created it first
            raise
        if table is not None:  # no retries inside delta-rs: the commit is the version after the one read
            self._checkpoint_log(table, read_version + 1, checkpoint_id)
        return CommitOutcome.COMMITTED

    def _checkpoint_log(self, table: DeltaTable, version: int, checkpoint_id: int) -> None:
        """After committing ``version``: a log checkpoint if ``version`` is a multiple of the
        table's interval (:func:`checkpoint_interval`), then the log entries older than
        ``delta.logRetentionDuration`` cleaned up unless ``delta.enableExpiredLogCleanup`` is
        ``false`` (what delta-rs's post-commit hook and delta-spark do with a checkpoint). Never
        raises: a failure is logged and the next multiple tries again."""
        fields: dict[str, object] = {"sink": self._sink_name, "checkpoint": checkpoint_id, "version": version}
        try:
            configuration = table.metadata().configuration
            if version % checkpoint_interval(configuration) != 0:
                return
            table.update_incremental()  # the kept table still reads the version before the commit
            table.create_checkpoint()
            if (configuration.get("delta.enableExpiredLogCleanup") or "true").lower() != "false":
                table.cleanup_metadata()
        except (DeltaError, OSError) as e:
            self._table = None  # its state is unknown: the next commit loads the table afresh
            log.warning(
                "log checkpoint not written, the commit stands: %s", str(e).splitlines()[0], extra=fields
            )
            return
        log.info("log checkpoint written at version %d", table.version(), extra=fields)

    def _committed_without_txn(
        self, table: DeltaTable, checkpoint_id: int, committables: Sequence[DeltaCommittable]
    ) -> bool:
        """Whether checkpoint ``checkpoint_id`` was committed, for a table holding no txn of the
        appId: a new job, or a txn expired after ``delta.setTransactionRetentionDuration``.

        Only the one commit of the checkpoint adds its files (their names are unique), and
        commits of ours come in checkpoint order and after the files were written. So: one of
        the files in the snapshot → committed; else the newest commit of ours since the files
        were written decides (checkpoint ≥ ``checkpoint_id`` → committed, lower → not); none
        there while the log reaches back before them → not committed.

        Raises:
            _Undecidable: the log no longer reaches back to the files' time and holds no commit
                of ours after it (entries cleaned after ``delta.logRetentionDuration``).
        """
        app_id = committables[0].app_id
        paths = {naming.decode_add_path(a.path) for c in committables for a in c.adds}
        fields: dict[str, object] = {
            "sink": self._sink_name,
            "checkpoint": checkpoint_id,
            "job_app_id": app_id,
        }
        if paths & snapshot_paths(table):
            log.warning(
                "no txn for the appId (expired: delta.setTransactionRetentionDuration); "
                "the checkpoint's files are in the table: already committed",
                extra=fields,
            )
            return True
        written_ms = min(a.modification_time for c in committables for a in c.adds)
        newest, certain = OwnCommits(table, app_id).newest_since(written_ms)
        if newest is not None:
            committed = newest.checkpoint_id >= checkpoint_id
            log.warning(
                "no txn for the appId (expired: delta.setTransactionRetentionDuration); the log's "
                "newest commit of ours is checkpoint %d (version %d): %s",
                newest.checkpoint_id,
                newest.version,
                "already committed" if committed else "not committed yet",
                extra=fields,
            )
            return committed
        if certain:
            return False  # no commit of ours since the files were written: a new job, or c's first try
        config = table.metadata().configuration
        raise _Undecidable(
            f"cannot tell whether checkpoint {checkpoint_id} was committed, so it is not committed "
            f"again: the table holds no txn for appId {app_id!r} (expired after "
            f"delta.setTransactionRetentionDuration="
            f"{config.get('delta.setTransactionRetentionDuration')!r}) and its log no longer reaches "
            f"back to the checkpoint's files (entries older than delta.logRetentionDuration="
            f"{config.get('delta.logRetentionDuration')!r} were cleaned up) and the snapshot no longer "
            f"holds its files (OPTIMIZE or a DELETE removed them); check the table for the "
            f"checkpoint's rows before going on, "
            f"and unset delta.setTransactionRetentionDuration (or keep it and "
            f"delta.logRetentionDuration longer than a job may stay stopped)"
        )

    def _table_schema(self, table: DeltaTable, data_schema_json: str) -> Schema:
        """Check the data against the table; add new columns first if ``merge_schema`` allows."""
        if list(table.metadata().partition_columns) != list(self._config.partition_by):
            raise SchemaError(
                f"table is partitioned by {table.metadata().partition_columns}, "
                f"sink by {list(self._config.partition_by)}"
            )
        table_json = table.schema().to_json()
        added = new_columns(table_json, data_schema_json, merge_schema=self._config.merge_schema)
        if added:
            # A metadata-only commit; adding nullable columns is idempotent in effect (a retry
            # sees them and adds nothing), and files without them read back as null.
            table.alter.add_columns(list(fields_for(data_schema_json, added).fields))
            table = load_table(self._config) or table
            log.info("added columns %s", added, extra={"sink": self._sink_name})
        return table.schema()

    def _check_files(self, committables: Sequence[DeltaCommittable]) -> None:
        location = open_location(self._config)
        rels = [naming.decode_add_path(a.path) for c in committables for a in c.adds]
        sizes = {naming.decode_add_path(a.path): a.size for c in committables for a in c.adds}
        for info in location.fs.get_file_info([location.path(r) for r in rels]):
            rel = location.relative(info.path)
            if info.size is None or info.size != sizes[rel]:
                raise _Lost(f"{rel}: expected {sizes[rel]} bytes, found {info.size}")
