"""PostgreSQL in ``twophase services up --postgres``, ``services status`` and ``services down``.

Resolution order, as for Kafka and S3 (:mod:`twophase.integration.services.launcher`):

1. ``TWOPHASE_POSTGRES_DSN`` set (a libpq connection string or URI): that server, after checking
   it answers and allows prepared transactions;
2. a server recorded by ``twophase services up --postgres`` (entry ``postgres`` of
   ``services.json``) whose postmaster still runs: reuse it;
3. otherwise (``postgres_service``) a native server in a temporary folder for the block.

``services up --postgres`` starts the native server of :mod:`twophase.integration.services.postgres`
(``max_prepared_transactions`` = 64, role ``twophase`` with a random password, a free port on
127.0.0.1) detached, in a folder of its own under the system's temporary directory (when this
process is root the server runs as ``postgres``, which may not enter a home folder);
``services down`` stops it with a fast shutdown (SIGINT to the postmaster) and deletes the folder.
:func:`postgres_dsn` is what another process gets in ``TWOPHASE_POSTGRES_DSN``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tenacity

from twophase.integration.services.postgres import (
    PostgresEndpoint,
    PostgresServer,
    endpoint_from_env,
    postgres_server,
)
from twophase.integration.services.process import await_group_gone, pid_alive
from twophase.integration.services.state import PROCESS_MARKERS, ServiceStatus, is_process, recorded_alive
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

DSN_ENV = "TWOPHASE_POSTGRES_DSN"


def postgres_dsn(endpoint: PostgresEndpoint) -> str:
    """A libpq connection string (``host=… port=… user=… password=… dbname=…``) for ``endpoint``.

    Holds the password: only ever in a process's environment or the 0600 state file.
    """
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**endpoint.connect_kwargs())


def endpoint_text(endpoint: PostgresEndpoint) -> str:
    """``host:port/dbname``, without the role's password (for tables and messages)."""
    return f"{endpoint.host}:{endpoint.port}/{endpoint.dbname}"


def check_postgres(endpoint: PostgresEndpoint, timeout_s: float) -> int:
    """Log in to ``endpoint`` and read ``max_prepared_transactions``; return it.

    Raises:
        ServiceUnavailableError: no connection within ``timeout_s`` seconds (the password is not
            in the message).
        ConfigError: ``max_prepared_transactions`` is 0: the sink could not prepare a transaction.
    """
    import psycopg

    try:
        with psycopg.connect(connect_timeout=max(1, int(timeout_s)), **endpoint.connect_kwargs()) as conn:
            row = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
    except psycopg.Error as e:
        text = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if endpoint.password:
            text = text.replace(endpoint.password, "***")
        raise ServiceUnavailableError(
            f"PostgreSQL {endpoint_text(endpoint)} does not answer: {text}"
        ) from None
    limit = int(str(row[0])) if row is not None else 0
    if limit <= 0:
        raise ConfigError(
            f"PostgreSQL {endpoint_text(endpoint)} has max_prepared_transactions=0: the PostgreSQL sink "
            "needs prepared transactions (set it, e.g. to 64, and restart the server)"
        )
    return limit


def _endpoint_of(entry: dict[str, Any]) -> PostgresEndpoint:
    return PostgresEndpoint(
        str(entry["host"]),
        int(entry["port"]),
        str(entry["user"]),
        str(entry["password"]),
        str(entry["dbname"]),
    )


def running_postgres() -> PostgresEndpoint | None:
    """The server ``TWOPHASE_POSTGRES_DSN`` names, else the one ``services up --postgres`` runs,
    else ``None``. Nothing is started or contacted."""
    given = endpoint_from_env()
    if given is not None:
        return given
    entry = recorded_alive("postgres")
    return None if entry is None else _endpoint_of(entry)


def launch_postgres() -> PostgresServer:
    """Start a native server in a fresh temporary folder, detached (it outlives this process).

    Raises:
        ConfigError: no PostgreSQL installed, or running as root without a ``postgres`` user.
        ServiceUnavailableError: it cannot be initialised or started (the folder is removed).
    """
    root = Path(tempfile.mkdtemp(prefix="twophase-services-postgres-"))
    try:
        server = PostgresServer(root)
        server.start(detach=True)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server


