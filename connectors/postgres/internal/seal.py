"""The seal: prepared transactions of a checkpoint about to be published, which no attempt rolls back.

A new attempt of a subtask rolls back what earlier attempts of it left prepared, because their row
locks would block it (:func:`~twophase.connectors.postgres.internal.lingering.fence_earlier_attempts`). That
is right for a retry and wrong for a zombie: an earlier stage attempt's task, or a speculative copy,
that begins after the checkpoint holding the acknowledged attempt's transaction was published
would roll that transaction back, and the restore would report it LOST (#26 item 4).

So the driver seals a checkpoint's gids before it publishes the checkpoint: it records them in the
seal table (``<commit_table>_sealed``, beside the commit records) under a session advisory lock
that every writer takes too before it rolls anything back. A writer that finds one of the
transactions it would roll back sealed is a zombie of a checkpoint that is (or is about to be)
published: it refuses to begin (``ConcurrentAttemptError``), and Spark discards its failure with
the rest of the zombie. The lock makes "check the seal, then roll back" atomic against "seal, then
verify" (PostgreSQL docs, "Advisory Locks"; ROLLBACK PREPARED cannot run inside a transaction
block, so the lock is session-level and released explicitly). Only the driver's lingering cleanup
rolls back sealed transactions, and only those no retained checkpoint holds.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence

import psycopg
from psycopg import sql

from twophase.connectors.postgres.config import PostgresSinkConfig

Connection = psycopg.Connection[tuple[object, ...]]

SEAL_SUFFIX = "_sealed"
NAME_MAX = 63
"""PostgreSQL's identifier limit (NAMEDATALEN - 1)."""


def seal_table_name(config: PostgresSinkConfig) -> str:
    """``<commit_table>_sealed``, the commit table's name cut so that the whole fits 63 bytes."""
    return config.commit_table[: NAME_MAX - len(SEAL_SUFFIX)] + SEAL_SUFFIX


def advisory_key(gid_prefix: str) -> int:
    """The session advisory lock key of one job's sink: a signed 64-bit integer from SHA-256 over
    its gid prefix (``naming.gid_prefix``)."""
    return int.from_bytes(hashlib.sha256(gid_prefix.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def sealing_lock(conn: Connection, gid_prefix: str) -> Iterator[None]:
    """Hold the sink's advisory lock (``pg_advisory_lock``) for the block, on an autocommit
    connection; released on exit, or by the server when the session ends.

    Raises:
        psycopg.Error: the server refused or the session broke.
    """
    key = advisory_key(gid_prefix)
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        yield
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def ensure_seal_table(conn: Connection, config: PostgresSinkConfig) -> None:
    """Create the seal table when missing (autocommit connection; CREATE on ``commit_schema``,
    checked with the commit table's).

    Raises:
        psycopg.Error: the server refused.
    """
    table = sql.Identifier(config.commit_schema, seal_table_name(config))
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " gid text PRIMARY KEY,"
            " job_token text NOT NULL,"
            " sink text NOT NULL,"
            " checkpoint_id bigint NOT NULL,"
            " sealed_at timestamptz NOT NULL DEFAULT now())"
        ).format(table)
    )


def seal(
    conn: Connection,
    config: PostgresSinkConfig,
    job_token: str,
    sink: str,
    checkpoint_id: int,
    gids: Sequence[str],
) -> None:
    """Record ``gids`` as sealed by ``checkpoint_id`` (idempotent). Call under :func:`sealing_lock`.

    Raises:
        psycopg.Error: the server refused.
    """
    table = sql.Identifier(config.commit_schema, seal_table_name(config))
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (gid, job_token, sink, checkpoint_id) SELECT unnest(%s::text[]), %s, %s, %s"
            " ON CONFLICT (gid) DO NOTHING"
        ).format(table),
        (list(gids), job_token, sink, checkpoint_id),
    )


def sealed(conn: Connection, config: PostgresSinkConfig, gids: Sequence[str]) -> set[str]:
    """Which of ``gids`` are sealed. Call under :func:`sealing_lock` when acting on the answer.

    Raises:
        psycopg.Error: the server refused (a missing seal table means none is sealed).
    """
    table = sql.Identifier(config.commit_schema, seal_table_name(config))
    try:
        rows = conn.execute(
            sql.SQL("SELECT gid FROM {} WHERE gid = ANY(%s)").format(table), (list(gids),)
        ).fetchall()
    except psycopg.errors.UndefinedTable:
        return set()
    return {str(r[0]) for r in rows}


def prune(conn: Connection, config: PostgresSinkConfig, job_token: str, sink: str, below: int) -> None:
    """Delete the seals of checkpoints below ``below`` of one job's sink (their transactions are
    committed or rolled back by now: the committer prunes with the commit records).

    Raises:
        psycopg.Error: the server refused.
    """
    table = sql.Identifier(config.commit_schema, seal_table_name(config))
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE job_token = %s AND sink = %s AND checkpoint_id < %s").format(table),
        (job_token, sink, below),
    )
