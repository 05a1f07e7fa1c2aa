"""The Spark Connect server as a service, found or started like the Spark cluster (issue #18).

Resolution order (:func:`spark_connect_service`, the Connect tests' fixture):

1. ``TWOPHASE_SPARK_CONNECT`` set (``sc://host:port``): that server, once its port accepts
   connections within ``TWOPHASE_CONNECT_TIMEOUT_S``.
2. A server started by ``twophase services up --spark-connect`` that still runs, was started for
   the same S3 endpoint and ships the current sources: reuse it.
3. Otherwise a temporary :class:`SparkConnectServer` in a fresh folder, stopped on exit.

A server started here (``local[2]``) gets twophase as users ship it: the built wheel under a
``.zip`` name (``--py-files``) for workers on a Python with the dependencies only
(:mod:`twophase.integration.spark_shipping`), and the S3 endpoint's ``AWS_*`` variables in its
environment, where the sinks it runs find them. The wheel is fixed when the server starts, so a
recorded server is reused only while the sources hash the same (its state holds the hash).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from twophase.integration.services.process import kill_group, tcp_refusal, wait_ready
from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.services.spark_connect import SparkConnectServer, spark_connect_from_env
from twophase.integration.services.state import (
    SPARK_CONNECT_CLASS,
    ServiceStatus,
    connect_timeout_s,
    is_process,
    recorded_alive,
    start_timeout_s,
)
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

NAME: Final = "spark-connect"
DEFAULT_PORT = 15002
"""Spark Connect's port when an ``sc://`` URL names none."""


def connect_address(url: str) -> tuple[str, int]:
    """The (host, port) of an ``sc://host[:port][/;param=value…]`` URL (port 15002 when absent).

    Raises:
        ConfigError: not an ``sc://`` URL with a host and a valid port.
    """
    parsed = urlsplit(url)
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if parsed.scheme != "sc" or not parsed.hostname or port == -1:
        raise ConfigError(f"Spark Connect URL {url!r} must be sc://host:port")
    return parsed.hostname, DEFAULT_PORT if port is None else port


def check_spark_connect(url: str, timeout_s: float) -> None:
    """Wait until the server's port accepts a TCP connection.

    Raises:
        ConfigError: not an ``sc://host:port`` URL.
        ServiceUnavailableError: nothing answers within ``timeout_s`` seconds.
    """
    address = connect_address(url)
    reason = wait_ready(lambda: tcp_refusal([address], min(timeout_s, 2.0)), timeout_s, 0.3)
    if reason is not None:
        raise ServiceUnavailableError(
            f"Spark Connect server {url} is not reachable within {timeout_s:g} s ({reason})"
        )


def s3_fingerprint(s3: S3Endpoint) -> str:
    """16 hex digits of SHA-256 over the endpoint's ``AWS_*`` variables: tells whether a recorded
    server was started for this endpoint and these keys, without recording the secret twice."""
    return hashlib.sha256(json.dumps(s3.aws_env(), sort_keys=True).encode()).hexdigest()[:16]


def _sources_hash() -> str:
    # imported here: spark_shipping imports this package (its cache), which imports this module
    from twophase.integration.spark_shipping import sources_hash

    return sources_hash()


def launch_connect_server(root: Path, s3: S3Endpoint, detach: bool = False) -> SparkConnectServer:
    """Start a ``local[2]`` server under ``root`` that ships the current twophase wheel and reaches
    ``s3`` through its ``AWS_*`` environment; wait until it listens.

    The first call on a machine builds the wheel and the workers' Python (cached afterwards).

    Raises:
        ServiceUnavailableError: the wheel or the workers' Python cannot be built, or the server
            does not listen within ``TWOPHASE_START_TIMEOUT_S`` (with its log tail).
    """
    from twophase.integration.spark_shipping import (
        REPO,
        ShippingError,
        build_wheel,
        executor_python,
        py_file,
    )

    if not (REPO / "setup.cfg").is_file():
        # twophase installed from its wheel (a `make compat` cell): the workers run this Python as is
        python, py_files = Path(sys.executable), []
    else:
        try:
            python, py_files = executor_python(), [py_file(build_wheel())]
        except (ShippingError, subprocess.TimeoutExpired) as exc:
            raise ServiceUnavailableError(f"cannot ship twophase to a Spark Connect server: {exc}") from exc
    return SparkConnectServer(
        root,
        python=str(python),
        py_files=py_files,
        env=s3.aws_env(),
        timeout_s=start_timeout_s(),
        detach=detach,
    )


def connect_state(server: SparkConnectServer, s3: S3Endpoint) -> dict[str, Any]:
    """The state-file entry of a server started by ``services up``: pid, URL, folder, the S3
    endpoint it reaches (URL and :func:`s3_fingerprint`) and the hash of the sources it ships."""
    return {
        "pid": server.process.pid,
        "url": server.url,
        "data_dir": str(server.root),
        "log": str(server.process.log_file),
        "s3_endpoint_url": s3.endpoint_url,
        "s3_fingerprint": s3_fingerprint(s3),
        "sources_hash": _sources_hash(),
    }


