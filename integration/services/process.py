"""Child processes of the native services, and the free/fixed ports they bind.

Every service runs in its own process group (``start_new_session``), so stopping it kills the JVM or
server together with anything it forked. Stops are registered with :mod:`atexit`, so nothing keeps
running after the Python process ends, even when a test fails.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import tenacity

from twophase.sinks.errors import ConfigError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def claim_port(env_var: str, what: str) -> int:
    """The port for ``what``: the fixed one in ``$env_var`` when set, else a free one.

    Raises:
        ConfigError: ``$env_var`` is not a port number, or that port is already in use on 127.0.0.1.
    """
    raw = os.environ.get(env_var)
    if not raw:
        return free_port()
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{env_var}={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{env_var}={port} is not a port number (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"cannot start {what}: port {HOST}:{port} ({env_var}) is already in use"
                ) from None
            raise ConfigError(f"cannot start {what} on {HOST}:{port} ({env_var}): {exc.strerror}") from None
    return port


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (and is not a zombie we could reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_ready(check: Callable[[], str | None], timeout_s: float, every_s: float) -> str | None:
    """Call ``check`` every ``every_s`` seconds until it returns ``None`` (ready) or ``timeout_s``
    seconds have passed (tenacity does the waiting).

    Args:
        check: ``None`` when the service is ready, else why not (one line); it may raise to stop
            the wait at once (e.g. a ``ServiceUnavailableError`` for a process that exited).

    Returns:
        ``None`` when ready in time, else the last reason ``check`` gave.
    """
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(every_s),
        retry=tenacity.retry_if_result(lambda reason: reason is not None),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else "no attempt",
    )
    reason: str | None = retrying(check)
    return reason


def tcp_refusal(addresses: Sequence[tuple[str, int]], timeout_s: float) -> str | None:
    """``None`` when one of ``addresses`` (host, port) accepts a TCP connection within ``timeout_s``
    seconds, else the last error's name (for :func:`wait_ready`)."""
    reason = "no address"
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
    return reason


KILLED_GONE_S = 60.0
"""Seconds :func:`kill_group` waits for a SIGKILLed group to vanish: the kernel ends (and init
reaps) its processes in their own time, seconds on a loaded machine (issue #45 item 7)."""


def kill_group(pid: int, grace_s: float = 10.0, gone_s: float = KILLED_GONE_S) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL it after ``grace_s`` seconds, and
    return once it is gone (or after ``gone_s`` more seconds, with a warning): what the group's
    processes held (ports, files in their data folder) is free when this returns."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if _group_lingers(pid, grace_s):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        await_group_gone(pid, gone_s)


def await_group_gone(pgid: int, timeout_s: float = KILLED_GONE_S) -> bool:
    """Wait until no process of group ``pgid`` is left (tenacity polls); False, with a warning, if
    one still is after ``timeout_s`` seconds."""
    if _group_lingers(pgid, timeout_s):
        log_event(log, logging.WARNING, "process group still alive", pgid=pgid, waited_s=timeout_s)
        return False
    return True


def _group_lingers(pgid: int, timeout_s: float) -> bool:
    """Whether group ``pgid`` still has a process after polling it for ``timeout_s`` seconds."""
    waiting = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(0.1),
        retry=tenacity.retry_if_result(bool),
        retry_error_callback=lambda state: True,
    )
    lingers: bool = waiting(_group_alive, pgid)
    return lingers


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # the leader may be a zombie child of ours: reap it so the group can vanish
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    return True


def _exit_on_sigterm() -> None:
    """Make SIGTERM run atexit handlers (it kills Python without them by default), so a CI timeout
    or ``kill`` of the test run still stops the services. Only replaces the default disposition."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


class ManagedProcess:
    """A service process in its own process group, logging to a file, stopped at interpreter exit.

    Args:
        name: short service name for logs and errors ("kafka", "minio").
        argv: the command line.
        log_file: receives the process's stdout and stderr.
        env: the full environment of the child.
        detach: when True the process is meant to outlive this Python process (``services up``):
            no atexit stop is registered.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_file: Path,
        env: Mapping[str, str],
        cwd: Path,
        detach: bool = False,
    ) -> None:
        self.name = name
        self.log_file = log_file
        with log_file.open("ab") as out:
            self._popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        self.pid = self._popen.pid
        self.paused = False
        if not detach:
            atexit.register(self.stop)
            _exit_on_sigterm()
        log_event(log, logging.INFO, "started", service=name, pid=self.pid, log=log_file)

    def running(self) -> bool:
        """True while the process has not exited."""
        return self._popen.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` non-empty lines of the log, joined by " | " (for one-line errors)."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        kept = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(kept[-lines:])

    def kill(self) -> None:
        """SIGKILL the whole process group at once (a crash: no shutdown hooks) and reap it; idempotent."""
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        self._reap()
        log.warning("killed service=%s pid=%d signal=SIGKILL", self.name, self.pid)

    def pause(self) -> None:
        """SIGSTOP the whole process group: it keeps its sockets but answers nothing until resumed.

        Raises:
            ProcessLookupError: the process has exited.
        """
        os.killpg(self.pid, signal.SIGSTOP)
        self.paused = True
        log.warning("paused service=%s pid=%d signal=SIGSTOP", self.name, self.pid)

    def resume(self) -> None:
        """SIGCONT the whole process group (after :meth:`pause`); a no-op when it has exited."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGCONT)
        if self.paused:
            log.warning("resumed service=%s pid=%d signal=SIGCONT", self.name, self.pid)
        self.paused = False

    def _reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=5)
        atexit.unregister(self.stop)

    def stop(self) -> None:
        """Stop the whole process group (SIGTERM, then SIGKILL after a grace period); idempotent.

        A paused process is resumed first, so that it can act on SIGTERM.
        """
        if self._popen.poll() is None:
            if self.paused:
                self.resume()
            kill_group(self.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=5)
        atexit.unregister(self.stop)
        log_event(log, logging.INFO, "stopped", service=self.name, pid=self.pid)
