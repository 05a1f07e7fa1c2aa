"""Find or start the services: environment endpoints first, then ``services up`` state, then native.

Resolution order for each service (DESIGN.md §9):

1. ``TWOPHASE_KAFKA_BOOTSTRAP`` / ``TWOPHASE_S3_ENDPOINT`` set: use that endpoint, after checking it
   within ``TWOPHASE_CONNECT_TIMEOUT_S`` seconds (default 15).
2. A service started by ``twophase services up`` is recorded in ``<run dir>/services.json`` and alive:
   reuse it.
3. Otherwise start the native service in a fresh temporary folder and stop it on exit.

The Spark standalone cluster (``services up --spark-cluster``) follows the same order, with
``TWOPHASE_SPARK_MASTER`` (:mod:`twophase.integration.services.spark_service`), and so does the
Spark Connect server (``--spark-connect``, ``TWOPHASE_SPARK_CONNECT``:
:mod:`twophase.integration.services.connect_service`). The state file and the wait bounds live in
:mod:`twophase.integration.services.state`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twophase.integration.services.azurite import azure_status, up_azurite
from twophase.integration.services.cache import file_lock, run_dir
from twophase.integration.services.connect_service import (
    check_spark_connect,
    connect_status,
    up_spark_connect,
)
from twophase.integration.services.gcs_server import gcs_status, up_gcs
from twophase.integration.services.kafka import start_kafka, wait_kafka_ready
from twophase.integration.services.postgres import PostgresEndpoint
from twophase.integration.services.postgres_service import (
    postgres_dsn,
    postgres_status,
    stop_recorded_postgres,
    up_postgres,
)
from twophase.integration.services.process import HOST, ManagedProcess, claim_port, free_port, kill_group
from twophase.integration.services.s3 import (
    DEFAULT_REGION,
    S3Endpoint,
    local_credentials,
    start_minio,
    wait_s3_ready,
)
from twophase.integration.services.spark_cluster import spark_master_from_env
from twophase.integration.services.spark_connect import spark_connect_from_env
from twophase.integration.services.spark_service import (
    check_spark_master,
    launch_spark_cluster,
    spark_state,
    spark_status,
    stop_recorded_spark,
)
from twophase.integration.services.state import (
    PROCESS_MARKERS,
    SERVICES,
    STATE_FILE,
    STATE_VERSION,
    ServiceName,
    ServiceStatus,
    connect_timeout_s,
    is_process,
    read_state,
    recorded_alive,
    start_timeout_s,
    state_path,
    write_state,
)
from twophase.integration.services.yarn import up_yarn, yarn_status
from twophase.sinks.errors import ConfigError, ServiceUnavailableError

log = logging.getLogger(__name__)

__all__ = [  # the state helpers stay importable from here, where they lived first
    "PROCESS_MARKERS",
    "SERVICES",
    "STATE_FILE",
    "STATE_VERSION",
    "NativeKafka",
    "NativeS3",
    "ServiceName",
    "ServiceStatus",
    "connect_timeout_s",
    "env_kafka_bootstrap",
    "env_s3_endpoint",
    "kafka_service",
    "launch_kafka",
    "launch_s3",
    "read_state",
    "recorded_alive",
    "s3_service",
    "services_down",
    "services_status",
    "services_up",
    "start_timeout_s",
    "state_path",
]


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


def given_env(
    kafka_bootstrap: str, s3: S3Endpoint, postgres: PostgresEndpoint | None = None
) -> dict[str, str]:
    """The ``TWOPHASE_*`` variables that make another process use these running services (the
    inverse of :func:`env_kafka_bootstrap`, :func:`env_s3_endpoint` and, with ``postgres``,
    ``TWOPHASE_POSTGRES_DSN``: :func:`~twophase.integration.services.postgres.endpoint_from_env`)."""
    env = {
        "TWOPHASE_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TWOPHASE_S3_ENDPOINT": s3.endpoint_url,
        "TWOPHASE_S3_ACCESS_KEY": s3.access_key,
        "TWOPHASE_S3_SECRET_KEY": s3.secret_key,
        "TWOPHASE_S3_REGION": s3.region,
    }
    if postgres is not None:
        env["TWOPHASE_POSTGRES_DSN"] = postgres_dsn(postgres)
    return env


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


def launch_kafka(
    data_dir: Path, detach: bool = False, settings: Mapping[str, str] | None = None
) -> NativeKafka:
    """Start a broker in ``data_dir`` on ``TWOPHASE_KAFKA_PORT`` (or a free port) and wait for it.
    A broker with its own ``settings`` (laid over the defaults) always takes free ports: it runs
    beside the usual one.

    Raises:
        ConfigError: the fixed port is taken.
        ServiceUnavailableError: the broker cannot start or does not become ready in time.
    """
    if settings:
        port, controller_port = free_port(), free_port()
    else:
        port = claim_port("TWOPHASE_KAFKA_PORT", "Kafka")
        controller_port = claim_port("TWOPHASE_KAFKA_CONTROLLER_PORT", "Kafka's controller")
    process = start_kafka(data_dir, port, controller_port, detach=detach, settings=settings)
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
def kafka_service(settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """Yield a Kafka bootstrap ("127.0.0.1:port") that can run transactions.

    Uses ``TWOPHASE_KAFKA_BOOTSTRAP`` when set, else a broker from ``twophase services up``, else
    starts a native broker in a temporary folder and stops it (whole process group) on exit. With
    broker ``settings`` (e.g. a short ``transactional.id.expiration.ms``) it always starts a broker
    of its own with them.

    Raises:
        ConfigError: bad configuration (e.g. ``TWOPHASE_KAFKA_PORT`` already in use).
        ServiceUnavailableError: the broker cannot be reached or started; one-line reason.
    """
    if not settings:
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
        native = launch_kafka(data_dir, settings=settings)
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


def services_up(
    spark_cluster: bool = False,
    spark_connect: bool = False,
    postgres: bool = False,
    azure: bool = False,
    gcs: bool = False,
    yarn: bool = False,
) -> list[ServiceStatus]:
    """Start (detached) every service that is neither in the environment nor already running.

    State goes to ``services.json`` in the run dir so ``services down`` works from any process.
    When one service fails to start, those started by this call are stopped again.

    Args:
        spark_cluster: also a Spark standalone master and its workers (unless
            ``TWOPHASE_SPARK_MASTER`` is set or one is recorded and alive).
        spark_connect: also a ``local[2]`` Spark Connect server that ships twophase and reaches
            the S3 endpoint above (unless ``TWOPHASE_SPARK_CONNECT`` is set or one is recorded,
            alive and fits: :func:`~twophase.integration.services.connect_service.up_spark_connect`).
        postgres: also a native PostgreSQL with prepared transactions (unless
            ``TWOPHASE_POSTGRES_DSN`` is set or one is recorded and alive:
            :func:`~twophase.integration.services.postgres_service.up_postgres`).
        azure: also Azurite's blob service (unless ``TWOPHASE_AZURE_CONNECTION_STRING`` is set or
            one is recorded and alive: :func:`~twophase.integration.services.azurite.up_azurite`).
        gcs: also fake-gcs-server (unless ``TWOPHASE_GCS_ENDPOINT`` is set or one is recorded and
            alive: :func:`~twophase.integration.services.gcs_server.up_gcs`).
        yarn: also a YARN ResourceManager and NodeManager staging on the S3 above (unless
            ``TWOPHASE_YARN_CONF_DIR`` is set or one is recorded and alive:
            :func:`~twophase.integration.services.yarn.up_yarn`).

    Raises:
        ConfigError, ServiceUnavailableError: as :func:`kafka_service` / :func:`s3_service`, or
            the given Spark master or Connect server does not answer / one does not start.
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
        master = spark_master_from_env() if spark_cluster else None
        if master is not None:
            check_spark_master(master, connect_timeout_s())
        connect_given = spark_connect_from_env() if spark_connect else None
        if connect_given is not None:
            check_spark_connect(connect_given, connect_timeout_s())
        start_kafka_here = bootstrap is None and recorded_alive("kafka") is None
        start_s3_here = endpoint is None and recorded_alive("s3") is None
        start_spark_here = spark_cluster and master is None and recorded_alive("spark") is None
        if start_kafka_here:
            claim_port("TWOPHASE_KAFKA_PORT", "Kafka")
        if start_s3_here:
            claim_port("TWOPHASE_S3_PORT", "MinIO")
            local_credentials()
        started: list[Callable[[], None]] = []  # how to stop what this call started
        try:
            if start_kafka_here:
                kafka = launch_kafka(_fresh_data_dir("kafka"), detach=True)
                started.append(kafka.process.stop)
                state["kafka"] = {
                    "pid": kafka.process.pid,
                    "bootstrap": kafka.bootstrap,
                    "data_dir": str(kafka.data_dir),
                }
            if start_s3_here:
                s3 = launch_s3(_fresh_data_dir("minio"), detach=True)
                started.append(s3.process.stop)
                state["s3"] = {
                    "pid": s3.process.pid,
                    "endpoint_url": s3.endpoint.endpoint_url,
                    "access_key": s3.endpoint.access_key,
                    "secret_key": s3.endpoint.secret_key,
                    "region": s3.endpoint.region,
                    "console_url": f"http://{HOST}:{s3.console_port}",
                    "data_dir": str(s3.data_dir),
                }
            if start_spark_here:
                if "spark" in state:  # a recorded master died: its workers must not outlive the entry
                    stop_recorded_spark(state.pop("spark"))
                cluster = launch_spark_cluster(_fresh_data_dir("spark"), detach=True)
                started.append(cluster.stop)
                state["spark"] = spark_state(cluster)
            if spark_connect and connect_given is None:
                s3_here = endpoint if endpoint is not None else _endpoint_of(state["s3"])
                stop_connect = up_spark_connect(state, s3_here, _fresh_data_dir)
                if stop_connect is not None:
                    started.append(stop_connect)
            if postgres:
                stop_postgres = up_postgres(state)
                if stop_postgres is not None:
                    started.append(stop_postgres)
            if yarn:
                s3_here = endpoint if endpoint is not None else _endpoint_of(state["s3"])
                yarn_here = up_yarn(state, s3_here, _fresh_data_dir)
                if yarn_here is not None:
                    started.append(yarn_here.stop)
            for wanted, up in ((azure, up_azurite), (gcs, up_gcs)):
                stop_emulator = up(state, _fresh_data_dir) if wanted else None
                if stop_emulator is not None:
                    started.append(stop_emulator)
        except BaseException:
            for stop in started:
                stop()
            raise
        write_state(state)
    return services_status()