def stale_reason(entry: dict[str, Any], s3: S3Endpoint) -> str | None:
    """Why a recorded server cannot serve ``s3`` with the current sources, or None when it can."""
    if entry.get("s3_fingerprint") != s3_fingerprint(s3):
        return f"it reaches S3 at {entry.get('s3_endpoint_url')} with other keys or endpoint"
    if entry.get("sources_hash") != _sources_hash():
        return "the sources changed since it started (it ships the wheel of that time)"
    return None


def stop_recorded_connect(entry: dict[str, Any]) -> bool:
    """Stop a recorded server with its Python workers (its process group); a pid whose command line
    is no longer the server's is left alone. Returns whether it was running."""
    pid = int(entry.get("pid", 0))
    if is_process(pid, SPARK_CONNECT_CLASS):
        kill_group(pid)
        return True
    return False


def up_spark_connect(
    state: dict[str, Any], s3: S3Endpoint, fresh_dir: Callable[[str], Path]
) -> Callable[[], None] | None:
    """``services up --spark-connect`` once ``TWOPHASE_SPARK_CONNECT`` is known unset: keep a
    recorded server that is alive and fits (:func:`stale_reason`), else stop it and start a
    detached one in ``fresh_dir("spark-connect")``, recorded in ``state``.

    Returns:
        How to stop the server started here (when a later service fails), or None if none was.

    Raises:
        ServiceUnavailableError: as :func:`launch_connect_server`.
    """
    entry = state.get(NAME)
    if entry is not None:
        reason = stale_reason(entry, s3) if recorded_alive(NAME) is not None else "it has exited"
        if reason is None:
            return None
        log.warning("restarting the recorded Spark Connect server at %s: %s", entry.get("url"), reason)
        stop_recorded_connect(state.pop(NAME))
    server = launch_connect_server(fresh_dir(NAME), s3, detach=True)
    state[NAME] = connect_state(server, s3)
    return server.stop


@contextlib.contextmanager
def spark_connect_service(s3: S3Endpoint) -> Iterator[str]:
    """Yield the ``sc://`` URL of a Spark Connect server whose sinks reach ``s3``.

    Uses ``TWOPHASE_SPARK_CONNECT`` when set, else a server from ``twophase services up
    --spark-connect`` that fits (:func:`stale_reason`), else starts one in a temporary folder and
    stops it (with its Python workers) on exit.

    Raises:
        ConfigError: ``TWOPHASE_SPARK_CONNECT`` is not an ``sc://host:port`` URL.
        ServiceUnavailableError: the given server does not answer, or one cannot be started.
    """
    given = spark_connect_from_env()
    if given is not None:
        check_spark_connect(given, connect_timeout_s())
        yield given
        return
    entry = recorded_alive(NAME)
    if entry is not None:
        reason = stale_reason(entry, s3)
        if reason is None:
            check_spark_connect(entry["url"], connect_timeout_s())
            yield str(entry["url"])
            return
        log.warning("not reusing the Spark Connect server of `services up` (%s): %s", entry["url"], reason)
    with tempfile.TemporaryDirectory(prefix="twophase-spark-connect-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        server = launch_connect_server(root, s3)
        try:
            yield server.url
        finally:
            server.stop()


def connect_status(timeout_s: float, recorded: dict[str, Any] | None) -> ServiceStatus | None:
    """The ``services status`` row of the Spark Connect server: given, recorded (alive or not), or
    None when neither (the row appears only once a server is given or was started).

    Args:
        timeout_s: bound of the port check, seconds.
        recorded: the state file's ``spark-connect`` entry, alive or not, or None.
    """
    given = spark_connect_from_env()
    if given is not None:
        try:
            check_spark_connect(given, timeout_s)
        except (ConfigError, ServiceUnavailableError) as exc:
            return ServiceStatus(NAME, "environment", given, None, False, str(exc))
        return ServiceStatus(NAME, "environment", given, None, True, "TWOPHASE_SPARK_CONNECT")
    if recorded is None:
        return None
    if recorded_alive(NAME) is None:
        detail = f"recorded server (pid {recorded.get('pid')}) has exited; `services up --spark-connect`"
        return ServiceStatus(NAME, "not running", "", None, False, detail)
    url, pid = str(recorded["url"]), int(recorded["pid"])
    try:
        check_spark_connect(url, timeout_s)
    except ServiceUnavailableError as exc:
        return ServiceStatus(NAME, "services up", url, pid, False, str(exc))
    detail = f"local[2], S3 {recorded.get('s3_endpoint_url')}, log {recorded.get('log')}"
    if recorded.get("sources_hash") != _sources_hash():
        detail += "; ships older sources: tests start their own (`services up` restarts it)"
    return ServiceStatus(NAME, "services up", url, pid, True, detail)
