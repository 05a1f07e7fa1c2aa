"""Driver side: COMMIT PREPARED / ROLLBACK PREPARED, and how an outcome is decided.

PostgreSQL docs, "COMMIT PREPARED" and "ROLLBACK PREPARED": either may be run from any session of
the same database by the role that prepared the transaction (or a superuser), outside a
transaction block; once it ran, the gid is gone from ``pg_prepared_xacts``.

``commit``:

| what happens | outcome |
|---|---|
| COMMIT PREPARED succeeds | COMMITTED |
| the gid does not exist (42704) and the commit record of the gid is visible | ALREADY_COMMITTED |
| the gid does not exist, no commit record, its checkpoint below the pruning horizon | ALREADY_COMMITTED |
| the gid does not exist, no commit record, its checkpoint at or above the horizon | LOST (rolled back) |
| the gid is busy (55006: another session is committing it) or the server is unreachable | RETRY |
| the gid belongs to another database (55000), permission denied (42501), anything else | FATAL |

The commit record is a row of the commit-record table written inside the prepared transaction
itself, so it becomes visible exactly when the transaction commits and vanishes with a rollback:
the decision rests on durable evidence, never on absence alone.

Commit records are pruned: a commit of checkpoint ``c`` deletes the job's sink's records of
checkpoints below ``c − commit_record_retention``. Before it deletes any, the same transaction
raises the *pruning horizon*, one row of the same table (gid ``<gid prefix>pruned``, checkpoint =
the horizon, partition −1), and it deletes only below the horizon it reads back, so the horizon is
never below a deleted record (#43 item 1). A checkpoint below the horizon has had a later
checkpoint of the same job and sink committed, ``commit_record_retention`` or more ids later;
commits come in checkpoint order (DESIGN.md §5), so it was committed too, as Delta's txn version
and Iceberg's committed-checkpoint property decide. Records of an earlier release, which pruned
without a horizon, count as a horizon of their newest checkpoint less ``commit_record_retention``.
Above the horizon absence stays exact: LOST.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql

from twophase.connectors.postgres.config import PostgresSinkConfig
from twophase.connectors.postgres.internal import naming, seal
from twophase.connectors.postgres.internal.committable import PostgresCommittable
from twophase.connectors.postgres.internal.connection import Connector, connect, error_text
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresCommitter:
    """Commits and rolls back prepared transactions; one short connection per call.

    Args:
        config: where the prepared transactions live.
        sink_name: for log fields.
        connector: opens connections (default ``psycopg.connect``; see
            :data:`~twophase.connectors.postgres.internal.connection.Connector`).
    """

    def __init__(
        self, config: PostgresSinkConfig, sink_name: str, connector: Connector | None = None
    ) -> None:
        self.config = config
        self.sink_name = sink_name
        self.connector = connector

    def commit(self, committable: PostgresCommittable) -> CommitOutcome:
        """``COMMIT PREPARED '<gid>'``, idempotent; the outcome as in the module's table.

        Never raises for the outcomes; an unreachable server gives ``RETRY``.
        """
        return self.commit_batch([committable], connections=1)[0]

    def commit_batch(
        self, committables: Sequence[PostgresCommittable], *, connections: int
    ) -> list[CommitOutcome]:
        """``COMMIT PREPARED`` every gid of one checkpoint's batch over at most ``connections``
        sessions (each takes every ``connections``-th gid, one after another); each outcome as in
        the module's table, in input order.

        A session costs a connection set-up (TCP, TLS, authentication), more than a COMMIT PREPARED
        on a near server: a few sessions, each reused for its share, make a batch of n gids cost
        about ``n / connections`` statements instead of n set-ups. The first session prunes commit
        records once for the batch (they all share one checkpoint) if it committed any. A session
        that cannot connect, or breaks, answers ``RETRY`` for the gids it did not decide.

        Never raises for the outcomes.
        """
        n = len(committables)
        k = max(1, min(connections, n))
        outcomes: list[CommitOutcome | None] = [None] * n

        def session(share: int) -> None:
            indices = range(share, n, k)
            try:
                with connect(self.config, autocommit=True, connector=self.connector) as conn:
                    for i in indices:
                        outcomes[i] = self._commit_on(conn, committables[i])
                    if share == 0 and CommitOutcome.COMMITTED in (outcomes[i] for i in indices):
                        self._prune(conn, committables[0])
            except (ServiceUnavailableError, psycopg.Error) as e:
                undecided = [i for i in indices if outcomes[i] is None]
                answer = self._failed(e, [committables[i].gid for i in undecided])
                for i in undecided:
                    outcomes[i] = answer

        if k == 1:
            session(0)
        else:
            with ThreadPoolExecutor(k, thread_name_prefix=f"pg-commit-{self.sink_name}") as pool:
                list(pool.map(session, range(k)))
        return [CommitOutcome.FATAL if o is None else o for o in outcomes]

    def _commit_on(self, conn: Connection, committable: PostgresCommittable) -> CommitOutcome:
        """``COMMIT PREPARED`` one gid on an open autocommit session; the module table's outcome."""
        fields = {"sink": self.sink_name, "gid": committable.gid}
        try:
            try:
                conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(committable.gid)))
            except psycopg.errors.UndefinedObject:
                outcome = self._decide_missing(conn, committable)
                log_event(
                    log,
                    logging.INFO,
                    "prepared transaction gone",
                    exc_info=False,
                    outcome=outcome.value,
                    **fields,
                )
                return outcome
        except psycopg.Error as e:
            if getattr(conn, "broken", False) or e.sqlstate is None:
                raise  # the session broke: the caller answers RETRY for what it did not decide
            return self._failed(e, [committable.gid])
        log_event(log, logging.INFO, "committed", exc_info=False, records=committable.record_count, **fields)
        return CommitOutcome.COMMITTED

    def _failed(self, e: BaseException, gids: Sequence[str]) -> CommitOutcome:
        """The outcome of ``gids`` whose commit met ``e``, logged: ``RETRY`` or ``FATAL``."""
        fields = {"sink": self.sink_name, "gid": gids[0] if len(gids) == 1 else list(gids)}
        if isinstance(e, ServiceUnavailableError):
            log_event(log, logging.WARNING, "commit needs retry", exc_info=False, error=e, **fields)
            return CommitOutcome.RETRY
        # ObjectInUse (a concurrent COMMIT/ROLLBACK PREPARED) and a broken connection: ask again;
        # anything else, e.g. "prepared transaction belongs to another database" (class 55 like
        # ObjectInUse, so tested first: the config names another dbname), is fatal
        retry = isinstance(e, (psycopg.errors.ObjectInUse, psycopg.OperationalError)) and not isinstance(
            e, psycopg.errors.ObjectNotInPrerequisiteState
        )
        event = "commit needs retry" if retry else "commit failed"
        level = logging.WARNING if retry else logging.ERROR
        log_event(log, level, event, exc_info=False, error=error_text(self.config, e), **fields)
        return CommitOutcome.RETRY if retry else CommitOutcome.FATAL

    def abort(self, committable: PostgresCommittable) -> None:
        """``ROLLBACK PREPARED '<gid>'``; idempotent (a gid already gone is fine).

        Raises:
            ServiceUnavailableError: the server cannot be reached, or refused (redacted message).
        """
        self.abort_all([committable])

    def abort_all(self, committables: Sequence[PostgresCommittable]) -> None:
        """``ROLLBACK PREPARED`` of every committable's gid, in order, over one connection;
        idempotent (gids already gone are fine).

        Raises:
            ServiceUnavailableError: the server cannot be reached, or refused (redacted message,
                naming the gid); the gids after it are left to the lingering cleanup.
        """
        if not committables:
            return
        gid = committables[0].gid  # named if the session cannot even start
        try:
            with connect(self.config, autocommit=True, connector=self.connector) as conn:
                for c in committables:
                    gid = c.gid
                    rollback_prepared(conn, gid)
        except psycopg.Error as e:
            raise ServiceUnavailableError(
                f"PostgreSQL {self.config.host}:{self.config.port}: ROLLBACK PREPARED "
                f"{gid!r} failed: {error_text(self.config, e)}"
            ) from None
        if len(committables) == 1:
            log_event(log, logging.INFO, "aborted", sink=self.sink_name, gid=gid)
        else:
            log_event(log, logging.INFO, "aborted", sink=self.sink_name, transactions=len(committables))

    def is_committed(self, conn: Connection, gid: str) -> bool:
        """Whether the commit record of ``gid`` is visible (its transaction committed)."""
        table = sql.Identifier(self.config.commit_schema, self.config.commit_table)
        try:
            row = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE gid = %s").format(table), (gid,)).fetchone()
        except psycopg.errors.UndefinedTable:
            return False
        return row is not None

    def pruning_horizon(self, conn: Connection, parts: naming.GidParts) -> int | None:
        """The checkpoint below which this job's sink's commit records may have been pruned, or
        ``None`` when it has none: the recorded horizon, or for records an earlier release pruned
        without one, their newest checkpoint less ``commit_record_retention`` (the larger of both).
        """
        table = sql.Identifier(self.config.commit_schema, self.config.commit_table)
        try:
            row = conn.execute(
                sql.SQL(
                    "SELECT max(CASE WHEN gid = %s THEN checkpoint_id ELSE checkpoint_id - %s END)"
                    " FROM {} WHERE job_token = %s AND sink = %s"
                ).format(table),
                (horizon_gid(parts.prefix), self.config.commit_record_retention, parts.token, self.sink_name),
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        return None if row is None or row[0] is None else int(str(row[0]))

    def _decide_missing(self, conn: Connection, committable: PostgresCommittable) -> CommitOutcome:
        if self.is_committed(conn, committable.gid):
            return CommitOutcome.ALREADY_COMMITTED
        if is_prepared(conn, committable.gid):  # prepared in the meantime? cannot be: gids are unique
            return CommitOutcome.RETRY
        parts = committable.parts()
        horizon = self.pruning_horizon(conn, parts)
        if horizon is not None and parts.checkpoint_id < horizon:
            # the record was pruned after a checkpoint >= horizon + retention committed: in checkpoint
            # order, this one committed before it (a restore of an unmarked checkpoint, #43)
            log_event(
                log,
                logging.WARNING,
                "commit record pruned: already committed by the pruning horizon (commits come in "
                "checkpoint order; raise commit_record_retention to keep records longer)",
                exc_info=False,
                sink=self.sink_name,
                gid=committable.gid,
                checkpoint=parts.checkpoint_id,
                horizon=horizon,
                retention=self.config.commit_record_retention,
            )
            return CommitOutcome.ALREADY_COMMITTED
        return CommitOutcome.LOST

    def _prune(self, conn: Connection, committable: PostgresCommittable) -> None:
        """Raise the pruning horizon, then delete this sink's commit records and seals below it.

        One transaction. Commits of one checkpoint's partitions prune at once: each deletes below
        the horizon it reads back after raising it, never below its own ``below`` only, so a
        concurrent prune that kept a lower horizon is never outrun. Best effort.
        """
        parts = committable.parts()
        below = parts.checkpoint_id - self.config.commit_record_retention
        if below <= 0:
            return
        table = sql.Identifier(self.config.commit_schema, self.config.commit_table)
        token, sentinel = parts.token, horizon_gid(parts.prefix)
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE gid = %s AND checkpoint_id < %s").format(table),
                    (sentinel, below),
                )
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (gid, job_token, sink, checkpoint_id, partition, attempt,"
                        " record_count) VALUES (%s, %s, %s, %s, -1, -1, 0) ON CONFLICT (gid) DO NOTHING"
                    ).format(table),
                    (sentinel, token, self.sink_name, below),
                )
                conn.execute(
                    sql.SQL(
                        "DELETE FROM {0} WHERE job_token = %s AND sink = %s AND gid <> %s AND checkpoint_id <"
                        " LEAST(%s, (SELECT checkpoint_id FROM {0} WHERE gid = %s))"
                    ).format(table),
                    (token, self.sink_name, sentinel, below, sentinel),
                )
                seal.prune(conn, self.config, token, self.sink_name, below)
        except psycopg.Error as e:
            log_event(log, logging.WARNING, "commit records not pruned", error=error_text(self.config, e))


def horizon_gid(prefix: str) -> str:
    """The gid of the pruning-horizon row of one job's sink in the commit-record table:
    ``<gid prefix>pruned`` (:func:`naming.gid_prefix`). No prepared transaction has it: it does
    not parse as a gid of ours (:func:`naming.parse_gid`)."""
    return f"{prefix}pruned"


def rollback_prepared(conn: Connection, gid: str) -> bool:
    """``ROLLBACK PREPARED '<gid>'`` on an autocommit connection; False if the gid did not exist.

    Raises:
        psycopg.Error: anything but a missing gid.
    """
    try:
        conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    except psycopg.errors.UndefinedObject:
        return False
    return True


def is_prepared(conn: Connection, gid: str) -> bool:
    """Whether ``gid`` is a prepared transaction of the server right now."""
    return conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone() is not None
