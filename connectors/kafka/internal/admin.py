"""Driver-side Kafka transaction calls that librdkafka does not expose: which broker to ask, and
what its answer means.

:class:`KafkaAdmin` routes each call to the transactional id's coordinator. It caches the
coordinator per id (FindCoordinator, key type transaction) and sends the request through a
:class:`~twophase.connectors.kafka.internal.transport.TransactionTransport` (kafka-python's own request
classes; no wire encoding here). Reaching the brokers is retried with backoff (tenacity) and
ends in ServiceUnavailableError.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import kafka.errors as kerrors
import tenacity

from twophase.connectors.kafka.config import MASK, KafkaSinkConfig, is_secret
from twophase.connectors.kafka.internal.clients import ConfluentClients, KafkaClients
from twophase.connectors.kafka.internal.security import preflight
from twophase.connectors.kafka.internal.transport import MarkerSearch, TransactionTransport
from twophase.sinks.errors import ServiceUnavailableError

log = logging.getLogger(__name__)

NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    kerrors.KafkaConnectionError,
    kerrors.KafkaTimeoutError,
    kerrors.NodeNotReadyError,
    kerrors.RequestTimedOutError,
    kerrors.RetriableError,
    ConnectionError,
    TimeoutError,
)
"""Failures that mean "try again later", never "the transaction is gone"."""

TRANSACTIONAL_ID_NOT_FOUND = 105
COORDINATOR_MOVED_ERRORS = (
    kerrors.CoordinatorLoadInProgressError,
    kerrors.CoordinatorNotAvailableError,
    kerrors.NotCoordinatorError,
)
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: ask FindCoordinator again."""
COORDINATOR_MOVED = frozenset(e.errno for e in COORDINATOR_MOVED_ERRORS)
"""Their error codes (14, 15, 16)."""
COORDINATOR_MOVED_ATTEMPTS = 3
"""DescribeTransactions attempts when the answers say the coordinator moved."""


