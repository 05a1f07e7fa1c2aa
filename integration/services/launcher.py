"""Find or start the services: environment endpoints first, then ``services up`` state, then native.

Resolution order for each service (DESIGN.md §9):

1. ``TWOPHASE_KAFKA_BOOTSTRAP`` / ``TWOPHASE_S3_ENDPOINT`` set: use that endpoint, after checking it
   within ``TWOPHASE_CONNECT_TIMEOUT_S`` seconds (default 15).
2. A service started by ``twophase services up`` is recorded in ``<run dir>/services.json`` and alive:
   reuse it.
3. Otherwise start the native service in a fresh temporary folder and stop it on exit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from twophase.integration.services.cache import file_lock, run_dir
from twophase.integration.services.kafka import start_kafka, wait_kafka_ready
from twophase.integration.services.process import HOST, ManagedProcess, claim_port, kill_group, pid_alive
from twophase.integration.services.s3 import (
    DEFAULT_REGION,
    S3Endpoint,
    local_credentials,
    start_minio,
    wait_s3_ready,
)
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

STATE_VERSION = 1
STATE_FILE = "services.json"
ServiceName = Literal["kafka", "s3"]
SERVICES: tuple[ServiceName, ...] = ("kafka", "s3")
#: words that must appear in a recorded pid's command line before ``services down`` kills it
PROCESS_MARKERS: dict[str, str] = {"kafka": "kafka.Kafka", "s3": "minio"}


def _float_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def connect_timeout_s() -> float:
    """Seconds to wait for an endpoint given in the environment: ``TWOPHASE_CONNECT_TIMEOUT_S`` (15)."""
    return _float_env("TWOPHASE_CONNECT_TIMEOUT_S", 15.0)


def start_timeout_s() -> float:
    """Seconds a native service may take to become ready: ``TWOPHASE_START_TIMEOUT_S`` (180)."""
    return _float_env("TWOPHASE_START_TIMEOUT_S", 180.0)


def env_s3_endpoint() -> S3Endpoint | None:
    """The S3 endpoint from ``TWOPHASE_S3_*``, or None when ``TWOPHASE_S3_ENDPOINT`` is unset.

    Raises:
        ConfigError: the endpoint is set but the keys are not, or the URL has no http(s) scheme.
    """
    url = os.environ.get("TWOPHASE_S3_ENDPOINT")
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"TWOPHASE_S3_ENDPOINT={url!r} must start with http:// or https://")
    access = os.environ.get("TWOPHASE_S3_ACCESS_KEY")
    secret = os.environ.get("TWOPHASE_S3_SECRET_KEY")
    if not access or not secret:
        raise ConfigError(
            "TWOPHASE_S3_ENDPOINT is set, so TWOPHASE_S3_ACCESS_KEY and TWOPHASE_S3_SECRET_KEY must be"
        )
    return S3Endpoint(url, access, secret, os.environ.get("TWOPHASE_S3_REGION") or DEFAULT_REGION)


def env_kafka_bootstrap() -> str | None:
    """``TWOPHASE_KAFKA_BOOTSTRAP`` ("host:port[,host:port]") or None when unset."""
    return os.environ.get("TWOPHASE_KAFKA_BOOTSTRAP") or None


# ---------------------------------------------------------------- state of `services up`


def state_path() -> Path:
    """``<run dir>/services.json``: pids, ports, data folders and credentials (mode 0600)."""
    return run_dir() / STATE_FILE


def read_state() -> dict[str, Any]:
    """The recorded services (``{"kafka": {...}, "s3": {...}}``), empty when none are recorded."""
    path = state_path()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        return {}
    return {name: data[name] for name in SERVICES if isinstance(data.get(name), dict)}


def _write_state(services: dict[str, Any]) -> None:
    path = state_path()
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"version": STATE_VERSION, **services}, out, indent=2)
    tmp.replace(path)


def recorded_alive(name: ServiceName) -> dict[str, Any] | None:
    """The state entry of ``name`` when its recorded process still runs, else None."""
    entry = read_state().get(name)
    if entry is None:
        return None
    pid = int(entry.get("pid", 0))
    if pid <= 0 or not pid_alive(pid) or PROCESS_MARKERS[name] not in _cmdline(pid):
        return None
    return dict(entry)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _endpoint_of(entry: dict[str, Any]) -> S3Endpoint:
    return S3Endpoint(entry["endpoint_url"], entry["access_key"], entry["secret_key"], entry["region"])


# ---------------------------------------------------------------- starting natively


@dataclass
class NativeKafka:
    """A broker started by this process: its process, bootstrap and data folder."""

    process: ManagedProcess
    bootstrap: str
    data_dir: Path


@dataclass
class NativeS3:
    """A MinIO started by this process: its process, endpoint, console port and data folder."""

    process: ManagedProcess
    endpoint: S3Endpoint
    console_port: int
    data_dir: Path


def launch_kafka(data_dir: Path, detach: bool = False) -> NativeKafka:
    """Start a broker in ``data_dir`` on ``TWOPHASE_KAFKA_PORT`` (or a free port) and wait for it.

    Raises:
        ConfigError: the fixed port is taken.
        ServiceUnavailableError: the broker cannot start or does not become ready in time.
    """
    port = claim_port("TWOPHASE_KAFKA_PORT", "Kafka")
    controller_port = claim_port("TWOPHASE_KAFKA_CONTROLLER_PORT", "Kafka's controller")
    process = start_kafka(data_dir, port, controller_port, detach=detach)
    bootstrap = f"{HOST}:{port}"
    try:
        wait_kafka_ready(bootstrap, start_timeout_s(), process)
    except BaseException:
        process.stop()
        raise
    return NativeKafka(process, bootstrap, data_dir)


def launch_s3(data_dir: Path, detach: bool = False) -> NativeS3:
    """Start MinIO in ``data_dir`` on ``TWOPHASE_S3_PORT`` (or a free port) and wait for it.

    Raises:
        ConfigError: the fixed port is taken, or the given keys are too short.
        ServiceUnavailableError: MinIO cannot be built/started or does not become ready in time.
    """
    port = claim_port("TWOPHASE_S3_PORT", "MinIO")
    console_port = claim_port("TWOPHASE_S3_CONSOLE_PORT", "MinIO's console")
    access, secret = local_credentials()
    endpoint = S3Endpoint(
        f"http://{HOST}:{port}", access, secret, os.environ.get("TWOPHASE_S3_REGION") or DEFAULT_REGION
    )
    process = start_minio(data_dir, port, console_port, endpoint, detach=detach)
    try:
        wait_s3_ready(endpoint, start_timeout_s(), process)
    except BaseException:
        process.stop()
        raise
    return NativeS3(process, endpoint, console_port, data_dir)


@contextlib.contextmanager
def _temporary_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- public context managers


@contextlib.contextmanager
def kafka_service() -> Iterator[str]:
    """Yield a Kafka bootstrap ("127.0.0.1:port") that can run transactions.

    Uses ``TWOPHASE_KAFKA_BOOTSTRAP`` when set, else a broker from ``twophase services up``, else
    starts a native broker in a temporary folder and stops it (whole process group) on exit.

    Raises:
        ConfigError: bad configuration (e.g. ``TWOPHASE_KAFKA_PORT`` already in use).
        ServiceUnavailableError: the broker cannot be reached or started; one-line reason.
    """
    bootstrap = env_kafka_bootstrap()
    if bootstrap is not None:
        wait_kafka_ready(bootstrap, connect_timeout_s())
        yield bootstrap
        return
    entry = recorded_alive("kafka")
    if entry is not None:
        wait_kafka_ready(entry["bootstrap"], connect_timeout_s())
        yield str(entry["bootstrap"])
        return
    with _temporary_dir("twophase-kafka-") as data_dir:
        native = launch_kafka(data_dir)
        try:
            yield native.bootstrap
        finally:
            native.process.stop()


@contextlib.contextmanager
def s3_service() -> Iterator[S3Endpoint]:
    """Yield a working :class:`S3Endpoint`.

    Uses ``TWOPHASE_S3_ENDPOINT`` (+ keys, region) when set, else a MinIO from ``twophase services
    up``, else starts a native MinIO in a temporary folder with fresh random credentials and stops it
    on exit.

    Raises:
        ConfigError: bad configuration (rejected credentials, ``TWOPHASE_S3_PORT`` in use, ...).
        ServiceUnavailableError: the server cannot be reached or started; one-line reason.
    """
    endpoint = env_s3_endpoint()
    if endpoint is not None:
        wait_s3_ready(endpoint, connect_timeout_s())
        yield endpoint
        return
    entry = recorded_alive("s3")
    if entry is not None:
        recorded = _endpoint_of(entry)
        wait_s3_ready(recorded, connect_timeout_s())
        yield recorded
        return
    with _temporary_dir("twophase-minio-") as data_dir:
        native = launch_s3(data_dir)
        try:
            yield native.endpoint
        finally:
            native.process.stop()


# ---------------------------------------------------------------- services up / down / status


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``twophase services status``.

    Attributes:
        name: "kafka" or "s3".
        origin: "environment", "services up" or "not running".
        endpoint: bootstrap or endpoint URL, "" when not running.
        pid: recorded process id, None for external services.
        ready: the readiness check passed (transactional producer / ListBuckets).
        detail: the failure reason or extra info (console URL, data folder).
    """

    name: str
    origin: str
    endpoint: str
    pid: int | None
    ready: bool
    detail: str


