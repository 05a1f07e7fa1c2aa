"""The Apache Iceberg two-phase-commit sink: Parquet files from tasks, one append snapshot per checkpoint.

Protocol (issue #28; the Delta sink's shape, DESIGN.md §7): each subtask writes Parquet data files
with pyarrow under the job's data prefix of the table's location and pre-commits their metadata
as an :class:`IcebergCommittable`. Iceberg needs ONE snapshot per checkpoint holding every
subtask's files, so the coordinator commits through :meth:`IcebergSink.commit_checkpoint`: one
fast append that, in the same table commit, sets the table property
``twophase.committed-checkpoint.<token>`` to the checkpoint id (snapshot expiry cannot remove it,
issue #43) and records the job, sink and checkpoint id in its snapshot summary, which makes the
commit idempotent (:mod:`twophase.connectors.iceberg.internal.committer`). Nothing is visible to readers
before that snapshot: Iceberg readers see only files a snapshot's manifests list. With
``write_path="spark"`` Iceberg's own Spark writer writes the same files in the JVM and hands them
back as the same committables (:mod:`~twophase.connectors.iceberg.internal.staged_write`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible
from pyiceberg.table import Table
from pyiceberg.transforms import parse_transform

from twophase.connectors.iceberg.config import IcebergSinkConfig
from twophase.connectors.iceberg.internal import naming, staged_write
from twophase.connectors.iceberg.internal.catalog import (
    CatalogFactory,
    KeptCatalog,
    load_table,
    open_catalog,
    require_table,
)
from twophase.connectors.iceberg.internal.committable import CODEC, IcebergCommittable
from twophase.connectors.iceberg.internal.committer import IcebergCommitter, last_committed, referenced_paths
from twophase.connectors.iceberg.internal.lingering import delete_files, delete_lingering, own_files
from twophase.connectors.iceberg.internal.writer import IcebergFileWriter, project, unsupported_transforms
from twophase.sinks.api import CheckpointCommitSink
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConfigError, IllegalTransitionError, SchemaError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.internal.sweep import SweepSchedule
from twophase.sinks.outcome import CommitOutcome, CommittableSize
from twophase.sinks.spark_staging import StagedTask, classic_jvm

log = logging.getLogger(__name__)


@dataclass
class IcebergTransaction:
    """One subtask's open transaction: its context, the table's identity and its file writer.

    ``state`` is ``"open"`` → ``"pre_committed"`` | ``"aborted"``; other transitions raise
    :class:`~twophase.sinks.errors.IllegalTransitionError`.
    """

    ctx: WriterContext
    table_uuid: str
    writer: IcebergFileWriter
    state: str = "open"

    def transition(self, action: str, to: str) -> None:
        """Move from ``open`` to ``to`` for ``action``, or raise IllegalTransitionError."""
        if self.state != "open":
            raise IllegalTransitionError("iceberg transaction", self.state, action)
        self.state = to


class IcebergSink(CheckpointCommitSink[IcebergTransaction, IcebergCommittable]):
    """Exactly-once Apache Iceberg sink (pyiceberg).

    Args:
        name: the sink's name, unique and stable within the job; recorded in snapshot summaries
            (``twophase.sink``) and hashed into the job's data prefix and committed-checkpoint
            table property.
        config: where and how to write (:class:`IcebergSinkConfig`).
        catalog_factory: opens the catalog for every operation (default ``None``: pyiceberg's
            ``load_catalog`` with the properties ``config`` gives); the model-based protocol test
            passes a model of the catalog and its object storage, as the PostgreSQL sink takes
            ``connector``. It is pickled to executors with the sink.

    Raises:
        ConfigError: an empty name.
    """

    codec = CODEC

    def __init__(
        self, name: str, config: IcebergSinkConfig, *, catalog_factory: CatalogFactory | None = None
    ) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError(f"Iceberg sink name must be a non-empty string, got {name!r}")
        self.name = name
        self.config = config
        self.catalog_factory = catalog_factory
        self._sweep = SweepSchedule()  # the driver's: when a routine lingering cleanup lists again
        self._catalog = KeptCatalog(config, catalog_factory)  # the driver's; pickled empty

    def __repr__(self) -> str:
        return f"IcebergSink(name={self.name!r}, config={self.config!r})"

    # --- driver side, before writing ---------------------------------------------------------

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the data's schema (projected to ``config.columns``) against the table before anything
        is written; create the table first when it is missing and ``create_table`` allows it.

        Raises:
            ConfigError: no such table (and ``create_table`` off); a partition spec the writer
                cannot honour (a transform without a pyarrow implementation) or that differs from
                ``partition_by``.
            SchemaError: a projected column is missing, or the data's schema does not match the
                table's (one line naming the columns).
            ServiceUnavailableError: the catalog cannot be reached.
        """
        data_schema = project(pa.RecordBatch.from_pylist([], schema=schema), self.config.columns).schema
        with self._catalog.use() as catalog:
            table = load_table(catalog, self.config)
            if table is None:
                if not self.config.create_table:
                    raise ConfigError(
                        f"Iceberg table {self.config.table} does not exist and create_table is off"
                    )
                table = self._create(catalog, data_schema)
            self._check_spec(table)
            _check_schema(self.config.table, table, data_schema)

    # --- Spark-staged epochs (config.write_path "spark") -------------------------------------

    def stages_with_spark(self) -> bool:
        """Whether Iceberg's Spark writer stages this sink's epochs (``config.write_path``)."""
        return self.config.write_path == "spark"

    def stage_with_spark(self, df: Any, job_id: str, checkpoint_id: int) -> dict[int, StagedTask]:
        """Write the epoch with Iceberg's own Spark writer, its data files under the job's data
        prefix and handed back uncommitted
        (:mod:`~twophase.connectors.iceberg.internal.staged_write`).

        Returns:
            Spark partition → its committable (attempt, data files, records); a partition that
            wrote nothing has none.

        Raises:
            ConfigError: a Spark Connect session (the hand-off is through py4j); the session lacks
                Iceberg's Spark runtime, twophase's Iceberg jar or the catalog ``spark_catalog``; the
                write refused its options or the table (another table under that name in the
                session's catalog, a schema Iceberg's writer cannot write): named.
            ValueError: the write handed over nothing, or files not named for their task.
            Exception: whatever Spark's write raises; what its tasks wrote is left to the lingering
                cleanup (Iceberg's job abort deletes the files of the tasks that committed).
        """
        spark = df.sparkSession
        jvm = classic_jvm(spark, f"Iceberg sink {self.name!r}", "its data files")
        self._check_session(spark, jvm)
        with self._catalog.use() as catalog:
            table = require_table(catalog, self.config)
        table_uuid = str(table.metadata.table_uuid)
        write_id = staged_write.new_write_id()
        prefix = naming.job_data_prefix(table.location(), naming.job_token(job_id, self.name))
        options = staged_write.write_options(
            self.config.table, str(self.config.spark_catalog), table_uuid, prefix, checkpoint_id, write_id
        )
        if self.config.columns is not None:  # the sink's projection, as the Python path applies it
            df = df.select(*self.config.columns)
        from pyspark.errors import IllegalArgumentException  # the JVM's, as pyspark raises it

        try:
            df.write.format(staged_write.SOURCE).mode("append").options(**options).save()
        except IllegalArgumentException as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"Iceberg sink {self.name!r}: the staged write refused its table: {self.config.redact(first)}"
            ) from e
        handed = jvm.twophase.iceberg.StagedIcebergWrites.take(write_id)
        return staged_write.staged_tasks(
            handed, self.config.table, table_uuid, prefix, job_id, self.name, checkpoint_id
        )

    def _check_session(self, spark: Any, jvm: Any) -> None:
        """Refuse, by name, a session without what the staged write needs."""
        needs = (
            (
                staged_write.ICEBERG_RUNTIME_CLASS,
                "Iceberg's Spark runtime (spark.jars.packages "
                "org.apache.iceberg:iceberg-spark-runtime-<spark>_<scala>:<version>)",
            ),
            (
                staged_write.HANDOFF,
                "twophase's Iceberg jar (spark.jars: twophase.connectors.iceberg.staging_jar())",
            ),
        )
        for class_name, what in needs:
            try:
                jvm.py4j.reflection.ReflectionUtil.classForName(class_name)
            except Exception:
                raise ConfigError(
                    f"Iceberg sink {self.name!r}: write_path='spark' needs {what} in the Spark session"
                ) from None
        catalog = f"spark.sql.catalog.{self.config.spark_catalog}"
        if spark.conf.get(catalog, None) is None:
            raise ConfigError(
                f"Iceberg sink {self.name!r}: the session has no catalog {self.config.spark_catalog!r} "
                f"({catalog} is unset); set spark_catalog to the session's Iceberg catalog holding "
                f"{self.config.table}"
            )

    # --- executor side -----------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> IcebergTransaction:
        """Load the table (schema, partition spec, location) and open a file writer; files are
        created lazily when rows arrive.

        Raises:
            ConfigError: no such table.
            ServiceUnavailableError: the catalog cannot be reached.
        """
        with open_catalog(self.config, self.catalog_factory) as catalog:
            table = require_table(catalog, self.config)
        return IcebergTransaction(
            ctx, str(table.metadata.table_uuid), IcebergFileWriter(self.config, ctx, table)
        )

    def write(self, txn: IcebergTransaction, batch: pa.RecordBatch) -> None:
        """Append an Arrow batch (see
        :class:`~twophase.connectors.iceberg.internal.writer.IcebergFileWriter`)."""
        if txn.state != "open":
            raise IllegalTransitionError("iceberg transaction", txn.state, "write")
        txn.writer.write(batch)

    def pre_commit(self, txn: IcebergTransaction) -> IcebergCommittable | None:
        """Close all data files; return their metadata, or ``None`` if no row was written."""
        txn.transition("pre_commit", "pre_committed")
        files = txn.writer.finish()
        if not files:
            return None
        ctx = txn.ctx
        committable = IcebergCommittable(
            table=self.config.table,
            table_uuid=txn.table_uuid,
            job_id=ctx.job_id,
            sink_name=ctx.sink_name,
            checkpoint_id=ctx.checkpoint_id,
            partition=ctx.partition,
            attempt=ctx.attempt,
            num_partitions=ctx.num_partitions,
            schema_id=txn.writer.schema.schema_id,
            files=tuple(files),
        )
        fields: dict[str, Any] = dict(ctx.log_fields())
        log_event(
            log, logging.INFO, "pre-committed", files=len(files), rows=committable.num_records, **fields
        )
        return committable

    def abort_open(self, txn: IcebergTransaction) -> None:
        """Delete the files of a transaction never pre-committed. Best effort."""
        if txn.state == "open":
            txn.state = "aborted"
            txn.writer.abort()

    # --- driver side -------------------------------------------------------------------------

    def commit_checkpoint(
        self, checkpoint_id: int, committables: Sequence[IcebergCommittable]
    ) -> CommitOutcome:
        """Commit every committable of this sink for ``checkpoint_id`` as ONE append snapshot.

        Idempotent (``ALREADY_COMMITTED`` when the table's committed-checkpoint property of this
        job and sink records the checkpoint or a later one; without the property, when a snapshot
        summary does or the table references the checkpoint's data files), so it also serves
        recovery, whatever snapshots were expired. See
        :meth:`twophase.connectors.iceberg.internal.committer.IcebergCommitter.commit_checkpoint`.
        """
        return IcebergCommitter(self.config, self.name, self._catalog).commit_checkpoint(
            checkpoint_id, committables
        )

    def commit(self, committable: IcebergCommittable) -> CommitOutcome:
        """Commit one committable: only valid when its epoch ran with one partition.

        Returns ``FATAL`` (and logs why) for multi-partition epochs: committing one subtask's files
        under the checkpoint's summary would make the others look committed.
        """
        if committable.num_partitions == 1:
            return self.commit_checkpoint(committable.checkpoint_id, [committable])
        log_event(
            log,
            logging.ERROR,
            "per-committable commit refused; use commit_checkpoint",
            sink=self.name,
            checkpoint=committable.checkpoint_id,
            partitions=committable.num_partitions,
        )
        return CommitOutcome.FATAL

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        """The newest checkpoint id the table records as committed by this job and sink: its
        committed-checkpoint property, or without it the newest snapshot summary or referenced data
        file of the job (``None``: none). See
        :func:`twophase.connectors.iceberg.internal.committer.last_committed`.

        Raises:
            ConfigError: the property was edited into something that is not a checkpoint id.
            ServiceUnavailableError: the catalog cannot be reached.
        """
        with self._catalog.use() as catalog:
            return last_committed(load_table(catalog, self.config), job_id, self.name)

    def measure(self, committable: IcebergCommittable) -> CommittableSize:
        """Records and bytes of the committable's data files."""
        return CommittableSize(committable.num_records, committable.num_bytes)

    def close(self) -> None:
        """Release the driver's kept catalog (its SQL engine's connections). Idempotent."""
        self._catalog.close()

    def abort(self, committable: IcebergCommittable) -> None:
        """Delete the committable's data files unless a snapshot references them. Idempotent."""
        self.abort_batch([committable])

    def abort_batch(self, committables: Sequence[IcebergCommittable]) -> None:
        """Delete the committables' data files unless a snapshot references them, the catalog
        opened and the table's manifests read once for all of them. Idempotent.

        Raises:
            ServiceUnavailableError, OSError: as the catalog and the file deletes raise.
        """
        with self._catalog.use() as catalog:
            table = load_table(catalog, self.config)
            if table is None:
                return
            referenced = referenced_paths(table)
            files = [f for c in committables for f in c.files]
            for f in files:
                if f.path in referenced:
                    log_event(
                        log, logging.WARNING, "abort keeps a committed file", file=f.path, sink=self.name
                    )
            doomed = [f.path for f in files if f.path not in referenced]
            deleted = delete_files(table.io, self.config.storage_options, doomed)
        checkpoints = sorted({c.checkpoint_id for c in committables})
        log_event(log, logging.INFO, "aborted", sink=self.name, checkpoints=checkpoints, files=deleted)

    def abort_lingering(self, scope: LingeringScope[IcebergCommittable]) -> int:
        """Delete this job's and sink's data files of checkpoints ≤ ``scope.up_to_checkpoint`` that
        neither ``scope.held`` nor any snapshot references and that are older than
        ``lingering_grace_ms``; return how many were deleted
        (:mod:`twophase.connectors.iceberg.internal.lingering`). Listing the job's files and
        reading the table's manifests cost in proportion to the table, so a routine cleanup
        (``scope.routine``) does it only when :class:`~twophase.sinks.internal.sweep.SweepSchedule`
        says so, and returns 0 otherwise (what it leaves, no snapshot references: no reader sees it).
        """
        if scope.routine and not self._sweep.due():
            return 0
        with self._catalog.use() as catalog:
            table = load_table(catalog, self.config)
            if table is None:
                return 0
            prefix = naming.job_data_prefix(table.location(), naming.job_token(scope.job_id, scope.sink_name))
            candidates = own_files(table.io, prefix)
            self._sweep.listed(len(candidates))
            if not candidates:
                return 0
            held = {f.path for c in scope.held for f in c.files}
            fields: dict[str, Any] = {"job": scope.job_id, "sink": scope.sink_name}
            deleted = delete_lingering(
                table.io,
                self.config.storage_options,
                candidates,
                referenced_paths(table),
                held,
                scope.up_to_checkpoint,
                self.config.lingering_grace_ms,
                fields,
            )
        log_event(log, logging.INFO, "aborted lingering", files=deleted, **fields)
        return deleted

    # --- helpers -----------------------------------------------------------------------------

    def _create(self, catalog: Catalog, data_schema: pa.Schema) -> Table:
        namespace = self.config.identifier[:-1]
        with contextlib.suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(namespace)
        columns = set(data_schema.names)
        for _transform, column in self.config.partition_fields():
            if column not in columns:
                raise ConfigError(f"partition_by column {column!r} is not in the data ({sorted(columns)})")
        try:
            with catalog.create_table_transaction(self.config.identifier, schema=data_schema) as create:
                if self.config.partition_by:
                    with create.update_spec() as spec:
                        for transform, column in self.config.partition_fields():
                            spec.add_field(column, parse_transform(transform))
        except TableAlreadyExistsError:
            pass  # another job created it first: check it like any existing table
        except ValueError as e:
            raise ConfigError(
                f"cannot create Iceberg table {self.config.table}: {str(e).splitlines()[0]}"
            ) from e
        log_event(log, logging.INFO, "created table", table=self.config.table, sink=self.name)
        return require_table(catalog, self.config)

    def _check_spec(self, table: Table) -> None:
        unsupported = unsupported_transforms(table.spec(), table.schema())
        if unsupported:
            raise ConfigError(
                f"Iceberg table {self.config.table}: the writer cannot compute partition fields "
                f"{unsupported} "
                "(pyiceberg has no pyarrow transform for them; bucket needs pyiceberg-core)"
            )
        if not self.config.partition_by:
            return
        schema = table.schema()
        actual = [(str(f.transform), schema.find_column_name(f.source_id)) for f in table.spec().fields]
        wanted = [(str(parse_transform(t)), c) for t, c in self.config.partition_fields()]
        if actual != wanted:
            raise ConfigError(
                f"Iceberg table {self.config.table} is partitioned by {actual}, partition_by says {wanted}"
            )


def _check_schema(table_name: str, table: Table, data_schema: pa.Schema) -> None:
    """Raise a one-line SchemaError when ``data_schema`` cannot be written to ``table``."""
    try:
        _check_pyarrow_schema_compatible(
            table.schema(), data_schema, downcast_ns_timestamp_to_us=True, format_version=table.format_version
        )
    except ValueError:
        names = {f.name for f in table.schema().fields}
        data = set(data_schema.names)
        extra = sorted(data - names)
        missing = sorted(f.name for f in table.schema().fields if f.required and f.name not in data)
        detail = []
        if extra:
            detail.append(f"columns not in the table: {extra}")
        if missing:
            detail.append(f"required columns missing: {missing}")
        if not detail:
            table_types = {f.name: str(f.field_type) for f in table.schema().fields}
            differing = sorted(n for n in data if n in table_types)
            detail.append(
                f"a column's type or nullability differs (table: {table_types}, data columns: {differing})"
            )
        raise SchemaError(f"data does not match Iceberg table {table_name}: {'; '.join(detail)}") from None
