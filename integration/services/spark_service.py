"""The Spark standalone cluster as a service, found or started like Kafka and S3 (issue #17).

Resolution order:

1. ``TWOPHASE_SPARK_MASTER`` set (``spark://host:port``): that cluster, once its master accepts
   connections within ``TWOPHASE_CONNECT_TIMEOUT_S``.
2. A cluster started by ``twophase services up --spark-cluster`` whose master still runs: reuse it.
3. Otherwise (:func:`spark_cluster_service`) a temporary :class:`SparkCluster` of
   :data:`WORKERS` workers in a fresh folder, stopped with its executors on exit.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from twophase.integration.services.process import kill_group, tcp_refusal, wait_ready
from twophase.integration.services.spark_cluster import SparkCluster, alive_workers, spark_master_from_env
from twophase.integration.services.state import (
    SPARK_MASTER_CLASS,
    SPARK_WORKER_CLASS,
    ServiceStatus,
    connect_timeout_s,
    is_process,
    recorded_alive,
    start_timeout_s,
)
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"
"""The native cluster: two one-core workers of 1 GiB each (one executor each, on a 2-core machine)."""


def master_addresses(master_url: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a ``spark://host:port[,host:port]`` URL (several: standby masters).

    Raises:
        ConfigError: not a ``spark://`` URL with ports.
    """
    if not master_url.startswith("spark://"):
        raise ConfigError(f"Spark master {master_url!r} must be spark://host:port")
    out = []
    for part in master_url[len("spark://") :].split(","):
        parsed = urlsplit("spark://" + part)
        try:
            port = parsed.port
        except ValueError:
            port = None
        if not parsed.hostname or port is None:
            raise ConfigError(f"Spark master {master_url!r} must be spark://host:port")
        out.append((parsed.hostname, port))
    return out


def check_spark_master(master_url: str, timeout_s: float) -> None:
    """Wait until one of the master's addresses accepts a TCP connection.

    Raises:
        ConfigError: not a ``spark://host:port`` URL.
        ServiceUnavailableError: nothing answers within ``timeout_s`` seconds.
    """
    addresses = master_addresses(master_url)
    reason = wait_ready(lambda: tcp_refusal(addresses, min(timeout_s, 2.0)), timeout_s, 0.3)
    if reason is not None:
        raise ServiceUnavailableError(
            f"Spark master {master_url} is not reachable within {timeout_s:g} s ({reason})"
        )


def launch_spark_cluster(root: Path, detach: bool = False) -> SparkCluster:
    """Start a master and :data:`WORKERS` workers under ``root`` and wait for every worker.

    Raises:
        ServiceUnavailableError: not ready within ``TWOPHASE_START_TIMEOUT_S`` (the master's log tail).
    """
    return SparkCluster(
        root, WORKERS, WORKER_CORES, WORKER_MEMORY, timeout_s=start_timeout_s(), detach=detach
    )


def spark_state(cluster: SparkCluster) -> dict[str, Any]:
    """The state-file entry of a cluster started by ``services up``."""
    return {
        "pid": cluster.master.pid,
        "worker_pids": [w.pid for w in cluster.workers],
        "master_url": cluster.master_url,
        "ui_url": cluster.ui_url,
        "data_dir": str(cluster.root),
    }


def stop_recorded_spark(entry: dict[str, Any]) -> bool:
    """Stop a recorded cluster: its workers (with their executors), then its master. Pids whose
    command line is no longer Spark's are left alone. Returns whether the master was running."""
    for pid in entry.get("worker_pids", []):
        if is_process(int(pid), SPARK_WORKER_CLASS):
            kill_group(int(pid))
    master = int(entry.get("pid", 0))
    if is_process(master, SPARK_MASTER_CLASS):
        kill_group(master)
        return True
    return False


@contextlib.contextmanager
def spark_cluster_service() -> Iterator[str]:
    """Yield the master URL (``spark://host:port``) of a standalone cluster.

    Uses ``TWOPHASE_SPARK_MASTER`` when set, else a cluster from ``twophase services up
    --spark-cluster``, else starts one in a temporary folder and stops it (workers, executors,
    master) on exit.

    Raises:
        ConfigError: ``TWOPHASE_SPARK_MASTER`` is not a ``spark://host:port`` URL.
        ServiceUnavailableError: the master does not answer, or the cluster cannot start.
    """
    given = spark_master_from_env()
    if given is not None:
        check_spark_master(given, connect_timeout_s())
        yield given
        return
    entry = recorded_alive("spark")
    if entry is not None:
        check_spark_master(entry["master_url"], connect_timeout_s())
        yield str(entry["master_url"])
        return
    with tempfile.TemporaryDirectory(prefix="twophase-spark-cluster-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        cluster = launch_spark_cluster(root)
        try:
            yield cluster.master_url
        finally:
            cluster.stop()


def spark_status(timeout_s: float) -> ServiceStatus:
    """The ``services status`` row of the Spark cluster: given, recorded or not running.

    A recorded cluster is ready when the master counts all its workers alive; a given one when its
    master accepts connections.
    """
    given = spark_master_from_env()
    if given is not None:
        try:
            check_spark_master(given, timeout_s)
        except (ConfigError, ServiceUnavailableError) as exc:
            return ServiceStatus("spark", "environment", given, None, False, str(exc))
        return ServiceStatus("spark", "environment", given, None, True, "TWOPHASE_SPARK_MASTER")
    entry = recorded_alive("spark")
    if entry is None:
        return ServiceStatus(
            "spark", "not running", "", None, False, "started by `services up --spark-cluster`"
        )
    want = len(entry.get("worker_pids", []))
    alive = alive_workers(entry["ui_url"], timeout_s)
    detail = f"{alive} of {want} workers alive, web UI {entry['ui_url']}"
    return ServiceStatus("spark", "services up", entry["master_url"], entry["pid"], alive >= want, detail)
