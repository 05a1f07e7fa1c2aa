"""Driver side of the Iceberg sink: ONE append snapshot per checkpoint, idempotent through its summary.

All subtasks' data files of checkpoint ``c`` go into one fast append whose snapshot summary
records ``twophase.job-id``, ``twophase.sink`` and ``twophase.checkpoint-id = c`` (the Iceberg
table spec's snapshot ``summary`` is a free string map; Flink's Iceberg sink keeps its
``flink.max-committed-checkpoint-id`` there for the same purpose). Every attempt first reloads the
table and walks the current snapshot's ancestry (newest first) to the newest snapshot of this job
and sink: if it records ``c`` or later, the outcome is ``ALREADY_COMMITTED`` (checkpoints commit
in order, DESIGN.md §5, so a later one implies ``c``).

The catalog commits with optimistic concurrency (Iceberg table spec, "Commit Conflict
Resolution and Retry"): a concurrent writer's commit makes pyiceberg raise
``CommitFailedException``; tenacity then reloads, re-checks the summaries and tries again, up to
``commit_attempts`` times (``RETRY`` after that). A commit whose answer was lost (an error after
the catalog may have swapped the pointer: a REST catalog's ``CommitStateUnknownException``, the
SQL catalog's broken connection, SQLAlchemy's ``OperationalError``, a reset socket) answers
``RETRY``: the re-check of the next call finds it applied (``ALREADY_COMMITTED``) or commits it.

``LOST`` only on durable evidence: no snapshot of the job records ``c`` (or later) and a data
file of the checkpoint is missing or has another size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import tenacity
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import ancestors_of
from sqlalchemy.exc import OperationalError

from twophase.connectors.iceberg.config import IcebergSinkConfig
from twophase.connectors.iceberg.internal.catalog import (
    CatalogFactory,
    error_line,
    open_catalog,
    require_table,
)
from twophase.connectors.iceberg.internal.committable import IcebergCommittable, to_data_file
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)

SUMMARY_JOB_ID = "twophase.job-id"
"""Snapshot summary key: the job whose checkpoint the snapshot commits."""
SUMMARY_SINK = "twophase.sink"
"""Snapshot summary key: the sink (several sinks of one job may write one table)."""
SUMMARY_CHECKPOINT_ID = "twophase.checkpoint-id"
"""Snapshot summary key: the checkpoint id the snapshot commits (decimal)."""


class _Conflict(Exception):
    """Another writer committed first; reload and re-check."""


class _Lost(Exception):
    """A data file of the checkpoint is gone or has another size."""


def last_committed(table: Table | None, job_id: str, sink_name: str) -> int | None:
    """The checkpoint id recorded by the newest snapshot of ``job_id``/``sink_name`` in the
    current snapshot's ancestry, or ``None`` (no table, no snapshot of the job, or expired)."""
    if table is None:
        return None
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None:
            continue
        if summary.get(SUMMARY_JOB_ID) == job_id and summary.get(SUMMARY_SINK) == sink_name:
            raw = summary.get(SUMMARY_CHECKPOINT_ID)
            if raw is not None and raw.isdigit():
                return int(raw)
    return None


def referenced_paths(table: Table | None) -> set[str]:
    """Every data file path referenced by any snapshot the table still holds (all branches,
    tags and older snapshots: never delete a file a time-travel read could need)."""
    if table is None:
        return set()
    paths: set[str] = set()
    manifests_seen: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in manifests_seen:
                continue
            manifests_seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    return paths


def _without_own_retries(table: Table) -> Table:
    """``table`` whose local copy of the properties sets ``commit.retry.num-retries`` to 0.

    pyiceberg 0.12's ``Transaction.commit_transaction`` retries a ``CommitFailedException`` itself
    (4 times by default), rebasing the append onto the new table state without looking at the
    summaries of the snapshots that won: a concurrent commit of the same checkpoint (a zombie
    driver) would then be appended twice. Every retry goes through :class:`IcebergCommitter`'s
    re-check instead. Only the local copy changes: the catalog applies the commit's updates to
    the table metadata it holds, so the table's own properties stay as they are.
    """
    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    metadata = table.metadata.model_copy(update={"properties": properties})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog, table.config)


