"""Connections to PostgreSQL (psycopg 3), the server checks 2PC needs, and the commit-record table.

Every connection is opened with tenacity's backoff on ``psycopg.OperationalError`` (server down,
restarting, refusing connections) and fails with
:class:`~twophase.sinks.errors.ServiceUnavailableError`, whose message never holds the password.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
import tenacity
from psycopg import sql

from twophase.connectors.postgres.config import PostgresSinkConfig, redact_conninfo
from twophase.connectors.postgres.internal import seal
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

Connector = Callable[..., Any]
"""Opens a connection as ``psycopg.connect`` does: ``connector(autocommit=…, host=…, port=…, …)``
(the keyword arguments of :meth:`PostgresSinkConfig.connect_kwargs`), returning a
``psycopg.Connection`` or an object answering the same calls. Raises ``psycopg.OperationalError``
when the server cannot be reached. Tests pass a model of the server (``tests/support``)."""


def error_text(config: PostgresSinkConfig, error: BaseException) -> str:
    """The first line of ``error``'s message with any password removed (for messages and logs)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return redact_conninfo(config.redact(text))


def connect(
    config: PostgresSinkConfig, *, autocommit: bool, connector: Connector | None = None
) -> psycopg.Connection[tuple[object, ...]]:
    """Open a connection, retrying with exponential backoff (``connect_attempts``, ``connect_backoff_ms``).

    Args:
        config: where to connect; its password is handed to libpq only.
        autocommit: psycopg's autocommit mode (the driver's COMMIT PREPARED / ROLLBACK PREPARED
            must run outside a transaction block).
        connector: opens the connection (default ``psycopg.connect``; see :data:`Connector`).

    Raises:
        ServiceUnavailableError: no connection after every attempt (the message is redacted).
    """
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(config.connect_attempts),
        wait=tenacity.wait_exponential(multiplier=config.connect_backoff_ms / 1000.0, max=10),
        retry=tenacity.retry_if_exception_type(psycopg.OperationalError),
        reraise=True,
    )
    try:
        conn = retrying(connector or psycopg.connect, autocommit=autocommit, **config.connect_kwargs())
    except psycopg.OperationalError as e:
        raise ServiceUnavailableError(
            f"PostgreSQL {config.host}:{config.port}/{config.dbname} unreachable after "
            f"{config.connect_attempts} attempts: {error_text(config, e)}"
        ) from None
    return conn  # type: ignore[no-any-return]


def max_prepared_transactions(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The server's ``max_prepared_transactions`` (0, PostgreSQL's default, disables PREPARE TRANSACTION)."""
    row = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
    assert row is not None
    return int(str(row[0]))


def require_prepared_transactions(
    conn: psycopg.Connection[tuple[object, ...]], config: PostgresSinkConfig
) -> int:
    """Refuse a server on which ``PREPARE TRANSACTION`` cannot work; return its limit.

    Raises:
        ConfigError: ``max_prepared_transactions`` is 0, naming the setting to change.
    """
    limit = max_prepared_transactions(conn)
    if limit <= 0:
        raise ConfigError(
            f"PostgreSQL {config.host}:{config.port} has max_prepared_transactions=0, which disables "
            "PREPARE TRANSACTION: set max_prepared_transactions in postgresql.conf (or -c "
            "max_prepared_transactions=N) to at least the number of subtasks times the checkpoints "
            "that may await commit (e.g. 64) and restart the server"
        )
    return limit


DDL_LOCK_TIMEOUT_MS = 30_000
"""How long creating the commit-record table or its index may wait for a lock (ms)."""


def _exists(conn: psycopg.Connection[tuple[object, ...]], schema: str, name: str) -> bool:
    """Whether relation ``schema.name`` (a table or an index) exists; takes no lock on it."""
    qualified = sql.Identifier(schema, name).as_string(conn)
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (qualified,)).fetchone()
    return bool(row and row[0])


def ensure_commit_table(conn: psycopg.Connection[tuple[object, ...]], config: PostgresSinkConfig) -> None:
    """Create the commit-record table, its index and the seal table when missing (autocommit
    connection).

    One row per prepared transaction, inserted inside it: visible once ``COMMIT PREPARED`` ran,
    gone with ``ROLLBACK PREPARED``. It is the durable evidence that tells ALREADY_COMMITTED from
    LOST once a gid no longer exists. The seal table beside it is
    :mod:`~twophase.connectors.postgres.internal.seal`'s.

    Raises:
        ConfigError: the role may not create it (names the privilege).
        ServiceUnavailableError: creating it waited :data:`DDL_LOCK_TIMEOUT_MS` for a lock.
    """
    table = sql.Identifier(config.commit_schema, config.commit_table)
    index_name = f"{config.commit_table}_job_checkpoint"[:63]
    index = sql.Identifier(index_name)
    names = (config.commit_table, index_name, seal.seal_table_name(config))
    if all(_exists(conn, config.commit_schema, name) for name in names):
        # nothing to create: even CREATE INDEX IF NOT EXISTS first takes a SHARE lock on the table,
        # which waits for every prepared transaction that inserted a commit record: the job's own,
        # after a crash, which only this job's recovery commits
        return
    try:
        # bounded: never wait forever behind another job's prepared transactions
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{DDL_LOCK_TIMEOUT_MS}ms")))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " gid text PRIMARY KEY,"
                " job_token text NOT NULL,"
                " sink text NOT NULL,"
                " checkpoint_id bigint NOT NULL,"
                " partition integer NOT NULL,"
                " attempt integer NOT NULL,"
                " record_count bigint NOT NULL,"
                " prepared_at timestamptz NOT NULL DEFAULT now())"
            ).format(table)
        )
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (job_token, checkpoint_id)").format(index, table)
        )
        seal.ensure_seal_table(conn, config)
    except psycopg.errors.InsufficientPrivilege as e:
        raise ConfigError(
            f"PostgreSQL role {config.user!r} may not create the commit-record table "
            f"{config.commit_schema}.{config.commit_table}: grant CREATE on schema {config.commit_schema} "
            f"or create it beforehand ({error_text(config, e)})"
        ) from None
    except psycopg.errors.LockNotAvailable:
        raise ServiceUnavailableError(
            f"PostgreSQL {config.host}:{config.port}: creating the commit-record table "
            f"{config.commit_schema}.{config.commit_table} waited {DDL_LOCK_TIMEOUT_MS} ms for locks held by "
            "prepared transactions: commit or roll them back (`twophase lingering`), or create the table "
            "and its index beforehand"
        ) from None
    except psycopg.errors.UniqueViolation:
        # two drivers creating it at once: the other one won
        log_event(log, logging.DEBUG, "commit table created concurrently", table=config.commit_table)
