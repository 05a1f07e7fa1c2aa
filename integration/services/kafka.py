"""A native single-node Kafka broker (KRaft, combined broker + controller) for tests and the demo.

The broker's classpath is resolved from Maven Central by ``jvm/kafka/pom.xml`` into
``<cache>/kafka-<version>/libs``; the broker runs with ``java -cp libs/* kafka.Kafka`` on 127.0.0.1.
Transactions on one node need the transaction log and the offsets topic at replication factor 1
(DESIGN.md §9).
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from twophase.integration.services.cache import cache_dir
from twophase.integration.services.maven import JVM_DIR, resolve_jars
from twophase.integration.services.process import HOST, ManagedProcess, wait_ready
from twophase.integration.services.versions import KAFKA_VERSION
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


class _DebugLog:
    """Receives librdkafka's log lines during readiness probes and logs them at DEBUG.

    Connection refusals are expected while a broker starts; the probe reports the final reason.
    """

    def log(self, level: int, msg: str, *args: object) -> None:
        log.debug("rdkafka: " + msg, *args)


#: prefix of the throw-away transactional ids used to prove a broker can run transactions
READINESS_TXN_PREFIX = "twophase-readiness-"

KAFKA_POM = JVM_DIR / "kafka" / "pom.xml"
HEAP = "768m"

LOG4J2_CONFIG = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = warn
"""


def kafka_libs() -> Path:
    """Kafka's jar folder in the cache, resolved by Maven on first use.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve the POM.
    """
    libs = cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"
    resolve_jars(KAFKA_POM, libs)
    return libs


def server_properties(
    data_dir: Path, port: int, controller_port: int, extra: Mapping[str, str] | None = None
) -> str:
    """``server.properties`` of a one-node KRaft cluster listening on 127.0.0.1:``port``, with the
    broker settings ``extra`` laid over the defaults (e.g. a short ``transactional.id.expiration.ms``).

    Replication factors and min ISR of the internal topics are 1 so transactions work on one node;
    the timed-out-transaction sweep runs every second so transaction-timeout tests finish quickly.
    """
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "kraft-logs"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "transaction.max.timeout.ms": "900000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "group.initial.rebalance.delay.ms": "0",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
    }
    settings.update(extra or {})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` on PATH.

    Raises:
        ServiceUnavailableError: neither exists.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ServiceUnavailableError("Java ('java', JDK 17) is not on PATH; install it or set JAVA_HOME")
    return java


def new_cluster_id() -> str:
    """A fresh KRaft cluster id."""
    # KRaft cluster ids are 16 random bytes in URL-safe base64 without padding (22 characters)
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def kafka_jvm(data_dir: Path) -> list[str]:
    """``java`` with the log4j2 configuration and Kafka's classpath for a node living in ``data_dir``
    (writes ``log4j2.properties``; the node's server log goes to ``data_dir/logs``).

    Raises:
        ServiceUnavailableError: Java or Maven is missing, or Kafka's jars cannot be resolved.
    """
    libs = kafka_libs()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_dir = data_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    log4j = data_dir / "log4j2.properties"
    log4j.write_text(LOG4J2_CONFIG.format(log_dir=log_dir))
    java = java_binary()
    return [java, f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={log_dir}", "-cp", f"{libs}/*"]


def format_storage(jvm: list[str], props: Path, cluster_id: str) -> None:
    """Format a KRaft node's log directories with ``cluster_id`` unless they are formatted already.

    Raises:
        ServiceUnavailableError: the storage tool failed (its last output line).
    """
    if (props.parent / "kraft-logs" / "meta.properties").exists():
        return
    fmt = subprocess.run(
        [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(props)],
        capture_output=True,
        text=True,
        check=False,
    )
    if fmt.returncode != 0:
        lines = [line for line in (fmt.stderr + fmt.stdout).splitlines() if line.strip()]
        raise ServiceUnavailableError(
            f"Kafka storage format failed: {lines[-1] if lines else fmt.returncode}"
        )


def start_node(
    name: str, jvm: list[str], props: Path, heap: str = HEAP, detach: bool = False
) -> ManagedProcess:
    """Start ``kafka.Kafka props`` (a formatted node) with a fixed ``heap`` (e.g. ``"768m"``).

    The process's stdout and stderr go to ``<props folder>/kafka.out``.
    """
    argv = [
        jvm[0],
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        *jvm[1:],
        "kafka.Kafka",
        str(props),
    ]
    data_dir = props.parent
    return ManagedProcess(name, argv, data_dir / "kafka.out", dict(os.environ), cwd=data_dir, detach=detach)


def start_kafka(
    data_dir: Path,
    port: int,
    controller_port: int,
    detach: bool = False,
    settings: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """Format (first time only) and start a KRaft broker in ``data_dir`` (``settings`` laid over
    the defaults of :func:`server_properties`); return once launched.

    Call :func:`wait_kafka_ready` afterwards. Raises ServiceUnavailableError when Java/Maven are
    missing or formatting the storage fails.
    """
    jvm = kafka_jvm(data_dir)
    props = data_dir / "server.properties"
    props.write_text(server_properties(data_dir, port, controller_port, settings))
    format_storage(jvm, props, new_cluster_id())
    return start_node("kafka", jvm, props, detach=detach)


def _producer_config(bootstrap: str, errors: list[str]) -> dict[str, Any]:
    def on_error(err: KafkaError) -> None:
        errors.append(err.str())

    return {
        "bootstrap.servers": bootstrap,
        "transactional.id": f"{READINESS_TXN_PREFIX}{uuid.uuid4().hex}",
        "logger": _DebugLog(),
        "error_cb": on_error,
        "socket.connection.setup.timeout.ms": 2000,
    }


def try_init_transactions(bootstrap: str, timeout_s: float) -> str | None:
    """Start a transactional producer against ``bootstrap``; return None on success, else the reason.

    A throw-away transactional id (prefix :data:`READINESS_TXN_PREFIX`) is registered; no
    transaction is ever begun with it, so it leaves no lingering transaction.
    """
    errors: list[str] = []
    producer = Producer(_producer_config(bootstrap, errors))
    try:
        producer.init_transactions(timeout_s)
        return None
    except KafkaException as exc:
        detail = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        return f"{detail}; last client error: {errors[-1]}" if errors else detail
    finally:
        producer.flush(1)


def wait_kafka_ready(bootstrap: str, timeout_s: float, process: ManagedProcess | None = None) -> None:
    """Block until a transactional producer can ``init_transactions()`` against ``bootstrap``.

    Readiness means the transaction coordinator works, not merely that the port is open (KIP-98).
    With ``process`` given, gives up early when the broker process has died.

    Raises:
        ServiceUnavailableError: not ready within ``timeout_s`` seconds, or the broker process
            exited; the message names the bootstrap and the last error (one line).
    """
    deadline = time.monotonic() + timeout_s

    def attempt() -> str | None:
        if process is not None and not process.running():
            raise ServiceUnavailableError(
                f"Kafka broker on {bootstrap} exited during start-up: {process.log_tail(3)}"
            )
        remaining = max(deadline - time.monotonic(), 0.5)
        # a live local broker gets short attempts so its death is noticed between them
        return try_init_transactions(bootstrap, min(remaining, 10.0) if process else remaining)

    reason = wait_ready(attempt, timeout_s, 0.5)
    if reason is None:
        log_event(log, logging.INFO, "kafka ready", bootstrap=bootstrap)
        return
    raise ServiceUnavailableError(
        f"Kafka at {bootstrap} is not reachable or cannot run transactions within {timeout_s:g} s ({reason})"
    )
