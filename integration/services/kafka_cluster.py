"""A native three-broker KRaft Kafka cluster on 127.0.0.1, for fault tests (issue #16).

One dedicated controller (node :data:`CONTROLLER_ID`) and brokers ``1..n``, each in its own data
directory under one root, all formatted with the same cluster id. Internal topics and new topics
are replicated to every broker with ``min.insync.replicas = n - 1`` (3 and 2 for three brokers), so
one broker may be down while transactions and ``acks=all`` writes go on (KIP-98).

The transaction state log has ONE partition by default: every transactional id then has the same
coordinator, the leader of ``__transaction_state-0``, which makes "the broker that coordinates the
job's transactions" one broker. :meth:`KafkaCluster.kill`, :meth:`~KafkaCluster.pause` and
:meth:`~KafkaCluster.restart` act on one broker process; the controller is never touched.

The single broker of :mod:`twophase.integration.services.kafka` stays the default for the demo and
``make test``; only :func:`kafka_cluster_service` starts this one.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tenacity

from twophase.integration.services.kafka import (
    format_storage,
    kafka_jvm,
    new_cluster_id,
    start_node,
    try_init_transactions,
    wait_kafka_ready,
)
from twophase.integration.services.process import HOST, ManagedProcess, free_port, wait_ready
from twophase.sinks.errors import ServiceUnavailableError

log = logging.getLogger(__name__)

CONTROLLER_ID = 100
"""Node id of the dedicated KRaft controller (brokers are ``1..n``)."""
BROKER_HEAP = "512m"
CONTROLLER_HEAP = "256m"
TRANSACTION_STATE_TOPIC = "__transaction_state"

_COMMON = {
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
}


def controller_properties(data_dir: Path, controller_port: int, brokers: int) -> dict[str, str]:
    """``server.properties`` of the dedicated controller (a one-voter static quorum).

    In KRaft the controller creates topics, so the defaults of new topics (partitions, replication
    factor, ``min.insync.replicas``) must be set here: the brokers' own values are not used for a
    CreateTopics without explicit settings (seen with Kafka 4.4: replication 1, min ISR 1).
    A broker that misses heartbeats for ``broker.session.timeout.ms`` (6 s here, 9 s by default) is
    fenced and its partition leaderships move.
    """
    return {
        "num.partitions": "3",
        "default.replication.factor": str(brokers),
        "min.insync.replicas": str(max(brokers - 1, 1)),
        **_COMMON,
        "process.roles": "controller",
        "node.id": str(CONTROLLER_ID),
        "controller.quorum.voters": f"{CONTROLLER_ID}@{HOST}:{controller_port}",
        "listeners": f"CONTROLLER://{HOST}:{controller_port}",
        "log.dirs": str(data_dir / "kraft-logs"),
        "broker.session.timeout.ms": "6000",
    }


def broker_properties(
    data_dir: Path,
    broker_id: int,
    port: int,
    controller_port: int,
    brokers: int,
    transaction_partitions: int,
) -> dict[str, str]:
    """``server.properties`` of broker ``broker_id`` in a cluster of ``brokers`` brokers.

    Replication factor ``brokers`` and min ISR ``brokers - 1`` for the transaction state log, the
    offsets topic and new topics. ``replica.lag.time.max.ms`` is 10 s (30 s by default) so that a
    stalled follower leaves the ISR, and ``acks=all`` writes go on, within a test's patience.
    """
    replicas = str(brokers)
    min_isr = str(max(brokers - 1, 1))
    return {
        **_COMMON,
        "process.roles": "broker",
        "node.id": str(broker_id),
        "controller.quorum.voters": f"{CONTROLLER_ID}@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir / "kraft-logs"),
        "num.partitions": "3",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": str(transaction_partitions),
        "transaction.max.timeout.ms": "900000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "broker.heartbeat.interval.ms": "1000",
        "replica.lag.time.max.ms": "10000",
        "unclean.leader.election.enable": "false",
    }


@dataclass
class _Node:
    node_id: int
    data_dir: Path
    props: Path
    jvm: list[str]
    heap: str
    port: int
    process: ManagedProcess | None = None

    def start(self) -> None:
        name = "kafka-controller" if self.node_id == CONTROLLER_ID else f"kafka-broker-{self.node_id}"
        self.process = start_node(name, self.jvm, self.props, heap=self.heap)

    def running(self) -> bool:
        return self.process is not None and self.process.running()


class KafkaCluster:
    """A running native cluster: one controller and brokers ``1..n`` (see the module docstring).

    Use :func:`kafka_cluster_service` (or :meth:`start`); every wait is bounded by ``timeout_s``.

    Attributes:
        bootstrap: every broker, ``"127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"``.
        broker_ids: ``(1, 2, 3)`` for three brokers.
        root: the folder holding every node's data directory (``controller``, ``broker-<id>``).
        timeout_s: the bound of start, readiness and rejoin waits, seconds.
    """

    def __init__(
        self, root: Path, brokers: int = 3, transaction_partitions: int = 1, timeout_s: float = 180.0
    ):
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, got {brokers}")
        self.root = root
        self.timeout_s = timeout_s
        cluster_id = new_cluster_id()
        controller_port = free_port()
        ports = {b: free_port() for b in range(1, brokers + 1)}
        self.broker_ids: tuple[int, ...] = tuple(ports)
        self.bootstrap = ",".join(f"{HOST}:{ports[b]}" for b in self.broker_ids)
        specs: list[tuple[int, Path, Mapping[str, str], str, int]] = [
            (
                CONTROLLER_ID,
                root / "controller",
                controller_properties(root / "controller", controller_port, brokers),
                CONTROLLER_HEAP,
                controller_port,
            )
        ]
        for b in self.broker_ids:
            data = root / f"broker-{b}"
            props = broker_properties(data, b, ports[b], controller_port, brokers, transaction_partitions)
            specs.append((b, data, props, BROKER_HEAP, ports[b]))
        self._nodes: dict[int, _Node] = {}
        for node_id, data, settings, heap, port in specs:
            jvm = kafka_jvm(data)
            props_path = data / "server.properties"
            props_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            format_storage(jvm, props_path, cluster_id)
            self._nodes[node_id] = _Node(node_id, data, props_path, jvm, heap, port)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every node and wait until all brokers are registered and transactions work.

        Raises:
            ServiceUnavailableError: a node exited, or the cluster was not ready within ``timeout_s``.
        """
        for node in self._nodes.values():
            node.start()
        self._wait(self._all_registered, "all brokers to register with the controller")
        wait_kafka_ready(self.bootstrap, self.timeout_s)
        log.info("kafka cluster ready bootstrap=%s brokers=%s", self.bootstrap, self.broker_ids)

    def stop(self) -> None:
        """Stop every node (brokers first, then the controller); idempotent."""
        for node_id in (*self.broker_ids, CONTROLLER_ID):
            process = self._nodes[node_id].process
            if process is not None:
                process.stop()

    # -- faults -------------------------------------------------------------------------------------

    def broker_address(self, broker_id: int) -> str:
        """``"127.0.0.1:port"`` of one broker."""
        return f"{HOST}:{self._broker(broker_id).port}"

    def running(self, broker_id: int) -> bool:
        """True while the broker's process exists (a paused broker counts as running)."""
        return self._broker(broker_id).running()

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker's process (a crash: no controlled shutdown, no log flush)."""
        process = self._broker(broker_id).process
        if process is not None:
            process.kill()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker: it holds its connections open and answers nothing until :meth:`resume`."""
        process = self._broker(broker_id).process
        if process is None or not process.running():
            raise ServiceUnavailableError(f"broker {broker_id} is not running: nothing to pause")
        process.pause()

    def resume(self, broker_id: int) -> None:
        """SIGCONT a broker paused by :meth:`pause`."""
        process = self._broker(broker_id).process
        if process is not None:
            process.resume()

    def restart(self, broker_id: int, wait: bool = True) -> float:
        """Start a killed (or stopped) broker again on its own data directory and port.

        A running broker is stopped first (SIGTERM: a controlled shutdown). With ``wait``, returns
        once it has rejoined (:meth:`wait_rejoined`).

        Returns:
            Seconds from the start of its process until it rejoined (0.0 without ``wait``).

        Raises:
            ServiceUnavailableError: it exited, or did not rejoin within ``timeout_s``.
        """
        node = self._broker(broker_id)
        if node.process is not None and node.process.running():
            node.process.stop()
        started = time.monotonic()
        node.start()
        if not wait:
            return 0.0
        self.wait_rejoined(broker_id)
        return time.monotonic() - started

    def heal(self) -> None:
        """Resume paused brokers, start dead ones and wait until every broker is in every ISR."""
        for b in self.broker_ids:
            node = self._broker(b)
            if node.process is not None and node.process.paused:
                node.process.resume()
            if not node.running():
                node.start()
        for b in self.broker_ids:
            self.wait_rejoined(b)

    # -- metadata -----------------------------------------------------------------------------------

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker id that coordinates ``transactional_id`` now (FindCoordinator, key type
        transaction, through kafka-python's admin client; never cached between calls).

        Raises:
            ServiceUnavailableError: no coordinator was found within ``timeout_s``.
        """
        from kafka.protocol.metadata import CoordinatorType

        def find() -> int:
            with self._admin() as admin:
                return int(
                    admin._manager.run(
                        admin._find_coordinator_id, transactional_id, CoordinatorType.TRANSACTION
                    )
                )

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_delay(self.timeout_s),
            wait=tenacity.wait_fixed(0.5),
            retry=tenacity.retry_if_exception_type(Exception),
            reraise=True,
        )
        try:
            return int(retrying(find))
        except Exception as e:
            raise ServiceUnavailableError(
                f"no transaction coordinator for {transactional_id!r} on {self.bootstrap} within "
                f"{self.timeout_s:g} s: {type(e).__name__}: {e}"
            ) from None

    def partition_state(self) -> list[tuple[str, int, int, tuple[int, ...], tuple[int, ...]]]:
        """Every partition of every topic: ``(topic, partition, leader, replicas, isr)``."""
        with self._admin() as admin:
            topics = admin.describe_topics()
        rows = []
        for topic in topics:
            for p in topic["partitions"]:
                rows.append(
                    (
                        str(topic["name"]),
                        int(p["partition_index"]),
                        int(p["leader_id"]),
                        tuple(int(r) for r in p["replica_nodes"]),
                        tuple(int(r) for r in p["isr_nodes"]),
                    )
                )
        return rows

    def wait_rejoined(self, broker_id: int) -> None:
        """Wait until the broker answers, is registered and is in the ISR of every partition it
        replicates (so that the next broker may go down without dropping below min ISR).

        Raises:
            ServiceUnavailableError: not within ``timeout_s``, or its process exited; the message
                names the partitions still missing it.
        """

        def behind() -> str | None:
            node = self._broker(broker_id)
            if not node.running():
                raise ServiceUnavailableError(
                    f"broker {broker_id} exited: {node.process.log_tail(3) if node.process else ''}"
                )
            reason = try_init_transactions(self.broker_address(broker_id), 5.0)
            if reason is not None:
                return f"broker {broker_id} cannot serve yet: {reason}"
            with self._admin() as admin:
                if broker_id not in self._unfenced(admin):
                    return f"broker {broker_id} is not registered (or still fenced)"
            missing = [
                f"{t}-{p}"
                for t, p, _leader, replicas, isr in self.partition_state()
                if broker_id in replicas and broker_id not in isr
            ]
            return f"broker {broker_id} not in the ISR of {', '.join(missing)}" if missing else None

        self._wait(behind, f"broker {broker_id} to rejoin")
        log.info("kafka broker rejoined broker=%d", broker_id)

    # -- internals ----------------------------------------------------------------------------------

    def _broker(self, broker_id: int) -> _Node:
        if broker_id not in self.broker_ids:
            raise ValueError(f"no broker {broker_id}; the brokers are {self.broker_ids}")
        return self._nodes[broker_id]

    @contextlib.contextmanager
    def _admin(self) -> Iterator[Any]:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap.split(","),
            request_timeout_ms=10_000,
            bootstrap_timeout_ms=10_000,
        )
        try:
            yield admin
        finally:
            admin.close()

    def _all_registered(self) -> str | None:
        for node in self._nodes.values():
            if not node.running():
                tail = node.process.log_tail(3) if node.process else ""
                raise ServiceUnavailableError(f"Kafka node {node.node_id} exited during start-up: {tail}")
        try:
            with self._admin() as admin:
                seen = self._unfenced(admin)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return None if seen == list(self.broker_ids) else f"registered, unfenced brokers {seen}"

    @staticmethod
    def _unfenced(admin: Any) -> list[int]:
        # DescribeCluster (KIP-700) lists fenced brokers too when asked, with is_fenced (KIP-1073)
        brokers = admin.describe_cluster()["brokers"]
        return sorted(int(b["broker_id"]) for b in brokers if not b.get("is_fenced", False))

    def _wait(self, check: Any, what: str) -> None:
        reason = wait_ready(check, self.timeout_s, 0.5)
        if reason is not None:
            raise ServiceUnavailableError(
                f"Kafka cluster {self.bootstrap}: waited {self.timeout_s:g} s for {what} ({reason})"
            )


@contextlib.contextmanager
def kafka_cluster_service(
    brokers: int = 3, transaction_partitions: int = 1, timeout_s: float | None = None
) -> Iterator[KafkaCluster]:
    """Start a native cluster in a temporary folder, yield its handle, stop it and delete the folder.

    Always native (``TWOPHASE_KAFKA_BOOTSTRAP`` does not apply: faults need the processes).

    Args:
        brokers: number of brokers (3: replication 3, min ISR 2).
        transaction_partitions: partitions of ``__transaction_state`` (1: one coordinator for all).
        timeout_s: bound of every wait; default ``TWOPHASE_START_TIMEOUT_S`` (180).

    Raises:
        ServiceUnavailableError: Java/Maven missing, or the cluster did not become ready in time.
    """
    from twophase.integration.services.launcher import start_timeout_s

    root = Path(tempfile.mkdtemp(prefix="twophase-kafka-cluster-"))
    cluster: KafkaCluster | None = None
    try:
        cluster = KafkaCluster(root, brokers, transaction_partitions, timeout_s or start_timeout_s())
        cluster.start()
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
