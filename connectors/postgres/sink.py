"""The exactly-once PostgreSQL sink: a TwoPhaseCommitSink over prepared transactions (psycopg 3).

Executor side (:mod:`~twophase.connectors.postgres.internal.writer`): one database transaction per subtask
and checkpoint, rows in by binary COPY, pre-committed with ``PREPARE TRANSACTION '<gid>'``.
Driver side (:mod:`~twophase.connectors.postgres.internal.committer`,
:mod:`~twophase.connectors.postgres.internal.lingering`): ``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` and
the lingering prepared transactions of ``pg_prepared_xacts``. PostgreSQL docs: "PREPARE
TRANSACTION", "COMMIT PREPARED", "ROLLBACK PREPARED", "pg_prepared_xacts".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
import pyarrow as pa
import tenacity
from psycopg import sql

from twophase.connectors.postgres.config import PostgresSinkConfig
from twophase.connectors.postgres.internal import lingering, naming, seal
from twophase.connectors.postgres.internal.committable import CODEC, PostgresCommittable
from twophase.connectors.postgres.internal.committer import PostgresCommitter
from twophase.connectors.postgres.internal.connection import (
    Connector,
    connect,
    ensure_commit_table,
    error_text,
    require_prepared_transactions,
)
from twophase.connectors.postgres.internal.schema import WritePlan, build_plan
from twophase.connectors.postgres.internal.writer import PostgresTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ConcurrentAttemptError, ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome, CommittableSize

log = logging.getLogger(__name__)


class PostgresSink(TwoPhaseCommitSink[PostgresTransaction, PostgresCommittable]):
    """Writes Arrow rows into a PostgreSQL table exactly once (append or upsert).

    Args:
        name: the sink's name within the job (non-empty); part of every gid.
        config: see :class:`~twophase.connectors.postgres.config.PostgresSinkConfig`.

        connector: opens every connection (default ``psycopg.connect``); the model-based protocol
            test passes a model of the server's prepared transactions, as the Kafka sink takes
            ``clients``. It is pickled to executors with the sink.

    Raises:
        ConfigError: an empty name.

    ``transaction_timeout_ms`` is ``config.prepared_age_warning_ms``: PostgreSQL never aborts a
    prepared transaction, but one left pending holds locks and holds back VACUUM, so the runtime's
    transaction-age monitor warns at 80% of it as it does for Kafka's ``transaction.timeout.ms``.
    :meth:`prepared_transactions` reports the ages the server sees.
    """

    codec = CODEC
    # a new attempt rolls back what an unsealed earlier attempt of the same subtask prepared (its
    # row locks would block the new one): a speculative copy would roll back the first attempt's
    # transaction before the driver seals it, and the epoch would fail verification
    speculation_safe = False
    # COMMIT PREPARED of different gids are independent: a batch commits over this many sessions
    commit_concurrency = 4

    def __init__(self, name: str, config: PostgresSinkConfig, *, connector: Connector | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"PostgreSQL sink name must be a non-empty string, got {name!r}")
        self.name = name
        self.config = config
        self.transaction_timeout_ms = config.prepared_age_warning_ms
        self.plan: WritePlan | None = None
        self.connector = connector

    def __repr__(self) -> str:
        return f"PostgresSink(name={self.name!r}, config={self.config!r})"

    # --- start-up checks -------------------------------------------------------------------------

    def read_columns(self) -> tuple[str, ...] | None:
        """``config.columns``, the sink's projection (``None``: every column)."""
        return self.config.columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the server, the table and the data's schema before anything is written (driver side).

        - ``max_prepared_transactions`` > 0;
        - the table exists and takes the data's columns (see :mod:`.schema`); upsert mode has a key;
        - the role may INSERT (and UPDATE in upsert mode) into the table;
        - the commit-record table exists (created if missing).

        Raises:
            ConfigError: ``max_prepared_transactions`` is 0 (names the setting); no such table; no
                upsert key; a missing privilege.
            SchemaError: a column the table lacks, a type mismatch, an unwritten NOT NULL column.
            ServiceUnavailableError: the server cannot be reached.
        """
        config = self.config
        try:
            with connect(config, autocommit=True, connector=self.connector) as conn:
                require_prepared_transactions(conn, config)
                plan = build_plan(
                    conn,
                    schema,
                    table_schema=config.schema,
                    table=config.table,
                    columns=config.columns,
                    mode=config.mode,
                    key_columns=config.key_columns,
                )
                self._check_privileges(conn)
                ensure_commit_table(conn, config)
        except psycopg.Error as e:
            raise ServiceUnavailableError(
                f"PostgreSQL {config.host}:{config.port}/{config.dbname}: start-up checks failed: "
                f"{error_text(config, e)}"
            ) from None
        self.plan = plan
        log_event(
            log, logging.INFO, "validated", sink=self.name, table=config.where, columns=len(plan.columns)
        )

    def _check_privileges(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        config = self.config
        needed = ["INSERT"] + (["UPDATE"] if config.mode == "upsert" else [])
        qualified = sql.Identifier(config.schema, config.table).as_string(conn)
        for privilege in needed:
            row = conn.execute("SELECT has_table_privilege(%s, %s)", (qualified, privilege)).fetchone()
            if row is None or not row[0]:
                raise ConfigError(f"PostgreSQL role {config.user!r} lacks {privilege} on {config.where}")
        if config.mode == "upsert":
            row = conn.execute("SELECT has_schema_privilege(%s, 'CREATE')", (config.schema,)).fetchone()
            if row is None or not row[0]:
                raise ConfigError(
                    f"PostgreSQL role {config.user!r} lacks CREATE on schema {config.schema} "
                    "(upsert mode creates its staging table there)"
                )

    # --- executor side ---------------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> PostgresTransaction:
        """Connect and begin the subtask's transaction (see :meth:`PostgresTransaction.open`)."""
        return PostgresTransaction.open(self.config, self.plan, ctx, self.connector)

    def write(self, txn: PostgresTransaction, batch: pa.RecordBatch) -> None:
        """COPY every row of ``batch`` (see :meth:`PostgresTransaction.write`)."""
        txn.write(batch)

    def pre_commit(self, txn: PostgresTransaction) -> PostgresCommittable | None:
        """PREPARE TRANSACTION; the committable, or ``None`` for an empty transaction (rolled back)."""
        return txn.pre_commit()

    def abort_open(self, txn: PostgresTransaction) -> None:
        """Roll back a transaction never prepared. Best effort."""
        txn.abort_open()

    # --- driver side -----------------------------------------------------------------------------

    def verify_pre_committed(
        self, committables: Sequence[PostgresCommittable], in_progress: Sequence[JsonObject]
    ) -> None:
        """Seal the acknowledged gids, then check that each is still a prepared transaction
        (nothing rolled it back meanwhile). Once sealed, no attempt of their subtasks rolls them
        back (:mod:`~twophase.connectors.postgres.internal.seal`; #26 item 4): the runtime calls this after
        every acknowledgement arrived and before it publishes the checkpoint.

        Raises:
            ConcurrentAttemptError: a gid is gone (named).
            ServiceUnavailableError: the server cannot be reached.
        """
        if not committables:
            return
        gids = [c.gid for c in committables]
        parts = committables[0].parts()
        try:
            with connect(self.config, autocommit=True, connector=self.connector) as conn:
                with seal.sealing_lock(conn, parts.prefix):
                    seal.seal(
                        conn,
                        self.config,
                        parts.token,
                        self.name,
                        max(c.parts().checkpoint_id for c in committables),
                        gids,
                    )
                    rows = conn.execute(
                        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
                        " AND gid = ANY(%s)",
                        (gids,),
                    ).fetchall()
                present = {str(r[0]) for r in rows}
        except psycopg.Error as e:
            raise ServiceUnavailableError(
                f"PostgreSQL unreachable while verifying prepared transactions: {error_text(self.config, e)}"
            ) from None
        gone = [c.gid for c in committables if c.gid not in present]
        if gone:
            raise ConcurrentAttemptError(
                f"PostgreSQL sink {self.name!r}: prepared transaction(s) {gone} no longer exist "
                "before their checkpoint was persisted"
            )

    def commit(self, committable: PostgresCommittable) -> CommitOutcome:
        """COMMIT PREPARED, idempotent (see :mod:`~twophase.connectors.postgres.internal.committer` for the
        outcomes); an unreachable server gives RETRY."""
        return PostgresCommitter(self.config, self.name, self.connector).commit(committable)

    def commit_batch(self, committables: Sequence[PostgresCommittable]) -> list[CommitOutcome]:
        """COMMIT PREPARED one checkpoint's gids over ``commit_concurrency`` sessions, each gid
        decided as :meth:`commit` decides it (its commit record, the pruning horizon)."""
        committer = PostgresCommitter(self.config, self.name, self.connector)
        return committer.commit_batch(committables, connections=self.commit_concurrency)

    def recover_and_commit_batch(self, committables: Sequence[PostgresCommittable]) -> list[CommitOutcome]:
        """:meth:`commit_batch`: a re-commit is decided from the commit records alone."""
        return self.commit_batch(committables)

    def abort(self, committable: PostgresCommittable) -> None:
        """ROLLBACK PREPARED; idempotent.

        Raises:
            ServiceUnavailableError: no answer, or the server refused.
        """
        PostgresCommitter(self.config, self.name, self.connector).abort(committable)

    def abort_batch(self, committables: Sequence[PostgresCommittable]) -> None:
        """ROLLBACK PREPARED of every committable over one connection; idempotent.

        Raises:
            ServiceUnavailableError: no answer, or the server refused (names the gid).
        """
        PostgresCommitter(self.config, self.name, self.connector).abort_all(committables)

    def abort_lingering(self, scope: LingeringScope[PostgresCommittable]) -> int:
        """ROLLBACK PREPARED this job's and sink's prepared transactions of checkpoints ≤
        ``scope.up_to_checkpoint`` that ``scope.held`` does not hold; return how many.

        Also warns about held ones older than ``prepared_age_warning_ms``. A session that breaks
        midway (the server restarting: ``OperationalError``) is retried from the listing with a
        new connection, up to ``connect_attempts`` times with the connection backoff: prepared
        transactions survive a restart and ROLLBACK PREPARED of a gid already gone is a no-op, so
        the retry finishes the work (a rollback the broken session completed is not counted).

        Raises:
            ServiceUnavailableError: the server cannot be reached, refused a rollback, or broke
                the session on every attempt.
        """
        config = self.config
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(config.connect_attempts),
            wait=tenacity.wait_exponential(multiplier=config.connect_backoff_ms / 1000.0, max=10),
            retry=tenacity.retry_if_exception_type(psycopg.OperationalError),
            before_sleep=lambda state: log_event(
                log,
                logging.WARNING,
                "lingering cleanup retried",
                sink=self.name,
                attempt=state.attempt_number,
                error=error_text(config, state.outcome.exception() or Exception()) if state.outcome else "",
            ),
            reraise=True,
        )
        try:
            count, remaining = retrying(self._abort_lingering_once, scope)
        except psycopg.Error as e:
            raise ServiceUnavailableError(
                f"PostgreSQL {self.config.host}:{self.config.port}: lingering cleanup failed: "
                f"{error_text(self.config, e)}"
            ) from None
        lingering.warn_old(remaining, self.config.prepared_age_warning_ms, scope.job_id, scope.sink_name)
        return count

    def _abort_lingering_once(
        self, scope: LingeringScope[PostgresCommittable]
    ) -> tuple[int, list[lingering.PreparedTransaction]]:
        with connect(self.config, autocommit=True, connector=self.connector) as conn:
            count = lingering.abort_lingering(conn, scope)
            remaining = lingering.prepared_transactions(
                conn, naming.gid_prefix(scope.job_id, scope.sink_name)
            )
        return count, remaining

    def prepared_transactions(self, job_id: str) -> list[lingering.PreparedTransaction]:
        """This job's sink's prepared transactions with their ages, oldest first (for metrics: each
        holds locks and holds back VACUUM until committed or rolled back).

        Raises:
            ServiceUnavailableError: the server cannot be reached.
        """
        try:
            with connect(self.config, autocommit=True, connector=self.connector) as conn:
                return lingering.prepared_transactions(conn, naming.gid_prefix(job_id, self.name))
        except psycopg.Error as e:
            raise ServiceUnavailableError(
                f"PostgreSQL unreachable while listing prepared transactions: {error_text(self.config, e)}"
            ) from None

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        """The highest checkpoint with a visible commit record of this job and sink, or ``None``.

        A restore starts checkpoint ids above it, so a gid never repeats a committed one.

        Raises:
            ServiceUnavailableError: the server cannot be reached.
        """
        config = self.config
        table = sql.Identifier(config.commit_schema, config.commit_table)
        try:
            with connect(config, autocommit=True, connector=self.connector) as conn:
                row = conn.execute(
                    sql.SQL("SELECT max(checkpoint_id) FROM {} WHERE job_token = %s AND sink = %s").format(
                        table
                    ),
                    (naming.job_token(job_id, self.name), self.name),
                ).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.Error as e:
            raise ServiceUnavailableError(
                f"PostgreSQL unreachable while reading commit records: {error_text(config, e)}"
            ) from None
        return None if row is None or row[0] is None else int(str(row[0]))

    def measure(self, committable: PostgresCommittable) -> CommittableSize:
        """Records in the transaction (no byte count)."""
        return CommittableSize(records=committable.record_count)
