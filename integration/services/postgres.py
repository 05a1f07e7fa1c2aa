"""A native PostgreSQL for the PostgreSQL sink's tests and local runs (issue #28).

:class:`PostgresServer` runs the machine's PostgreSQL (``initdb`` and ``pg_ctl``, 15 or later) on
a data directory in a temporary folder: a free port on 127.0.0.1, its Unix socket inside that
folder, ``max_prepared_transactions`` set (PREPARE TRANSACTION needs it above 0, which is not
PostgreSQL's default), password authentication (SCRAM) for a role ``twophase`` with a random
password. :meth:`PostgresServer.restart` restarts it on the same directory and port (prepared
transactions survive it); :func:`postgres_server` stops it and deletes the folder when done.

PostgreSQL refuses to run as root: when this process is root the server runs as the ``postgres``
user (``TWOPHASE_POSTGRES_OS_USER`` names another), which must exist. Binaries come from
``TWOPHASE_PG_BIN`` (a folder), else ``initdb`` on ``PATH``, else the newest
``/usr/lib/postgresql/<version>/bin``.

``TWOPHASE_POSTGRES_DSN`` (a libpq connection string or URI) names an existing server instead; it
must allow prepared transactions. ``twophase services up --postgres`` keeps one running, and
:func:`~twophase.integration.services.postgres_service.postgres_service` picks the given, the
running or a new server.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twophase.integration.services.process import HOST, free_port
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

ROLE = "twophase"
"""The superuser role ``initdb`` creates, with a random password."""
DEFAULT_MAX_PREPARED_TRANSACTIONS = 64


@dataclass(frozen=True, repr=False)
class PostgresEndpoint:
    """Where a PostgreSQL server listens and how to log in. The password is not part of ``repr``.

    Attributes:
        host: host name or address.
        port: TCP port.
        user: the role.
        password: its password.
        dbname: the database.
    """

    host: str
    port: int
    user: str
    password: str = field(default="")
    dbname: str = "postgres"

    def __repr__(self) -> str:
        return (
            f"PostgresEndpoint(host={self.host!r}, port={self.port}, user={self.user!r}, "
            f"dbname={self.dbname!r})"
        )

    def connect_kwargs(self) -> dict[str, Any]:
        """``psycopg.connect`` keyword arguments (with the password: never log them)."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "dbname": self.dbname,
        }

    def sink_fields(self) -> dict[str, Any]:
        """The connection fields of :class:`~twophase.connectors.postgres.PostgresSinkConfig`."""
        return self.connect_kwargs()