def services_up() -> list[ServiceStatus]:
    """Start (detached) every service that is neither in the environment nor already running.

    State goes to ``services.json`` in the run dir so ``services down`` works from any process.
    When one service fails to start, those started by this call are stopped again.

    Raises:
        ConfigError, ServiceUnavailableError: as :func:`kafka_service` / :func:`s3_service`.
    """
    with file_lock(run_dir() / ".services.lock"):
        state = read_state()
        # check everything that can fail fast before starting anything
        endpoint = env_s3_endpoint()
        if endpoint is not None:
            wait_s3_ready(endpoint, connect_timeout_s())
        bootstrap = env_kafka_bootstrap()
        if bootstrap is not None:
            wait_kafka_ready(bootstrap, connect_timeout_s())
        start_kafka_here = bootstrap is None and recorded_alive("kafka") is None
        start_s3_here = endpoint is None and recorded_alive("s3") is None
        if start_kafka_here:
            claim_port("TWOPHASE_KAFKA_PORT", "Kafka")
        if start_s3_here:
            claim_port("TWOPHASE_S3_PORT", "MinIO")
            local_credentials()
        started: list[ManagedProcess] = []
        try:
            if start_kafka_here:
                kafka_dir = run_dir() / "data" / "kafka"
                shutil.rmtree(kafka_dir, ignore_errors=True)
                kafka = launch_kafka(kafka_dir, detach=True)
                started.append(kafka.process)
                state["kafka"] = {
                    "pid": kafka.process.pid,
                    "bootstrap": kafka.bootstrap,
                    "data_dir": str(kafka.data_dir),
                }
            if start_s3_here:
                s3_dir = run_dir() / "data" / "minio"
                shutil.rmtree(s3_dir, ignore_errors=True)
                s3 = launch_s3(s3_dir, detach=True)
                started.append(s3.process)
                state["s3"] = {
                    "pid": s3.process.pid,
                    "endpoint_url": s3.endpoint.endpoint_url,
                    "access_key": s3.endpoint.access_key,
                    "secret_key": s3.endpoint.secret_key,
                    "region": s3.endpoint.region,
                    "console_url": f"http://{HOST}:{s3.console_port}",
                    "data_dir": str(s3.data_dir),
                }
        except BaseException:
            for process in started:
                process.stop()
            raise
        _write_state(state)
    return services_status()