class IcebergCommitter:
    """Commits checkpoints of one Iceberg sink. Holds no clients; safe to build in any process.

    Args:
        config: the sink's configuration.
        sink_name: the sink's name (summary field and log field).
        catalog_factory: opens the catalog (``None``: from ``config``; see :class:`IcebergSink`).
    """

    def __init__(
        self, config: IcebergSinkConfig, sink_name: str, catalog_factory: CatalogFactory | None = None
    ) -> None:
        self._config = config
        self._sink_name = sink_name
        self._catalog_factory = catalog_factory

    def commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[IcebergCommittable]
    ) -> CommitOutcome:
        """Commit all ``committables`` of ``checkpoint_id`` as one append snapshot.

        Returns:
            ``COMMITTED``; ``ALREADY_COMMITTED`` if a snapshot of this job and sink records
            ``checkpoint_id`` or later; ``LOST`` if a data file is missing or truncated (and no
            snapshot records the checkpoint); ``RETRY`` after ``commit_attempts`` conflicts, an
            unreachable catalog or storage, or a commit of unknown outcome; ``FATAL`` for
            inconsistent committables, a table that is not the one written to (dropped and
            re-created), a partition spec changed since the write, or an unknown error. Never raises.
        """
        fields: dict[str, Any] = {"sink": self._sink_name, "checkpoint": checkpoint_id}
        if not committables:
            return CommitOutcome.COMMITTED
        problem = self._inconsistency(checkpoint_id, committables)
        if problem is not None:
            log_event(log, logging.ERROR, "refusing to commit", problem=problem, **fields)
            return CommitOutcome.FATAL
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Conflict),
            stop=tenacity.stop_after_attempt(self._config.commit_attempts),
            wait=tenacity.wait_random_exponential(
                multiplier=0.05, max=self._config.commit_backoff_max_ms / 1000
            ),
            before_sleep=lambda rs: log_event(
                log, logging.INFO, "commit conflict, reloading", attempt=rs.attempt_number, **fields
            ),
            reraise=True,
        )
        try:
            outcome: CommitOutcome = retrying(self._attempt, checkpoint_id, committables)
        except _Conflict:
            log_event(
                log, logging.WARNING, "still conflicting", attempts=self._config.commit_attempts, **fields
            )
            return CommitOutcome.RETRY
        except _Lost as e:
            log_event(log, logging.ERROR, "data file lost", problem=str(e), **fields)
            return CommitOutcome.LOST
        except ConfigError as e:
            log_event(log, logging.ERROR, "cannot commit", problem=self._config.redact(str(e)), **fields)
            return CommitOutcome.FATAL
        except (CommitStateUnknownException, OperationalError) as e:
            # the catalog may have applied it: the next attempt's re-check tells (never FATAL,
            # which would fail the job, or a restore, for a transient fault)
            log_event(
                log, logging.WARNING, "commit outcome unknown", problem=error_line(self._config, e), **fields
            )
            return CommitOutcome.RETRY
        except (ServiceUnavailableError, OSError) as e:
            log_event(
                log,
                logging.WARNING,
                "commit failed, transient",
                problem=error_line(self._config, e),
                **fields,
            )
            return CommitOutcome.RETRY
        except Exception as e:
            log_event(
                log,
                logging.ERROR,
                "commit failed",
                problem=error_line(self._config, e),
                error=type(e).__name__,
                **fields,
            )
            return CommitOutcome.FATAL
        log_event(
            log,
            logging.INFO,
            "checkpoint committed",
            outcome=outcome.value,
            files=sum(len(c.files) for c in committables),
            rows=sum(c.num_records for c in committables),
            **fields,
        )
        return outcome

    # --- internals ---------------------------------------------------------------------------

    def _inconsistency(self, checkpoint_id: int, committables: Sequence[IcebergCommittable]) -> str | None:
        first = committables[0]
        partitions = [c.partition for c in committables]
        if len(set(partitions)) != len(partitions):
            return f"two committables for one partition: {sorted(partitions)}"
        for c in committables:
            if c.checkpoint_id != checkpoint_id:
                return f"committable of checkpoint {c.checkpoint_id} in checkpoint {checkpoint_id}"
            if c.table != self._config.table:
                return f"committable for table {c.table!r}, sink writes {self._config.table!r}"
            if (c.job_id, c.sink_name, c.table_uuid) != (first.job_id, first.sink_name, first.table_uuid):
                return "committables of two jobs, sinks or tables"
            if c.sink_name != self._sink_name:
                return f"committable of sink {c.sink_name!r} given to sink {self._sink_name!r}"
            if not c.files:
                return f"committable of partition {c.partition} has no files"
        return None

    def _attempt(self, checkpoint_id: int, committables: Sequence[IcebergCommittable]) -> CommitOutcome:
        first = committables[0]
        with open_catalog(self._config, self._catalog_factory) as catalog:
            table = require_table(catalog, self._config)
            done = last_committed(table, first.job_id, first.sink_name)
            if done is not None and done >= checkpoint_id:
                return CommitOutcome.ALREADY_COMMITTED
            if str(table.metadata.table_uuid) != first.table_uuid:
                raise ConfigError(
                    f"Iceberg table {self._config.table} is not the table the files were written to "
                    f"(uuid {table.metadata.table_uuid}, files for {first.table_uuid})"
                )
            self._check_files(table, committables)
            specs = table.specs()
            schemas = table.schemas()
            data_files = []
            for c in committables:
                schema = schemas.get(c.schema_id, table.schema())
                for f in c.files:
                    if f.spec_id != table.spec().spec_id or f.spec_id not in specs:
                        raise ConfigError(
                            f"partition spec {f.spec_id} of {f.path} is not the table's spec "
                            f"{table.spec().spec_id}"
                        )
                    data_files.append(to_data_file(f, specs[f.spec_id], schema, table.format_version))
            summary = {
                SUMMARY_JOB_ID: first.job_id,
                SUMMARY_SINK: first.sink_name,
                SUMMARY_CHECKPOINT_ID: str(checkpoint_id),
            }
            transaction = _without_own_retries(table).transaction()
            with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for data_file in data_files:
                    append.append_data_file(data_file)
            try:
                transaction.commit_transaction()
            except CommitFailedException as e:
                raise _Conflict(str(e)) from e
        return CommitOutcome.COMMITTED

    def _check_files(self, table: Table, committables: Sequence[IcebergCommittable]) -> None:
        for c in committables:
            for f in c.files:
                source = table.io.new_input(f.path)
                if not source.exists():
                    raise _Lost(f"{f.path}: missing (expected {f.size} bytes)")
                size = len(source)
                if size != f.size:
                    raise _Lost(f"{f.path}: expected {f.size} bytes, found {size}")