def postgres_state(server: PostgresServer) -> dict[str, Any]:
    """The ``services.json`` entry of a server started by ``services up`` (holds its password)."""
    e = server.endpoint
    return {
        "pid": server.pid(),
        "host": e.host,
        "port": e.port,
        "user": e.user,
        "password": e.password,
        "dbname": e.dbname,
        "max_prepared_transactions": server.max_prepared_transactions,
        "data_dir": str(server.root),
    }


def up_postgres(state: dict[str, Any]) -> Callable[[], None] | None:
    """Start PostgreSQL for ``services up --postgres`` unless ``TWOPHASE_POSTGRES_DSN`` names one
    (checked) or a recorded one still runs; record it in ``state``. Returns how to stop what was
    started, or ``None``.

    Raises:
        ConfigError, ServiceUnavailableError: the given server does not answer or has no prepared
            transactions; a native one cannot start.
    """
    from twophase.integration.services.state import connect_timeout_s

    given = endpoint_from_env()
    if given is not None:
        check_postgres(given, connect_timeout_s())
        return None
    if recorded_alive("postgres") is not None:
        return None
    if "postgres" in state:  # recorded but dead: its folder goes
        shutil.rmtree(str(state.pop("postgres").get("data_dir", "")), ignore_errors=True)
    server = launch_postgres()
    state["postgres"] = postgres_state(server)
    log_event(log, logging.INFO, "postgres up", endpoint=endpoint_text(server.endpoint), pid=server.pid())

    def stop() -> None:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)

    return stop


def stop_recorded_postgres(entry: dict[str, Any], grace_s: float = 30.0) -> bool:
    """Fast shutdown (SIGINT) of a recorded postmaster, SIGKILL to its process group after
    ``grace_s`` seconds; True if it was running. A reused pid is never signalled."""
    pid = int(entry.get("pid") or 0)
    if not is_process(pid, PROCESS_MARKERS["postgres"]):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    waiting = tenacity.Retrying(
        stop=tenacity.stop_after_delay(grace_s),
        wait=tenacity.wait_fixed(0.1),
        retry=tenacity.retry_if_result(bool),
        retry_error_callback=lambda state: True,
    )
    if waiting(pid_alive, pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        await_group_gone(pid)  # its data folder is deleted next
    return True


def postgres_status(timeout_s: float, recorded: dict[str, Any] | None) -> ServiceStatus | None:
    """The ``postgres`` row of ``services status``: given by ``TWOPHASE_POSTGRES_DSN``, recorded by
    ``services up --postgres`` (``recorded`` is its state entry), or ``None`` when neither."""
    try:
        given = endpoint_from_env()
    except Exception as e:  # a malformed DSN: say so in the row
        return ServiceStatus("postgres", "environment", "", None, False, f"{DSN_ENV}: {e}")
    if given is not None:
        return _row("environment", given, None, timeout_s, DSN_ENV)
    if recorded is None:
        return None
    entry = recorded_alive("postgres")
    if entry is None:
        return ServiceStatus("postgres", "not running", "", None, False, "recorded postmaster is gone")
    return _row("services up", _endpoint_of(entry), int(entry["pid"]), timeout_s, str(entry["data_dir"]))


def _row(
    origin: str, endpoint: PostgresEndpoint, pid: int | None, timeout_s: float, detail: str
) -> ServiceStatus:
    try:
        limit = check_postgres(endpoint, timeout_s)
    except (ServiceUnavailableError, ConfigError) as e:
        return ServiceStatus("postgres", origin, endpoint_text(endpoint), pid, False, str(e))
    return ServiceStatus(
        "postgres", origin, endpoint_text(endpoint), pid, True, f"max_prepared_transactions={limit}, {detail}"
    )


@contextlib.contextmanager
def postgres_service() -> Iterator[PostgresEndpoint]:
    """``TWOPHASE_POSTGRES_DSN``'s server if set, else the one ``twophase services up --postgres``
    runs, else a native one for the block (see :func:`postgres_server`)."""
    given = running_postgres()
    if given is not None:
        yield given
        return
    with postgres_server() as server:
        yield server.endpoint
