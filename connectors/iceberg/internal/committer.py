"""Driver side of the Iceberg sink: ONE append snapshot per checkpoint, idempotent through the table's
own metadata.

All subtasks' data files of checkpoint ``c`` go into one fast append. The same table commit (one
metadata swap: the Iceberg table spec's atomic pointer swap carries every update of a commit)
sets the table property ``twophase.committed-checkpoint.<token>`` = ``c``
(:func:`checkpoint_property`; ``token`` is the job's and sink's 12-hex-digit token of
:func:`~twophase.connectors.iceberg.internal.naming.job_token`, also its data prefix), and the
snapshot summary records ``twophase.job-id``, ``twophase.sink`` and ``twophase.checkpoint-id = c``
(the summary is a free string map; Flink's Iceberg sink keeps its
``flink.max-committed-checkpoint-id`` there). Every attempt first reloads the table and decides
from that evidence, the property first (checkpoints commit in order, DESIGN.md §5, so a property
``>= c`` means ``ALREADY_COMMITTED``).

Why a property (issue #43): snapshots expire (``expire_snapshots``, Spark's
``expire_snapshots`` procedure, ``history.expire.*``), and with them their summaries; a table
property lives in the table metadata, which every commit carries forward and no maintenance
operation of the spec removes. Without the property (a table last committed by a release before
#43, or the property removed by hand) the committer falls back to the summaries in the current
snapshot's ancestry AND to the data file paths the table's snapshots still reference (paths are
unique per job, sink, checkpoint and attempt, :mod:`~twophase.connectors.iceberg.internal.naming`,
and only this committer adds them), and says so at WARNING. Past that fallback, nothing is left to
decide from: a compaction that rewrote the checkpoint's files followed by the expiry of every
snapshot referencing them, on a table without the property, lets the re-commit append them again.

The catalog commits with optimistic concurrency (Iceberg table spec, "Commit Conflict
Resolution and Retry"): a concurrent writer's commit makes pyiceberg raise
``CommitFailedException``; tenacity then reloads, re-checks and tries again, up to
``commit_attempts`` times (``RETRY`` after that). A commit whose answer was lost (an error after
the catalog may have swapped the pointer: a REST catalog's ``CommitStateUnknownException``, the
SQL catalog's broken connection, SQLAlchemy's ``OperationalError``, a reset socket) answers
``RETRY``: the re-check of the next call finds it applied (``ALREADY_COMMITTED``) or commits it.

``LOST`` only on durable evidence: nothing records ``c`` (or later) and a data file of the
checkpoint is missing or has another size.
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
from twophase.connectors.iceberg.internal import naming
from twophase.connectors.iceberg.internal.catalog import (
    KeptCatalog,
    error_line,
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
PROPERTY_PREFIX = "twophase.committed-checkpoint."
"""Table property key prefix: ``<prefix><token>`` = the newest checkpoint id the job's sink
committed (decimal); see :func:`checkpoint_property`."""


class _Conflict(Exception):
    """Another writer committed first; reload and re-check."""


class _Lost(Exception):
    """A data file of the checkpoint is gone or has another size."""


def checkpoint_property(job_id: str, sink_name: str) -> str:
    """The table property recording the newest checkpoint ``job_id``/``sink_name`` committed:
    ``twophase.committed-checkpoint.<token>``, ``token`` being :func:`naming.job_token` (a hash,
    so that no two (job, sink) pairs share a key whatever characters their names hold).

    Raises:
        ValueError: an empty job id or sink name.
    """
    return PROPERTY_PREFIX + naming.job_token(job_id, sink_name)


def recorded_checkpoint(table: Table | None, job_id: str, sink_name: str) -> int | None:
    """The checkpoint id of :func:`checkpoint_property` in the table's metadata, or ``None`` (no
    table, or no property: never committed by this release).

    Raises:
        ConfigError: the property holds something other than a checkpoint id (edited by hand).
    """
    if table is None:
        return None
    key = checkpoint_property(job_id, sink_name)
    raw = table.metadata.properties.get(key)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise ConfigError(
            f"Iceberg table property {key}={raw!r} is not a checkpoint id: it records the newest "
            f"checkpoint job {job_id!r}, sink {sink_name!r} committed; set it back to that id"
        )
    return int(raw)


def summarized_checkpoint(table: Table | None, job_id: str, sink_name: str) -> int | None:
    """The checkpoint id recorded by the newest snapshot summary of ``job_id``/``sink_name`` in the
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