@dataclass(frozen=True)
class TransactionSnapshot:
    """One transactional id's state on its coordinator (DescribeTransactions, KIP-664).

    ``state`` is the broker's wire value: Empty, Ongoing, PrepareCommit, PrepareAbort,
    CompleteCommit, CompleteAbort, Dead, PrepareEpochFence.
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int


class KafkaAdmin:
    """The transaction calls the sink needs, each sent to the id's transaction coordinator.

    Use :meth:`connect`; call :meth:`close` when done. Thread-safe: concurrent commit lanes share it.

    Args:
        transport: sends one request to one broker.
        bootstrap_servers: for messages.
    """

    def __init__(self, transport: TransactionTransport, bootstrap_servers: str) -> None:
        self._transport = transport
        self._bootstrap = bootstrap_servers
        self._nodes: dict[str, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls, config: KafkaSinkConfig, clients: KafkaClients | None = None, sink: str | None = None
    ) -> KafkaAdmin:
        """Connect, retrying with exponential backoff (``connect_attempts``, ``connect_backoff_ms``).

        With the real clients and a TLS or SASL listener, librdkafka logs in once first
        (:func:`~twophase.connectors.kafka.internal.security.preflight`), so that a refused login or TLS
        handshake is named instead of ending as a bootstrap timeout. ``sink`` names the sink in
        messages.

        Raises:
            KafkaAuthenticationError: the listener refused the login or TLS handshake (one line).
            ServiceUnavailableError: no broker answered after all attempts (one clear line).
        """
        clients = clients or ConfluentClients()
        if isinstance(clients, ConfluentClients):
            preflight(config, sink)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(config.connect_attempts),
            wait=tenacity.wait_exponential(multiplier=config.connect_backoff_ms / 1000.0, max=30),
            retry=tenacity.retry_if_exception_type(NETWORK_ERRORS),
            before_sleep=lambda rs: log.warning(
                "kafka unreachable bootstrap=%s attempt=%d error=%s",
                config.bootstrap_servers,
                rs.attempt_number,
                rs.outcome.exception() if rs.outcome else None,
            ),
            reraise=True,
        )
        try:
            transport = retrying(clients.transport, config)
        except NETWORK_ERRORS as e:
            raise ServiceUnavailableError(
                f"Kafka brokers {config.bootstrap_servers} unreachable after {config.connect_attempts} "
                f"attempts: {type(e).__name__}: {e}"
            ) from None
        return cls(transport, config.bootstrap_servers)

    def close(self) -> None:
        """Close the connections. Idempotent."""
        self._transport.close()

    # --- routing ---------------------------------------------------------------------------------

    def _coordinator(self, transactional_id: str, refresh: bool) -> int:
        with self._lock:
            node = self._nodes.get(transactional_id)
        if node is None or refresh:
            node = self._transport.find_coordinator(transactional_id)
            with self._lock:
                self._nodes[transactional_id] = node
        return node

    def _forget(self, transactional_ids: list[str]) -> None:
        """The cached coordinators of these ids are stale (moved, or unreachable): re-find them next
        time. kafka-python never invalidates its own cache, so this one must."""
        with self._lock:
            for txn_id in transactional_ids:
                self._nodes.pop(txn_id, None)

    # --- transactions --------------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        refresh: bool = False,
    ) -> int:
        """Send EndTxn (v3/v4) to the transaction coordinator; return the response's error code.

        ``refresh`` re-finds the coordinator (FindCoordinator, key type transaction) instead of
        using the cached one. Answers that say the coordinator moved (NOT_COORDINATOR and
        friends) and unreachable brokers drop the cached one, so the next call re-finds it.

        Raises:
            one of :data:`NETWORK_ERRORS`: the request did not get an answer.
        """
        node = self._coordinator(transactional_id, refresh)
        try:
            code = self._transport.end_txn(node, transactional_id, producer_id, producer_epoch, commit)
        except NETWORK_ERRORS:
            self._forget([transactional_id])
            raise
        if code in COORDINATOR_MOVED:
            self._forget([transactional_id])
        return code

    def describe_transactions(self, transactional_ids: list[str]) -> dict[str, TransactionSnapshot]:
        """DescribeTransactions for each id; ids the coordinator does not know are left out.

        An answer that says the coordinator moved (NOT_COORDINATOR and friends) re-finds it and
        asks again, up to :data:`COORDINATOR_MOVED_ATTEMPTS` times in all (a broker restart or a
        leader change moves coordinators; callers such as lingering cleanup must not fail for it).

        Raises:
            one of :data:`NETWORK_ERRORS` (the coordinator kept moving, or no answer), or a
            kafka-python error for other per-id failures (authorization).
        """
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(COORDINATOR_MOVED_ATTEMPTS),
            wait=tenacity.wait_exponential(multiplier=0.05, max=1),
            retry=tenacity.retry_if_exception_type(COORDINATOR_MOVED_ERRORS),
            reraise=True,
        )
        return retrying(self._describe_once, transactional_ids)

    def _describe_once(self, transactional_ids: list[str]) -> dict[str, TransactionSnapshot]:
        by_node: dict[int, list[str]] = {}
        for txn_id in transactional_ids:
            by_node.setdefault(self._coordinator(txn_id, False), []).append(txn_id)
        out: dict[str, TransactionSnapshot] = {}
        failures: list[BaseException] = []
        for node, ids in by_node.items():
            try:
                answers = self._transport.describe_transactions(node, ids)
            except NETWORK_ERRORS:
                self._forget(ids)
                raise
            for txn in answers:
                if txn.error_code == TRANSACTIONAL_ID_NOT_FOUND:
                    continue
                error = kerrors.for_code(txn.error_code)
                if error is not kerrors.NoError:
                    # every moved id is forgotten before raising, so one retry re-finds them all
                    if txn.error_code in COORDINATOR_MOVED:
                        self._forget([txn.transactional_id])
                    failures.append(error(f"DescribeTransactions({txn.transactional_id!r})"))
                    continue
                out[txn.transactional_id] = TransactionSnapshot(
                    transactional_id=txn.transactional_id,
                    state=txn.state,
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    transaction_timeout_ms=txn.transaction_timeout_ms,
                    transaction_start_time_ms=txn.transaction_start_time_ms,
                )
        if failures:  # non-retriable ones first: retrying does not help them
            raise min(failures, key=lambda e: isinstance(e, COORDINATOR_MOVED_ERRORS))
        return out

    def describe_transaction(self, transactional_id: str) -> TransactionSnapshot | None:
        """DescribeTransactions for one id; ``None`` if its coordinator does not know it."""
        return self.describe_transactions([transactional_id]).get(transactional_id)

    def list_transactions(self, states: list[str], pattern: str | None) -> list[tuple[str, int, str]]:
        """ListTransactions on every broker: ``(transactional id, producer id, state)`` rows.

        ``pattern`` (KIP-1152, brokers ≥ 4.1) filters on the broker; when the broker is older the
        unfiltered list is returned and the caller filters.

        Raises:
            kafka.errors.UnsupportedVersionError / IncompatibleBrokerVersion: no ListTransactions
                (brokers < 3.0); the caller probes the id pool instead.
        """
        return self._transport.list_transactions(states, pattern)

    def transaction_outcome(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        since_ms: int,
        until_ms: int,
        from_offset: int | None = None,
    ) -> MarkerSearch:
        """Search ``topic[partition]`` for the COMMIT or ABORT marker of ``producer_id``/
        ``producer_epoch``, from ``from_offset`` when known, else from ``since_ms`` (see
        :meth:`~twophase.connectors.kafka.internal.transport.TransactionTransport.transaction_outcome`).

        Raises:
            one of :data:`NETWORK_ERRORS`; kafka-python errors for authorization and other failures.
        """
        return self._transport.transaction_outcome(
            topic, partition, producer_id, producer_epoch, since_ms, until_ms, from_offset
        )

    # --- configuration and topics ----------------------------------------------------------------

    def broker_config(self, key: str) -> list[str]:
        """The value of broker setting ``key`` on every broker (DescribeConfigs)."""
        return list(self._transport.broker_config(key))

    def topic_config(self, topic: str, key: str) -> str | None:
        """The value of topic setting ``key`` (DescribeConfigs), or ``None``."""
        value = self._transport.topic_config(topic, key)
        return None if value is None else str(value)

    def topic_exists(self, topic: str) -> bool:
        """True when the cluster has ``topic`` (Metadata, never auto-creating it)."""
        return bool(self._transport.topic_exists(topic))

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        """CreateTopics; a topic created concurrently by someone else is fine."""
        self._transport.create_topic(topic, partitions, replication_factor)


class RedactSecrets(logging.Filter):
    """Masks secrets in kafka-python's log records.

    kafka-python logs its whole configuration (SASL and SSL passwords included) at DEBUG when an
    admin client starts, every request it sends (a PLAIN ``SaslAuthenticateRequest`` carries the
    password in its ``auth_bytes``) and every request's raw bytes: secrets must never reach a log.
    So dict arguments get their secret keys masked, SASL authentication requests lose their
    bytes, and raw request bytes are replaced by their length.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = _redacted(record.args)
        return True


def _redacted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and is_secret(k) else v for k, v in value.items()}
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if type(value).__name__.startswith("SaslAuthenticate"):
        return f"{type(value).__name__}(auth_bytes={MASK})"
    return value


_REDACT = RedactSecrets()
for _name in (
    "kafka.admin.client",
    "kafka.net.manager",
    "kafka.net.compat",
    "kafka.net.connection",
    "kafka.protocol.parser",
):
    logging.getLogger(_name).addFilter(_REDACT)
