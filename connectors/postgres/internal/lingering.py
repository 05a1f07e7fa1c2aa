"""Driver side: this job's prepared transactions in ``pg_prepared_xacts``: lingering cleanup and ages.

A lingering prepared transaction was prepared by this job's sink but no checkpoint holds it: a
failed or duplicate task attempt (a zombie after a stage retry, a speculative copy), or a crash
before the checkpoint completed. It holds its row locks (writers of the same keys wait on it) and
holds back VACUUM's horizon until it ends, and PostgreSQL never ends it by itself: cleanup is a
correctness matter, not tidiness.

``pg_prepared_xacts`` lists the server's prepared transactions (gid, ``prepared`` time, owner,
database); ROLLBACK PREPARED works only from a session of the transaction's database, so only the
configured database's are considered.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from twophase.connectors.postgres.config import PostgresSinkConfig
from twophase.connectors.postgres.internal import naming, seal
from twophase.connectors.postgres.internal.committable import PostgresCommittable
from twophase.connectors.postgres.internal.committer import rollback_prepared
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConcurrentAttemptError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[object, ...]]


@dataclass(frozen=True)
class PreparedTransaction:
    """One of this job's sink's prepared transactions, as ``pg_prepared_xacts`` shows it.

    Attributes:
        gid: its global identifier.
        parts: the gid's parts (checkpoint, partition, attempt).
        prepared_at: when it was prepared (server time, UTC).
        age_ms: how long ago, by the server's clock (ms).
        owner: the role that prepared it.
    """

    gid: str
    parts: naming.GidParts
    prepared_at: dt.datetime
    age_ms: float
    owner: str


def prepared_transactions(conn: Connection, prefix: str) -> list[PreparedTransaction]:
    """The prepared transactions of the connection's database whose gid starts with ``prefix``
    (:func:`naming.gid_prefix`), oldest first."""
    rows = conn.execute(
        "SELECT gid, prepared, extract(epoch FROM now() - prepared) * 1000, owner FROM pg_prepared_xacts"
        " WHERE database = current_database() AND starts_with(gid, %s) ORDER BY prepared",
        (prefix,),
    ).fetchall()
    out = []
    for gid, prepared, age_ms, owner in rows:
        parts = naming.parse_gid(str(gid), prefix)
        if parts is None:
            continue
        assert isinstance(prepared, dt.datetime)
        out.append(PreparedTransaction(str(gid), parts, prepared, float(str(age_ms)), str(owner)))
    return out


def select_lingering(
    prepared: Sequence[PreparedTransaction], scope: LingeringScope[PostgresCommittable]
) -> list[PreparedTransaction]:
    """The prepared transactions to roll back: not held, and of checkpoints ≤ ``scope.up_to_checkpoint``
    (newer ones may belong to work still running)."""
    in_scope = [p for p in prepared if p.parts.checkpoint_id <= scope.up_to_checkpoint]
    if not in_scope:  # scope.held read only when something could be rolled back (issue #42: decodes)
        return in_scope
    held = {c.gid for c in scope.held}
    return [p for p in in_scope if p.gid not in held]


def abort_lingering(conn: Connection, scope: LingeringScope[PostgresCommittable]) -> int:
    """ROLLBACK PREPARED every lingering prepared transaction of the scope's job and sink.

    Returns:
        How many were rolled back (a gid that vanished meanwhile is not counted).

    Raises:
        psycopg.Error: the server refused a rollback (e.g. another role prepared it).
    """
    prefix = naming.gid_prefix(scope.job_id, scope.sink_name)
    count = 0
    for p in select_lingering(prepared_transactions(conn, prefix), scope):
        if rollback_prepared(conn, p.gid):
            count += 1
            log_event(
                log,
                logging.INFO,
                "lingering prepared transaction rolled back",
                job=scope.job_id,
                sink=scope.sink_name,
                checkpoint=p.parts.checkpoint_id,
                partition=p.parts.partition,
                attempt=p.parts.attempt,
                gid=p.gid,
                age_ms=p.age_ms,
            )
    return count


def fence_earlier_attempts(
    conn: Connection, config: PostgresSinkConfig, prefix: str, checkpoint_id: int, partition: int
) -> list[str]:
    """ROLLBACK PREPARED what other attempts of one subtask (same checkpoint and partition) left
    prepared, before a new attempt begins, unless the driver sealed one of them; return their gids.

    An unsealed one was never acknowledged, or its checkpoint is not about to be published, and it
    holds the row locks of every key it wrote: the new attempt, writing the same keys, would wait
    for it until ``lock_timeout``. A sealed one belongs to a checkpoint the driver is publishing or
    has published: this attempt is then a zombie (#26 item 4), and rolling it back would lose a
    checkpoint's data. The check and the rollbacks run under the seal's advisory lock
    (:mod:`~twophase.connectors.postgres.internal.seal`).

    Raises:
        ConcurrentAttemptError: one of them is sealed: this attempt must not begin (nothing was
            rolled back).
        psycopg.Error: the server refused a rollback.
    """
    earlier = [
        p
        for p in prepared_transactions(conn, prefix)
        if p.parts.checkpoint_id == checkpoint_id and p.parts.partition == partition
    ]
    if not earlier:
        return []
    fenced = []
    with seal.sealing_lock(conn, prefix):
        held = seal.sealed(conn, config, [p.gid for p in earlier])
        if held:
            raise ConcurrentAttemptError(
                f"checkpoint {checkpoint_id} partition {partition}: the driver sealed prepared "
                f"transaction(s) {sorted(held)} of another attempt for publishing; this attempt is a "
                "zombie and does not begin"
            )
        fenced = [p for p in earlier if rollback_prepared(conn, p.gid)]
    for p in fenced:
        log_event(
            log,
            logging.INFO,
            "earlier attempt's prepared transaction rolled back",
            checkpoint=checkpoint_id,
            partition=partition,
            attempt=p.parts.attempt,
            gid=p.gid,
        )
    return [p.gid for p in fenced]


def warn_old(prepared: Sequence[PreparedTransaction], threshold_ms: int, job_id: str, sink: str) -> int:
    """Log a WARNING for each prepared transaction older than ``threshold_ms``; return how many."""
    old = [p for p in prepared if p.age_ms >= threshold_ms]
    for p in old:
        log_event(
            log,
            logging.WARNING,
            "prepared transaction is old: it holds locks and holds back vacuum",
            job=job_id,
            sink=sink,
            checkpoint=p.parts.checkpoint_id,
            partition=p.parts.partition,
            attempt=p.parts.attempt,
            gid=p.gid,
            age_ms=p.age_ms,
            threshold_ms=threshold_ms,
        )
    return len(old)