def referenced_checkpoint(table: Table, referenced: set[str], job_id: str, sink_name: str) -> int | None:
    """The newest checkpoint id among ``referenced`` data files under the job's and sink's data
    prefix (the id is in the file name, :mod:`naming`), or ``None``."""
    prefix = naming.job_data_prefix(table.location(), naming.job_token(job_id, sink_name)) + "/"
    ids = [
        parsed.checkpoint_id
        for path in referenced
        if path.startswith(prefix) and (parsed := naming.parse_data_file_path(path)) is not None
    ]
    return max(ids, default=None)


def last_committed(table: Table | None, job_id: str, sink_name: str) -> int | None:
    """The newest checkpoint id the table records as committed by ``job_id``/``sink_name``, or ``None``.

    The table property (:func:`recorded_checkpoint`) when present; otherwise (a table last
    committed by a release before #43, or the property removed) the newest of the snapshot
    summaries and of the checkpoint ids of the referenced data files, which reads every manifest
    the table holds and is logged at WARNING when it finds a commit of the job.

    Raises:
        ConfigError: a malformed property.
    """
    if table is None:
        return None
    recorded = recorded_checkpoint(table, job_id, sink_name)
    if recorded is not None:
        return recorded
    found = _fallback(table, job_id, sink_name, referenced_paths(table))
    if found is not None:
        _warn_fallback(job_id, sink_name, found, {"job": job_id, "sink": sink_name})
    return found


def _fallback(table: Table, job_id: str, sink_name: str, referenced: set[str]) -> int | None:
    found = [
        summarized_checkpoint(table, job_id, sink_name),
        referenced_checkpoint(table, referenced, job_id, sink_name),
    ]
    return max((c for c in found if c is not None), default=None)


def _warn_fallback(job_id: str, sink_name: str, found: int, fields: dict[str, Any]) -> None:
    log_event(
        log,
        logging.WARNING,
        "no committed-checkpoint property: deciding from snapshot summaries and data file paths",
        property=checkpoint_property(job_id, sink_name),
        found=found,
        why="a table last committed by an earlier twophase release, or the property was removed",
        limit="a compaction plus snapshot expiry before the next commit would hide a committed checkpoint",
        **fields,
    )


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
    """Commits checkpoints of one Iceberg sink. Holds no clients of its own; safe to build in any
    process.

    Args:
        config: the sink's configuration.
        sink_name: the sink's name (summary field and log field).
        catalog: the sink's catalog (the driver's, kept between commits).
    """

    def __init__(self, config: IcebergSinkConfig, sink_name: str, catalog: KeptCatalog) -> None:
        self._config = config
        self._sink_name = sink_name
        self._catalog = catalog

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
        with self._catalog.use() as catalog:
            table = require_table(catalog, self._config)
            if self._already_committed(table, checkpoint_id, committables):
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
            # in the same metadata swap as the append: the evidence no snapshot expiry removes
            record = {checkpoint_property(first.job_id, first.sink_name): str(checkpoint_id)}
            transaction.set_properties(record)
            with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for data_file in data_files:
                    append.append_data_file(data_file)
            try:
                transaction.commit_transaction()
            except CommitFailedException as e:
                raise _Conflict(str(e)) from e
        return CommitOutcome.COMMITTED

    def _already_committed(
        self, table: Table, checkpoint_id: int, committables: Sequence[IcebergCommittable]
    ) -> bool:
        """Whether the table records ``checkpoint_id`` (or later) as committed: the property; without
        it, the summaries, the data files the table references (the checkpoint's own, or a later
        checkpoint's of this job and sink)."""
        first = committables[0]
        recorded = recorded_checkpoint(table, first.job_id, first.sink_name)
        if recorded is not None:
            return recorded >= checkpoint_id
        referenced = referenced_paths(table)
        found = _fallback(table, first.job_id, first.sink_name, referenced)
        if any(f.path in referenced for c in committables for f in c.files):
            found = max(found or 0, checkpoint_id)  # the table's location may have moved since
        if found is None:
            return False  # the job's first commit to this table (or nothing of it is left)
        _warn_fallback(
            first.job_id, first.sink_name, found, {"sink": self._sink_name, "checkpoint": checkpoint_id}
        )
        return found >= checkpoint_id

    def _check_files(self, table: Table, committables: Sequence[IcebergCommittable]) -> None:
        for c in committables:
            for f in c.files:
                source = table.io.new_input(f.path)
                if not source.exists():
                    raise _Lost(f"{f.path}: missing (expected {f.size} bytes)")
                size = len(source)
                if size != f.size:
                    raise _Lost(f"{f.path}: expected {f.size} bytes, found {size}")