def _fresh_data_dir(name: str) -> Path:
    path = run_dir() / "data" / name
    shutil.rmtree(path, ignore_errors=True)
    return path


def services_down() -> list[str]:
    """Stop the services recorded by ``services up`` (whole process groups) and delete their data.

    Returns the names of the services stopped. A recorded pid whose command line is not the
    service's (reused pid) is never killed.
    """
    stopped: list[str] = []
    with file_lock(run_dir() / ".services.lock"):
        for name, entry in read_state().items():
            if name == "spark":
                if stop_recorded_spark(entry):  # workers (and executors) first, then the master
                    stopped.append(name)
            elif name == "postgres":
                if stop_recorded_postgres(entry):  # a fast shutdown, not the group's SIGTERM (smart)
                    stopped.append(name)
            elif is_process(int(entry.get("pid", 0)), PROCESS_MARKERS[name]):
                kill_group(int(entry["pid"]))
                stopped.append(name)
            data_dir = entry.get("data_dir")
            if data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
        state_path().unlink(missing_ok=True)
    return stopped


def services_status() -> list[ServiceStatus]:
    """Where each service comes from and whether it answers (bounded by the connect timeout):
    Kafka, S3, the Spark cluster, then the Spark Connect server, PostgreSQL, Azurite, the GCS
    emulator and YARN when one is given or recorded."""
    timeout = min(connect_timeout_s(), 5.0)
    rows = [_kafka_status(timeout), _s3_status(timeout), spark_status(timeout)]
    state = read_state()
    optional = (
        connect_status(timeout, state.get("spark-connect")),
        postgres_status(timeout, state.get("postgres")),
        azure_status(timeout, state.get("azure")),
        gcs_status(timeout, state.get("gcs")),
        yarn_status(timeout, state.get("yarn")),
    )
    return [*rows, *(row for row in optional if row is not None)]


def _kafka_status(timeout: float) -> ServiceStatus:
    bootstrap = env_kafka_bootstrap()
    entry = recorded_alive("kafka")
    if bootstrap is not None:
        return _kafka_row("environment", bootstrap, None, timeout, "TWOPHASE_KAFKA_BOOTSTRAP")
    if entry is not None:
        return _kafka_row("services up", entry["bootstrap"], entry["pid"], timeout, entry["data_dir"])
    return ServiceStatus("kafka", "not running", "", None, False, "started on demand by tests/demo")


def _s3_status(timeout: float) -> ServiceStatus:
    try:
        endpoint = env_s3_endpoint()
    except ConfigError as exc:
        url = os.environ.get("TWOPHASE_S3_ENDPOINT", "")
        return ServiceStatus("s3", "environment", url, None, False, str(exc))
    entry = recorded_alive("s3")
    if endpoint is not None:
        return _s3_row("environment", endpoint, None, timeout, "TWOPHASE_S3_ENDPOINT")
    if entry is not None:
        detail = f"console {entry.get('console_url', '')}"
        return _s3_row("services up", _endpoint_of(entry), entry["pid"], timeout, detail)
    return ServiceStatus("s3", "not running", "", None, False, "started on demand by tests/demo")


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
