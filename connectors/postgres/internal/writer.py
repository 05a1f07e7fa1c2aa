"""Executor side: one database transaction per subtask and checkpoint, pre-committed with PREPARE TRANSACTION.

Protocol (PostgreSQL docs, "PREPARE TRANSACTION", "COMMIT PREPARED"; psycopg's two-phase commit
API, ``tpc_begin`` / ``tpc_prepare``):

1. ``begin``: connect; roll back what earlier attempts of the same subtask left prepared (they
   hold the row locks of the keys this attempt writes again), unless the driver sealed one for
   publishing, which makes this attempt a zombie that must not begin (see
   :func:`~twophase.connectors.postgres.internal.lingering.fence_earlier_attempts`); ``tpc_begin(gid)``,
   ``SET LOCAL lock_timeout``; in upsert mode create the staging table
   ``twophase_stage_<hash of gid>`` (unlogged, inside the transaction: temporary tables cannot be
   prepared).
2. ``write``: the Arrow batches go in by ONE ``COPY … FROM STDIN (FORMAT BINARY)`` per
   transaction, opened by the first batch and ended by ``pre_commit``. pgpq encodes whole Arrow
   batches, cast to the table's column types, into the binary format, with no Python object per
   value (:class:`~twophase.connectors.postgres.internal.copy_encoder.CopyEncoder`); psycopg's
   ``QueuedLibpqWriter`` sends the bytes from a thread while the task encodes the next batch
   (psycopg docs, "Copy.writer"). The server reports a refused row when the COPY ends: in
   ``pre_commit`` for the last rows.
3. ``pre_commit``: ends the COPY; upsert mode moves the staged rows with ``INSERT … SELECT DISTINCT ON (key) …
   ON CONFLICT (key) DO UPDATE`` (the last row of a key in the transaction wins) and drops the
   staging table; a row goes into the commit-record table; ``PREPARE TRANSACTION '<gid>'``
   (``tpc_prepare``). The connection is closed: the prepared transaction is the server's now and
   survives the task, the executor and a server restart. An empty transaction is rolled back and
   yields no committable.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.copy import QueuedLibpqWriter

from twophase.connectors.postgres.config import PostgresSinkConfig
from twophase.connectors.postgres.internal import naming
from twophase.connectors.postgres.internal.committable import PostgresCommittable
from twophase.connectors.postgres.internal.connection import Connector, connect, error_text
from twophase.connectors.postgres.internal.copy_encoder import CopyEncoder, copy_schema
from twophase.connectors.postgres.internal.lingering import fence_earlier_attempts
from twophase.connectors.postgres.internal.schema import WritePlan, build_plan
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import IllegalTransitionError, RecordError, SchemaError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


def staging_table_name(gid: str) -> str:
    """``twophase_stage_<24 hex digits of SHA-256 over the gid>``: unique per transaction, < 63 bytes."""
    return "twophase_stage_" + hashlib.sha256(gid.encode()).hexdigest()[:24]


@dataclass
class PostgresTransaction:
    """One subtask's open database transaction. Lives only inside the task.

    ``state``: ``"open"`` → ``"prepared"`` | ``"empty"`` | ``"aborted"``; anything else raises
    :class:`~twophase.sinks.errors.IllegalTransitionError`.
    """

    config: PostgresSinkConfig
    plan: WritePlan | None
    ctx: WriterContext
    gid: str
    conn: psycopg.Connection[tuple[object, ...]]
    records: int = 0
    state: str = "open"
    staging: str | None = field(default=None)
    # the transaction's open COPY (psycopg's Copy), its encoder and what closes it and its cursor
    _copy: Any = field(default=None, repr=False)
    _encoder: CopyEncoder | None = field(default=None, repr=False)
    _copy_exit: contextlib.ExitStack | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls,
        config: PostgresSinkConfig,
        plan: WritePlan | None,
        ctx: WriterContext,
        connector: Connector | None = None,
    ) -> PostgresTransaction:
        """Connect and begin the transaction under a fresh gid.

        ``plan`` comes from the driver's ``validate``; without it the first batch's schema is
        checked against the table here. ``connector`` opens the connection (default
        ``psycopg.connect``).

        Raises:
            ServiceUnavailableError: the server cannot be reached.
            ConcurrentAttemptError: this attempt is a zombie of a sealed checkpoint (nothing begun).
        """
        gid = naming.make_gid(
            ctx.job_id, ctx.sink_name, ctx.checkpoint_id, ctx.partition, ctx.attempt, naming.new_nonce()
        )
        conn = connect(config, autocommit=True, connector=connector)
        txn = cls(config, plan, ctx, gid, conn)
        try:
            prefix = naming.gid_prefix(ctx.job_id, ctx.sink_name)
            fence_earlier_attempts(conn, config, prefix, ctx.checkpoint_id, ctx.partition)
            conn.autocommit = False
            conn.tpc_begin(gid)
            conn.execute(
                sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{config.lock_timeout_ms}ms"))
            )
            if plan is not None:
                txn._create_staging(plan)
        except psycopg.Error as e:
            conn.close()
            raise _service_error(config, "begin", e) from None
        except BaseException:
            conn.close()
            raise
        log_event(log, logging.DEBUG, "transaction begun", exc_info=False, gid=gid, **ctx.log_fields())
        return txn

    def write(self, batch: pa.RecordBatch) -> None:
        """COPY the rows of ``batch`` (its written columns) into the target or staging table, on the
        transaction's COPY (opened by the first batch).

        Raises:
            SchemaError: a written column is missing from the batch.
            RecordError: a value cannot be encoded as its column's type, or the server refused a
                row (names the batch's checkpoint and partition). The server may report a refused
                row only when the COPY ends, in :meth:`pre_commit`.
            ServiceUnavailableError: the connection broke.
        """
        if self.state != "open":
            raise IllegalTransitionError("postgres transaction", self.state, "write")
        if batch.num_rows == 0:
            return
        plan = self._plan_for(batch.schema)
        missing = [c for c in plan.columns if batch.schema.get_field_index(c) < 0]
        if missing:
            raise SchemaError(f"batch lacks written column(s) {missing}")
        try:
            if self._copy is None:
                self._open_copy(plan, batch.schema)
            assert self._encoder is not None
            data = self._encoder.encode(batch)
            if data:
                self._copy.write(data)
        except psycopg.OperationalError as e:
            self._abort_copy()
            raise _service_error(self.config, "write", e) from None
        except (psycopg.Error, pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            self._abort_copy()
            raise RecordError(
                f"PostgreSQL {self.config.where} refused a row of checkpoint {self.ctx.checkpoint_id}, "
                f"partition {self.ctx.partition} (batch of {batch.num_rows} rows): "
                f"{error_text(self.config, e)}"
            ) from None
        self.records += batch.num_rows

    def pre_commit(self) -> PostgresCommittable | None:
        """Move staged rows (upsert), record the commit, PREPARE TRANSACTION; close the connection.

        Returns:
            The committable, or ``None`` when no row was written (the transaction is rolled back).

        Raises:
            RecordError: the upsert was refused (e.g. a lock timeout on a key another prepared
                transaction holds, or a constraint).
            ServiceUnavailableError: the connection broke.
        """
        if self.state != "open":
            raise IllegalTransitionError("postgres transaction", self.state, "pre_commit")
        if self.records == 0:
            self.state = "empty"
            self._close(rollback=True)
            return None
        config, ctx = self.config, self.ctx
        parts = naming.parse_gid(self.gid)
        assert parts is not None
        try:
            self._end_copy()
        except psycopg.OperationalError as e:
            self._close(rollback=False)
            raise _service_error(config, "the end of the COPY", e) from None
        except (psycopg.Error, pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            self._close(rollback=False)
            raise RecordError(
                f"PostgreSQL {config.where} refused a row of checkpoint {ctx.checkpoint_id}, "
                f"partition {ctx.partition} ({self.records} rows written): {error_text(config, e)}"
            ) from None
        try:
            if self.staging is not None:
                self._upsert()
            self.conn.execute(
                sql.SQL(
                    "INSERT INTO {} (gid, job_token, sink, checkpoint_id, partition, attempt, record_count)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
                ).format(sql.Identifier(config.commit_schema, config.commit_table)),
                (
                    self.gid,
                    naming.job_token(ctx.job_id, ctx.sink_name),
                    ctx.sink_name,
                    ctx.checkpoint_id,
                    ctx.partition,
                    ctx.attempt,
                    self.records,
                ),
            )
            self.conn.tpc_prepare()
        except psycopg.OperationalError as e:
            self._close(rollback=False)
            raise _service_error(config, "pre-commit", e) from None
        except psycopg.Error as e:
            self._close(rollback=False)
            raise RecordError(
                f"PostgreSQL {config.where} refused the pre-commit of checkpoint {ctx.checkpoint_id}, "
                f"partition {ctx.partition}: {error_text(config, e)}"
            ) from None
        self.state = "prepared"
        self._close(rollback=False)
        log_event(
            log,
            logging.INFO,
            "prepared",
            exc_info=False,
            gid=self.gid,
            records=self.records,
            **ctx.log_fields(),
        )
        return PostgresCommittable(self.gid, self.records)

    def abort_open(self) -> None:
        """Roll back a transaction never prepared (closing the connection does it too). Best effort."""
        if self.state == "open":
            self.state = "aborted"
            self._close(rollback=True)

    def _plan_for(self, schema: pa.Schema) -> WritePlan:
        if self.plan is None:
            config = self.config
            try:
                self.plan = build_plan(
                    self.conn,
                    schema,
                    table_schema=config.schema,
                    table=config.table,
                    columns=config.columns,
                    mode=config.mode,
                    key_columns=config.key_columns,
                )
                self._create_staging(self.plan)
            except psycopg.Error as e:
                raise _service_error(config, "the table check", e) from None
        return self.plan

    def _open_copy(self, plan: WritePlan, schema: pa.Schema) -> None:
        """Open the transaction's COPY and its encoder for batches of ``schema``; send the header."""
        encoder = CopyEncoder(copy_schema(schema, plan.columns, plan.type_names))
        self._start_copy(plan).write(encoder.header())
        self._encoder = encoder

    def _start_copy(self, plan: WritePlan) -> Any:
        """Open ``COPY … FROM STDIN (FORMAT BINARY)`` of ``plan``'s columns; return psycopg's Copy."""
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            sql.Identifier(self.config.schema, self.staging or self.config.table),
            sql.SQL(", ").join(sql.Identifier(c) for c in plan.columns),
        )
        with contextlib.ExitStack() as stack:
            cur = stack.enter_context(self.conn.cursor())
            # a queued writer needs libpq: a connector's stand-in connection (the protocol model's)
            # gets its own plain COPY
            if isinstance(cur, psycopg.Cursor):
                copy = stack.enter_context(cur.copy(statement, writer=QueuedLibpqWriter(cur)))
            else:
                copy = stack.enter_context(cur.copy(statement))
            self._copy, self._copy_exit = copy, stack.pop_all()
        return copy

    def _end_copy(self) -> None:
        """End the open COPY, if any: the rows pgpq still holds and the trailer go out, and the
        server checks the last rows now (psycopg errors raised)."""
        if self._copy is not None and self._encoder is not None:
            self._copy.write(self._encoder.finish())
        exit_stack, self._copy, self._copy_exit, self._encoder = self._copy_exit, None, None, None
        if exit_stack is not None:
            exit_stack.close()

    def _abort_copy(self) -> None:
        """Abandon the open COPY, if any (CopyFail; the transaction is failed anyway). Best effort."""
        exit_stack, self._copy, self._copy_exit, self._encoder = self._copy_exit, None, None, None
        if exit_stack is not None:
            failure = RuntimeError("twophase: the COPY was abandoned")
            with contextlib.suppress(psycopg.Error):
                exit_stack.__exit__(type(failure), failure, None)

    def _create_staging(self, plan: WritePlan) -> None:
        config = self.config
        if config.mode != "upsert":
            return
        self.staging = staging_table_name(self.gid)
        self.conn.execute(
            sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {} FROM {} WITH NO DATA").format(
                sql.Identifier(config.schema, self.staging),
                sql.SQL(", ").join(sql.Identifier(c) for c in plan.columns),
                sql.Identifier(config.schema, config.table),
            )
        )

    def _upsert(self) -> None:
        assert self.staging is not None and self.plan is not None
        config, plan = self.config, self.plan
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in plan.columns)
        key = sql.SQL(", ").join(sql.Identifier(c) for c in plan.key)
        others = [c for c in plan.columns if c not in plan.key]
        if others:
            action: sql.Composable = sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)
            )
        else:
            action = sql.SQL("DO NOTHING")
        staging = sql.Identifier(config.schema, self.staging)
        self.conn.execute(
            sql.SQL(
                "INSERT INTO {target} ({columns}) SELECT DISTINCT ON ({key}) {columns} FROM {staging}"
                " ORDER BY {key}, ctid DESC ON CONFLICT ({key}) {action}"
            ).format(
                target=sql.Identifier(config.schema, config.table),
                columns=columns,
                key=key,
                staging=staging,
                action=action,
            )
        )
        self.conn.execute(sql.SQL("DROP TABLE {}").format(staging))

    def _close(self, *, rollback: bool) -> None:
        self._abort_copy()
        try:
            if rollback and not self.conn.closed:
                self.conn.rollback()
        except psycopg.Error:
            pass  # closing rolls back an unprepared transaction anyway
        finally:
            self.conn.close()


def _service_error(config: PostgresSinkConfig, step: str, error: psycopg.Error) -> ServiceUnavailableError:
    return ServiceUnavailableError(
        f"PostgreSQL {config.host}:{config.port}/{config.dbname} failed during {step}: "
        f"{error_text(config, error)}"
    )
