"""Configuration of the PostgreSQL sink: a frozen dataclass, validated when built, password redacted.

The password travels pickled with the sink to executors (they open the connections), and nowhere
else: it is not part of ``repr``, of log lines, of exception messages (:func:`redact`) nor of any
committable or checkpoint metadata. Leave it ``None`` to let libpq take it from ``PGPASSWORD`` or
``~/.pgpass`` of the process that connects.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from twophase.sinks.errors import ConfigError

WriteMode = Literal["append", "upsert"]
"""``append``: ``COPY`` into the table. ``upsert``: ``COPY`` into a staging table, then
``INSERT … ON CONFLICT (key) DO UPDATE`` into the table."""

MASK = "***"
_IDENTIFIER_MAX_BYTES = 63  # NAMEDATALEN - 1


@dataclass(frozen=True, repr=False)
class PostgresSinkConfig:
    """Configuration of :class:`~twophase.connectors.postgres.sink.PostgresSink`.

    Attributes:
        table: the target table's name (unquoted; case kept as given). It must exist.
        schema: the table's schema (``public`` by default).
        host: the server's host name or address.
        port: the server's TCP port.
        dbname: the database.
        user: the role to connect as. It needs INSERT on ``table`` (and UPDATE in upsert mode),
            CREATE on ``schema`` in upsert mode (the staging table), and INSERT/SELECT/DELETE on
            ``commit_table`` (or CREATE on ``commit_schema`` for the first run, which creates it).
        password: the role's password, or ``None`` for libpq's own sources (``PGPASSWORD``,
            ``~/.pgpass``). Never shown: redacted in ``repr`` and error messages.
        mode: ``append`` or ``upsert`` (see :data:`WriteMode`).
        key_columns: upsert mode's conflict key; ``()`` means the table's primary key. A unique
            index or constraint on exactly these columns must exist (checked at start).
        columns: the sink's projection of each incoming batch: only these columns, in this order,
            are written; ``None`` = every column of the batch. Every written column must be a
            column of the table.
        commit_table: the table of durable commit records, one row per prepared transaction,
            written inside it (created on first use): what tells ALREADY_COMMITTED from LOST when
            a prepared transaction no longer exists.
        commit_schema: the schema of ``commit_table`` (``public`` by default).
        commit_record_retention: commit records older than this many checkpoints below the
            latest committed one are deleted by the driver (checkpoints, ≥ 10), after it recorded
            the pruning horizon: a re-commit of a gid below it is ALREADY_COMMITTED (a later
            checkpoint committed, and checkpoints commit in order), so a restore of an old
            checkpoint whose marker is missing is never a false LOST (#43).
        prepared_age_warning_ms: how old a prepared transaction may get before the job warns
            (ms; the runtime warns at 80% of it, as for Kafka's ``transaction.timeout.ms``).
            PostgreSQL never ends a prepared transaction itself: it holds its locks and holds
            back VACUUM until it is committed or rolled back.
        lock_timeout_ms: the writers' ``lock_timeout`` (ms; 0 = wait forever). A writer that needs
            a row lock held by a prepared transaction (the same key written by two subtasks, or
            by a lingering transaction) fails after it instead of waiting for a commit that waits
            for it.
        connect_timeout_s: libpq's ``connect_timeout`` (s).
        connect_attempts: connection attempts before ``ServiceUnavailableError`` (≥ 1).
        connect_backoff_ms: first backoff between attempts, doubled each time (ms).
        sslmode: libpq's ``sslmode`` (``disable``, ``prefer``, ``require``, ``verify-full``…),
            or ``None`` for libpq's default.
        application_name: shown in ``pg_stat_activity``.

    Raises:
        ConfigError: an empty or over-long name, a repeated column, key columns in append mode,
            a port or number out of range.
    """

    table: str
    schema: str = "public"
    host: str = "localhost"
    port: int = 5432
    dbname: str = "postgres"
    user: str = "postgres"
    password: str | None = None
    mode: WriteMode = "append"
    key_columns: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    commit_table: str = "twophase_commits"
    commit_schema: str = "public"
    commit_record_retention: int = 1000
    prepared_age_warning_ms: int = 600_000
    lock_timeout_ms: int = 60_000
    connect_timeout_s: int = 10
    connect_attempts: int = 5
    connect_backoff_ms: int = 200
    sslmode: str | None = None
    application_name: str = "twophase"

    def __post_init__(self) -> None:
        for name in ("table", "schema", "commit_table", "commit_schema"):
            _identifier(getattr(self, name), name)
        for name in ("host", "dbname", "user", "application_name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"PostgresSinkConfig.{name} must be a non-empty string")
        if self.password is not None and not isinstance(self.password, str):
            raise ConfigError("PostgresSinkConfig.password must be a string or None")
        if self.mode not in ("append", "upsert"):
            raise ConfigError(f"PostgresSinkConfig.mode must be 'append' or 'upsert', got {self.mode!r}")
        key = _names(self.key_columns, "key_columns", allow_empty=True)
        if key and self.mode != "upsert":
            raise ConfigError("PostgresSinkConfig.key_columns is for mode='upsert' only")
        object.__setattr__(self, "key_columns", key)
        if self.columns is not None:
            columns = _names(self.columns, "columns", allow_empty=False)
            missing = [k for k in key if k not in columns]
            if missing:
                raise ConfigError(
                    f"PostgresSinkConfig.key_columns {missing} are not among columns {list(columns)}"
                )
            object.__setattr__(self, "columns", columns)
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise ConfigError(f"PostgresSinkConfig.port must be 1..65535, got {self.port!r}")
        for name, low in (
            ("commit_record_retention", 10),
            ("prepared_age_warning_ms", 1),
            ("lock_timeout_ms", 0),
            ("connect_timeout_s", 1),
            ("connect_attempts", 1),
            ("connect_backoff_ms", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"PostgresSinkConfig.{name} must be an int >= {low}, got {value!r}")

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            return MASK if name == "password" and value is not None else repr(value)

        text = ", ".join(f"{f.name}={shown(f.name)}" for f in fields(self))
        return f"PostgresSinkConfig({text})"

    def connect_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``psycopg.connect``. Contains the password: never log it."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "user": self.user,
            "connect_timeout": self.connect_timeout_s,
            "application_name": self.application_name,
        }
        if self.password is not None:
            kwargs["password"] = self.password
        if self.sslmode is not None:
            kwargs["sslmode"] = self.sslmode
        return kwargs

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of the password replaced by ``***`` (for messages built
        from a driver's error, which might quote a connection string)."""
        if self.password:
            return text.replace(self.password, MASK)
        return text

    @property
    def where(self) -> str:
        """``host:port/dbname schema.table``, for messages (no secret)."""
        return f"{self.host}:{self.port}/{self.dbname} {self.schema}.{self.table}"


def _identifier(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"PostgresSinkConfig.{name} must be a non-empty name, got {value!r}")
    if len(value.encode()) > _IDENTIFIER_MAX_BYTES or "\x00" in value:
        raise ConfigError(f"PostgresSinkConfig.{name} {value!r} is not a valid PostgreSQL name (≤ 63 bytes)")
    return value


def _names(value: object, name: str, *, allow_empty: bool) -> tuple[str, ...]:
    # A bare string is refused: ("a") for ("a",) is a common slip.
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"PostgresSinkConfig.{name} must be a sequence of column names, got {value!r}")
    names = tuple(value)
    if not names and not allow_empty:
        raise ConfigError(f"PostgresSinkConfig.{name} must name at least one column (None = every column)")
    for n in names:
        _identifier(n, name)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"PostgresSinkConfig.{name} repeats {repeated}")
    return names


_PASSWORD_IN_CONNINFO = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact_conninfo(text: str) -> str:
    """``text`` with any ``password=…`` of a libpq connection string replaced by ``password=***``."""
    return _PASSWORD_IN_CONNINFO.sub(lambda m: m[1] + MASK, text)
