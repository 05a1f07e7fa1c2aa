"""One native service's place in ``services up``, ``services status`` and the tests' fixtures, for
services that need nothing but a folder and a port (Azurite, fake-gcs-server: issue #46).

Resolution order, as for Kafka and S3 (:mod:`twophase.integration.services.launcher`): an endpoint
given in the environment (checked), else one recorded by ``twophase services up`` whose process
still runs, else a native server in a temporary folder for the block.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from twophase.integration.services.process import ManagedProcess, free_port, wait_ready
from twophase.integration.services.state import (
    ServiceName,
    ServiceStatus,
    connect_timeout_s,
    recorded_alive,
    start_timeout_s,
)
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)


def wait_started(
    what: str, url: str, check: Callable[[], str | None], timeout_s: float, process: ManagedProcess | None
) -> None:
    """Call ``check`` (None: it answers; else why not) every 0.3 s until it answers.

    Raises:
        ServiceUnavailableError: ``process`` exited, or no answer within ``timeout_s`` seconds
            (the message names ``what`` at ``url`` and the last reason).
    """

    def attempt() -> str | None:
        if process is not None and not process.running():
            raise ServiceUnavailableError(f"{what} on {url} exited during start-up: {process.log_tail(3)}")
        return check()

    reason = wait_ready(attempt, timeout_s, 0.3)
    if reason is not None:
        raise ServiceUnavailableError(f"{what} at {url} is not reachable within {timeout_s:g} s ({reason})")


class Server(Protocol[E_co]):
    """A native server: its endpoint, start/stop, and its ``services.json`` entry."""

    @property
    def endpoint(self) -> E_co:
        """Where clients reach it."""
        ...

    def start(self, detach: bool = False) -> None:
        """Start it and wait until it answers (detached: it outlives this process)."""
        ...

    def stop(self) -> None:
        """Stop it; idempotent."""
        ...

    def state(self) -> dict[str, Any]:
        """Its ``services.json`` entry (``pid``, ``data_dir`` and how to reach it)."""
        ...


@dataclass
class NativeServer(ABC, Generic[E]):
    """One native server in its own folder on a free port of 127.0.0.1; a subclass says how its
    endpoint looks, how it is launched and how readiness is checked.

    Attributes:
        root: its folder (data and log below it).
        port: the port it listens on, chosen free when the object is made and kept across restarts.
        endpoint: where clients reach it (built from ``port``).
        process: the running process, once :meth:`start` ran.
    """

    root: Path
    port: int = field(init=False)
    endpoint: E = field(init=False)
    process: ManagedProcess | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.endpoint = self.endpoint_on(self.port)

    @abstractmethod
    def endpoint_on(self, port: int) -> E:
        """The endpoint of a server listening on ``port`` (called once, on construction)."""

    @abstractmethod
    def launch(self, detach: bool) -> ManagedProcess:
        """Start the process (detached: it outlives this process) without waiting.

        Raises:
            ServiceUnavailableError: it cannot be installed or started.
        """

    @abstractmethod
    def wait_ready(self, timeout_s: float, process: ManagedProcess) -> None:
        """Block until ``process`` answers on :attr:`endpoint`.

        Raises:
            ConfigError, ServiceUnavailableError: it refuses the credentials, exited, or did not
                answer within ``timeout_s`` seconds.
        """

    @abstractmethod
    def reach(self) -> dict[str, Any]:
        """The ``services.json`` fields that say how to reach it (what ``recorded`` reads back)."""

    def start(self, detach: bool = False) -> None:
        """Start it (again, on the same port and folder) and wait until it answers; a process that
        does not answer in time is stopped.

        Raises:
            ConfigError, ServiceUnavailableError: as :meth:`launch` and :meth:`wait_ready`.
        """
        self.process = self.launch(detach)
        try:
            self.wait_ready(start_timeout_s(), self.process)
        except BaseException:
            self.process.stop()
            raise

    def stop(self) -> None:
        """Stop the process group; idempotent."""
        if self.process is not None:
            self.process.stop()

    def state(self) -> dict[str, Any]:
        """The ``services.json`` entry: ``pid``, ``data_dir`` and :meth:`reach`'s fields."""
        assert self.process is not None
        return {"pid": self.process.pid, **self.reach(), "data_dir": str(self.root)}


@dataclass(frozen=True)
class NativeService(Generic[E]):
    """How one service is found, started, checked and shown.

    Attributes:
        name: its ``services.json`` entry and status row (``"azure"``, ``"gcs"``).
        what: its name in messages (``"Azurite"``).
        env_var: the variable that gives an endpoint instead.
        given: the endpoint of ``env_var``, or None (raises ConfigError when malformed).
        recorded: the endpoint of a ``services.json`` entry.
        wait: blocks until the endpoint answers, within the given seconds.
        text: the endpoint as the status row shows it (no secrets).
        server: a native server in a folder.
    """

    name: ServiceName
    what: str
    env_var: str
    given: Callable[[], E | None]
    recorded: Callable[[dict[str, Any]], E]
    wait: Callable[[E, float], None]
    text: Callable[[E], str]
    server: Callable[[Path], Server[E]]

    def up(self, state: dict[str, Any], fresh_dir: Callable[[str], Path]) -> Callable[[], None] | None:
        """For ``services up``: nothing when the environment gives an endpoint (checked) or a
        recorded server runs; else start one detached in ``fresh_dir(name)`` and record it in
        ``state``.

        Returns:
            How to stop what was started, or None.

        Raises:
            ConfigError, ServiceUnavailableError: the given endpoint does not answer, or a native
                server cannot start.
        """
        given = self.given()
        if given is not None:
            self.wait(given, connect_timeout_s())
            return None
        if recorded_alive(self.name) is not None:
            return None
        server = self.server(fresh_dir(self.name))
        server.start(detach=True)
        state[self.name] = server.state()
        return server.stop

    def status(self, timeout_s: float, entry: dict[str, Any] | None) -> ServiceStatus | None:
        """The status row: given by the environment, recorded (``entry``), or None when neither."""
        try:
            given = self.given()
        except ConfigError as e:
            return ServiceStatus(self.name, "environment", "", None, False, str(e))
        if given is not None:
            return self._row("environment", given, None, timeout_s, self.env_var)
        if entry is None:
            return None
        alive = recorded_alive(self.name)
        if alive is None:
            return ServiceStatus(self.name, "not running", "", None, False, f"recorded {self.what} is gone")
        endpoint = self.recorded(alive)
        return self._row("services up", endpoint, int(alive["pid"]), timeout_s, str(alive["data_dir"]))

    def _row(self, origin: str, endpoint: E, pid: int | None, timeout_s: float, detail: str) -> ServiceStatus:
        try:
            self.wait(endpoint, timeout_s)
        except (ServiceUnavailableError, ConfigError) as e:
            return ServiceStatus(self.name, origin, self.text(endpoint), pid, False, str(e))
        return ServiceStatus(self.name, origin, self.text(endpoint), pid, True, detail)

    @contextlib.contextmanager
    def service(self) -> Iterator[E]:
        """The environment's endpoint, else the recorded server's, else a native server in a
        temporary folder, stopped and deleted on exit.

        Raises:
            ConfigError, ServiceUnavailableError: as :meth:`up`.
        """
        given = self.given()
        if given is not None:
            self.wait(given, connect_timeout_s())
            yield given
            return
        entry = recorded_alive(self.name)
        if entry is not None:
            yield self.recorded(entry)
            return
        root = Path(tempfile.mkdtemp(prefix=f"twophase-{self.name}-"))
        server = self.server(root)
        try:
            server.start()
            yield server.endpoint
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