def services_down() -> list[str]:
    """Stop the services recorded by ``services up`` (whole process groups) and delete their data.

    Returns the names of the services stopped. A recorded pid whose command line is not the
    service's (reused pid) is never killed.
    """
    stopped: list[str] = []
    with file_lock(run_dir() / ".services.lock"):
        for name, entry in read_state().items():
            pid = int(entry.get("pid", 0))
            if pid > 0 and pid_alive(pid) and PROCESS_MARKERS[name] in _cmdline(pid):
                kill_group(pid)
                stopped.append(name)
            data_dir = entry.get("data_dir")
            if data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
        state_path().unlink(missing_ok=True)
    return stopped


def services_status() -> list[ServiceStatus]:
    """Where each service comes from and whether it answers (bounded by the connect timeout)."""
    rows: list[ServiceStatus] = []
    timeout = min(connect_timeout_s(), 5.0)
    bootstrap = env_kafka_bootstrap()
    entry = recorded_alive("kafka")
    if bootstrap is not None:
        rows.append(_kafka_row("environment", bootstrap, None, timeout, "TWOPHASE_KAFKA_BOOTSTRAP"))
    elif entry is not None:
        rows.append(_kafka_row("services up", entry["bootstrap"], entry["pid"], timeout, entry["data_dir"]))
    else:
        rows.append(ServiceStatus("kafka", "not running", "", None, False, "started on demand by tests/demo"))
    try:
        endpoint = env_s3_endpoint()
    except ConfigError as exc:
        rows.append(
            ServiceStatus(
                "s3", "environment", os.environ.get("TWOPHASE_S3_ENDPOINT", ""), None, False, str(exc)
            )
        )
        return rows
    s3_entry = recorded_alive("s3")
    if endpoint is not None:
        rows.append(_s3_row("environment", endpoint, None, timeout, "TWOPHASE_S3_ENDPOINT"))
    elif s3_entry is not None:
        detail = f"console {s3_entry.get('console_url', '')}"
        rows.append(_s3_row("services up", _endpoint_of(s3_entry), s3_entry["pid"], timeout, detail))
    else:
        rows.append(ServiceStatus("s3", "not running", "", None, False, "started on demand by tests/demo"))
    return rows


def _kafka_row(origin: str, bootstrap: str, pid: int | None, timeout: float, detail: str) -> ServiceStatus:
    try:
        wait_kafka_ready(bootstrap, timeout)
    except ServiceUnavailableError as exc:
        return ServiceStatus("kafka", origin, bootstrap, pid, False, str(exc))
    return ServiceStatus("kafka", origin, bootstrap, pid, True, detail)


def _s3_row(origin: str, endpoint: S3Endpoint, pid: int | None, timeout: float, detail: str) -> ServiceStatus:
    try:
        wait_s3_ready(endpoint, timeout)
    except (ServiceUnavailableError, ConfigError) as exc:
        return ServiceStatus("s3", origin, endpoint.endpoint_url, pid, False, str(exc))
    return ServiceStatus("s3", origin, endpoint.endpoint_url, pid, True, detail)