def postgres_bin_dir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl`` (see the module docstring).

    Raises:
        ConfigError: no PostgreSQL installation found.
    """
    given = os.environ.get("TWOPHASE_PG_BIN")
    if given:
        return Path(given)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise ConfigError(
            "PostgreSQL not found: install it (e.g. apt install postgresql) or set TWOPHASE_PG_BIN "
            "to the folder of initdb and pg_ctl"
        )
    return versions[-1]


def _os_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    name = os.environ.get("TWOPHASE_POSTGRES_OS_USER", "postgres")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ConfigError(
            f"PostgreSQL cannot run as root and the user {name!r} does not exist: create it "
            "(useradd --system postgres) or set TWOPHASE_POSTGRES_OS_USER"
        ) from None


class PostgresServer:
    """One native PostgreSQL on 127.0.0.1 with its data directory; restartable on the same port.

    Args:
        root: an empty folder for the data directory, socket, password file and log.
        max_prepared_transactions: the server's ``max_prepared_transactions`` (0 disables
            PREPARE TRANSACTION, as PostgreSQL's default does).
        timeout_s: bound of every start or stop, seconds.

    Attributes:
        endpoint: the address and the ``twophase`` role's random password (stable across restarts).
    """

    def __init__(
        self,
        root: Path,
        max_prepared_transactions: int = DEFAULT_MAX_PREPARED_TRANSACTIONS,
        timeout_s: int = 60,
    ) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.log_file = root / "postgres.log"
        self.timeout_s = timeout_s
        self.max_prepared_transactions = max_prepared_transactions
        self.bin_dir = postgres_bin_dir()
        self.os_user = _os_user()
        self.endpoint = PostgresEndpoint(HOST, free_port(), ROLE, secrets.token_urlsafe(18))
        self._started = False

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self.os_user is not None:
            kwargs["user"] = self.os_user.pw_uid
            kwargs["group"] = self.os_user.pw_gid
            kwargs["extra_groups"] = []
        return subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=self.timeout_s + 30,
            check=check,
            cwd=self.root,
            **kwargs,
        )

    def init(self) -> None:
        """``initdb`` with SCRAM authentication for the ``twophase`` role, then the settings file.

        Raises:
            ServiceUnavailableError: initdb failed (its output in the message).
        """
        if self.os_user is not None:
            os.chown(self.root, self.os_user.pw_uid, self.os_user.pw_gid)
        password_file = self.root / "password"
        password_file.write_text(self.endpoint.password + "\n")
        password_file.chmod(0o600)
        if self.os_user is not None:
            os.chown(password_file, self.os_user.pw_uid, self.os_user.pw_gid)
        try:
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                ROLE,
                "--auth=scram-sha-256",
                f"--pwfile={password_file}",
                "--encoding=UTF8",
                "--no-instructions",
            )
        except subprocess.CalledProcessError as e:
            raise ServiceUnavailableError(
                f"initdb failed: {(e.stderr or e.stdout).strip()[-2000:]}"
            ) from None
        finally:
            password_file.unlink(missing_ok=True)
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# twophase test server\n"
                f"listen_addresses = '{HOST}'\n"
                f"port = {self.endpoint.port}\n"
                f"unix_socket_directories = '{self.root}'\n"
                f"max_prepared_transactions = {self.max_prepared_transactions}\n"
                "max_connections = 100\n"
                "shared_buffers = 32MB\n"
                "log_min_messages = warning\n"
            )

    def start(self, detach: bool = False) -> None:
        """Start the server (``pg_ctl start -w``) and wait until it accepts connections; a
        running one is left as it is. Unless ``detach``, it is stopped when this process exits.

        Raises:
            ServiceUnavailableError: it did not start in time (the log's tail in the message).
        """
        if not self.data_dir.exists():
            self.init()
        if self.running():
            return
        ctl = ["pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", str(self.timeout_s)]
        result = self._run(*ctl, "start", check=False)
        if result.returncode != 0:
            raise ServiceUnavailableError(f"PostgreSQL did not start: {self._log_tail()}")
        if not self._started and not detach:
            self._started = True
            atexit.register(self.stop)
        log_event(log, logging.INFO, "postgres started", port=self.endpoint.port, data_dir=self.data_dir)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl stop -m <mode>``: ``smart``, ``fast`` or ``immediate``); idempotent."""
        if not (self.data_dir / "postmaster.pid").exists():
            return
        result = self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)
        if result.returncode != 0 and (self.data_dir / "postmaster.pid").exists():
            pid = self.pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def restart(self, mode: str = "fast") -> None:
        """Stop (``mode``; ``immediate`` is a crash: recovery replays the WAL) and start again on the
        same directory, port and password."""
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        """True while the server runs (``pg_ctl status``)."""
        if not (self.data_dir / "postmaster.pid").exists():
            return False
        return self._run("pg_ctl", "-D", str(self.data_dir), "status", check=False).returncode == 0

    def pid(self) -> int | None:
        """The postmaster's process id, or ``None`` when not running."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text()[-2000:].strip()
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def postgres_server(
    max_prepared_transactions: int = DEFAULT_MAX_PREPARED_TRANSACTIONS,
) -> Iterator[PostgresServer]:
    """Start a native PostgreSQL in a temporary folder (free port, random password), yield its
    handle, then stop it and delete the folder. Always native (tests restart it).

    Raises:
        ConfigError: no PostgreSQL installed, or running as root without a ``postgres`` user.
        ServiceUnavailableError: it cannot be initialised or started.
    """
    root = Path(tempfile.mkdtemp(prefix="twophase-postgres-"))
    try:
        server = PostgresServer(root, max_prepared_transactions)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def endpoint_from_env() -> PostgresEndpoint | None:
    """The server ``TWOPHASE_POSTGRES_DSN`` names (libpq key/value string or URI), or ``None``."""
    dsn = os.environ.get("TWOPHASE_POSTGRES_DSN")
    if not dsn:
        return None
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(dsn)
    return PostgresEndpoint(
        str(parts.get("host", HOST)),
        int(str(parts.get("port", 5432))),
        str(parts.get("user", "postgres")),
        str(parts.get("password", "")),
        str(parts.get("dbname", "postgres")),
    )
