"""What every service shares: the state file of ``twophase services up``, the wait bounds, a status row.

``<run dir>/services.json`` (mode 0600) holds one entry per service (``kafka``, ``s3``, ``spark``,
``spark-connect``, ``postgres``, ``azure`` (Azurite), ``gcs`` (fake-gcs-server), ``yarn``).
An entry counts only while its recorded process runs and its command line is still the service's
(:data:`PROCESS_MARKERS`), so a reused pid is never mistaken for a service, nor killed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from twophase.integration.services.cache import run_dir
from twophase.integration.services.process import pid_alive
from twophase.sinks.errors import ConfigError

STATE_VERSION = 1
STATE_FILE = "services.json"
ServiceName = Literal["kafka", "s3", "spark", "spark-connect", "postgres", "azure", "gcs", "yarn"]
SERVICES: tuple[ServiceName, ...] = (
    "kafka",
    "s3",
    "spark",
    "spark-connect",
    "postgres",
    "azure",
    "gcs",
    "yarn",
)
SPARK_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
SPARK_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
SPARK_CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
YARN_RM_CLASS = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
#: words that must appear in a recorded pid's command line before ``services down`` kills it
PROCESS_MARKERS: dict[str, str] = {
    "kafka": "kafka.Kafka",
    "s3": "minio",
    "spark": SPARK_MASTER_CLASS,
    "spark-connect": SPARK_CONNECT_CLASS,
    "postgres": "bin/postgres -D ",  # the postmaster: <bin dir>/postgres -D <data dir>
    "azure": "azurite",  # node <cache>/azurite-<version>/node_modules/azurite/.../main.js
    "gcs": "fake-gcs-server",
    "yarn": YARN_RM_CLASS,  # bash -c '<java ... ResourceManager> & <java ... NodeManager> & ...'
}


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
    """Seconds to wait for an endpoint given in the environment: ``TWOPHASE_CONNECT_TIMEOUT_S`` (15).

    Raises:
        ConfigError: the variable is not a positive number.
    """
    return _float_env("TWOPHASE_CONNECT_TIMEOUT_S", 15.0)


def start_timeout_s() -> float:
    """Seconds a native service may take to become ready: ``TWOPHASE_START_TIMEOUT_S`` (180).

    Raises:
        ConfigError: the variable is not a positive number.
    """
    return _float_env("TWOPHASE_START_TIMEOUT_S", 180.0)


def state_path() -> Path:
    """``<run dir>/services.json``: pids, ports, data folders and credentials (mode 0600)."""
    return run_dir() / STATE_FILE


def read_state() -> dict[str, Any]:
    """The recorded services (``{"kafka": {...}, "s3": {...}, "spark": {...}, ...}``), empty when none."""
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


def write_state(services: dict[str, Any]) -> None:
    """Replace the state file atomically with ``services`` (created with mode 0600: it holds keys)."""
    path = state_path()
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"version": STATE_VERSION, **services}, out, indent=2)
    tmp.replace(path)


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (arguments joined by spaces), ``""`` when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_process(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and its command line holds ``marker`` (not a reused pid)."""
    return pid > 0 and pid_alive(pid) and marker in cmdline(pid)


def recorded_alive(name: ServiceName) -> dict[str, Any] | None:
    """The state entry of ``name`` when its recorded process still runs, else None."""
    entry = read_state().get(name)
    if entry is None:
        return None
    if not is_process(int(entry.get("pid", 0)), PROCESS_MARKERS[name]):
        return None
    return dict(entry)


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``twophase services status``.

    Attributes:
        name: "kafka", "s3", "spark", "spark-connect", "postgres", "azure" or "gcs".
        origin: "environment", "services up" or "not running".
        endpoint: bootstrap, endpoint URL, master URL, ``sc://`` URL or PostgreSQL's
            ``host:port/dbname``; "" when not running.
        pid: recorded process id (Spark: the master's), None for external services.
        ready: the readiness check passed (transactional producer / ListBuckets / workers alive /
            Connect port accepting connections).
        detail: the failure reason or extra info (console URL, web UI, data folder).
    """

    name: str
    origin: str
    endpoint: str
    pid: int | None
    ready: bool
    detail: str
