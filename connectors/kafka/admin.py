"""Driver-side Kafka protocol calls librdkafka does not expose, through kafka-python 3.x.

One small wrapper around ``kafka.KafkaAdminClient``: its connection manager sends kafka-python's
own request classes (``EndTxnRequest``, ``FindCoordinatorRequest``, ``DescribeTransactionsRequest``)
and its admin methods do ListTransactions, DescribeConfigs and CreateTopics. No wire encoding here.
Reaching the brokers is retried with backoff (tenacity) and ends in ServiceUnavailableError.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import kafka.errors as kerrors
import tenacity
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer.transaction import EndTxnRequest

from twophase.connectors.kafka.config import MASK, KafkaSinkConfig, is_secret
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.structured_log import log_event

log = logging.getLogger(__name__)

END_TXN_MIN_VERSION = 3
END_TXN_MAX_VERSION = 4
"""EndTxn v3/v4: transaction version 1 semantics (KIP-98), which librdkafka's transactions use.
v5+ is KIP-890's TV2, where the coordinator bumps the epoch on every EndTxn."""

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
    """A connected kafka-python admin client plus the transaction calls the sink needs.

    Use :meth:`connect`; call :meth:`close` when done. Not thread-safe for concurrent
    coordinator refreshes, which is fine for the driver's ordered committer.
    """

    def __init__(self, client: KafkaAdminClient, bootstrap_servers: str) -> None:
        self._client = client
        self._bootstrap = bootstrap_servers

    @classmethod
    def connect(cls, config: KafkaSinkConfig) -> KafkaAdmin:
        """Connect, retrying with exponential backoff (``connect_attempts``, ``connect_backoff_ms``).

        Raises:
            ServiceUnavailableError: no broker answered after all attempts (one clear line).
        """
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(config.connect_attempts),
            wait=tenacity.wait_exponential(multiplier=config.connect_backoff_ms / 1000.0, max=30),
            retry=tenacity.retry_if_exception_type(NETWORK_ERRORS),
            before_sleep=lambda rs: log_event(
                log,
                logging.WARNING,
                "kafka unreachable",
                bootstrap=config.bootstrap_servers,
                attempt=rs.attempt_number,
                error=rs.outcome.exception() if rs.outcome else None,
            ),
            reraise=True,
        )
        try:
            client = retrying(_new_admin_client, config.admin_config())
        except NETWORK_ERRORS as e:
            raise ServiceUnavailableError(
                f"Kafka brokers {config.bootstrap_servers} unreachable after {config.connect_attempts} "
                f"attempts: {type(e).__name__}: {e}"
            ) from None
        return cls(client, config.bootstrap_servers)

    def close(self) -> None:
        """Close the connections and the client's IO thread. Idempotent."""
        self._client.close()

    def _run(self, coro_fn: Any, *args: Any) -> Any:
        # KafkaAdminClient runs its IO on a background thread; public methods block on it the same way.
        return self._client._manager.run(coro_fn, *args)

    # --- transactions --------------------------------------------------------------------------

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, refresh: bool
    ) -> int:
        """Send EndTxn (v3/v4) to the transaction coordinator; return the response's error code.

        ``refresh`` re-finds the coordinator (FindCoordinator, key type transaction) instead of
        using the cached one, after NOT_COORDINATOR and friends.

        Raises:
            one of :data:`NETWORK_ERRORS`: the request did not get an answer.
        """

        async def call() -> int:
            node = await self._coordinator(transactional_id, refresh)
            request = EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=commit,
                min_version=END_TXN_MIN_VERSION,
                max_version=END_TXN_MAX_VERSION,
            )
            response = await self._client._manager.send(request, node_id=node)
            return int(response.error_code)

        return int(self._run(call))

    async def _coordinator(self, transactional_id: str, refresh: bool) -> Any:
        manager = self._client._manager
        if not refresh:
            cached = manager.cluster.get_coordinator(transactional_id, CoordinatorType.TRANSACTION)
            if cached is not None:
                return cached
        request = FindCoordinatorRequest(
            key_type=CoordinatorType.TRANSACTION.value, coordinator_keys=[transactional_id], min_version=4
        )
        response = await manager.send(request)
        (found,) = response.coordinators
        error = kerrors.for_code(found.error_code)
        if error is not kerrors.NoError:
            raise error(f"FindCoordinator(transaction, {transactional_id!r})")
        return manager.cluster.add_coordinator(
            found, CoordinatorType.TRANSACTION, transactional_id, synthesize_node_id=False
        )

    def describe_transactions(self, transactional_ids: list[str]) -> dict[str, TransactionSnapshot]:
        """DescribeTransactions for each id; ids the coordinator does not know are left out.

        Raises:
            one of :data:`NETWORK_ERRORS`, or a kafka-python error for other per-id failures
            (authorization).
        """

        async def call() -> dict[str, TransactionSnapshot]:
            by_node: dict[Any, list[str]] = {}
            for txn_id in transactional_ids:
                by_node.setdefault(await self._coordinator(txn_id, False), []).append(txn_id)
            out: dict[str, TransactionSnapshot] = {}
            for node, ids in by_node.items():
                request = DescribeTransactionsRequest(transactional_ids=ids)
                response = await self._client._manager.send(request, node_id=node)
                for txn in response.transaction_states:
                    error = kerrors.for_code(txn.error_code)
                    if error is kerrors.TransactionalIdNotFoundError:
                        continue
                    if error is not kerrors.NoError:
                        raise error(f"DescribeTransactions({txn.transactional_id!r})")
                    out[txn.transactional_id] = TransactionSnapshot(
                        transactional_id=txn.transactional_id,
                        state=str(txn.transaction_state),
                        producer_id=int(txn.producer_id),
                        producer_epoch=int(txn.producer_epoch),
                        transaction_timeout_ms=int(txn.transaction_timeout_ms),
                        transaction_start_time_ms=int(txn.transaction_start_time_ms),
                    )
            return out

        if not transactional_ids:
            return {}
        return dict(self._run(call))

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
        try:
            listing = self._client.list_transactions(state_filters=states, transactional_id_pattern=pattern)
        except kerrors.UnsupportedVersionError:
            if pattern is None:
                raise
            listing = self._client.list_transactions(state_filters=states)
        return [
            (t.transactional_id, int(t.producer_id), str(t.state.value))
            for rows in listing.values()
            for t in rows
        ]

    # --- configuration and topics ----------------------------------------------------------------

    def broker_ids(self) -> list[int]:
        """Node ids of the brokers in the cluster metadata."""
        return sorted(int(b.node_id) for b in self._client._manager.cluster.brokers())

    def broker_config(self, key: str) -> list[str]:
        """The value of broker setting ``key`` on every broker (DescribeConfigs)."""
        values = []
        for broker in self.broker_ids():
            resource = ConfigResource(ConfigResourceType.BROKER, str(broker), [key])
            result = self._client.describe_configs([resource], config_filter="all")
            entry = result.get("broker", {}).get(str(broker), {}).get(key)
            if entry is not None and entry.get("value") is not None:
                values.append(str(entry["value"]))
        return values

    def topic_config(self, topic: str, key: str) -> str | None:
        """The value of topic setting ``key`` (DescribeConfigs), or ``None``."""
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, [key])
        result = self._client.describe_configs([resource], config_filter="all")
        entry = result.get("topic", {}).get(topic, {}).get(key)
        return None if entry is None or entry.get("value") is None else str(entry["value"])

    def topic_exists(self, topic: str) -> bool:
        """True when the cluster has ``topic`` (Metadata, never auto-creating it)."""
        (described,) = self._client.describe_topics([topic])
        error = kerrors.for_code(described["error_code"])
        if error is kerrors.UnknownTopicOrPartitionError:
            return False
        if error is not kerrors.NoError:
            raise error(f"Metadata({topic!r})")
        return True

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        """CreateTopics; a topic created concurrently by someone else is fine."""
        with contextlib.suppress(kerrors.TopicAlreadyExistsError):
            self._client.create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": replication_factor}},
                wait_for_metadata=True,
            )


class RedactSecrets(logging.Filter):
    """Masks secret values in log records' dict arguments.

    kafka-python logs its whole configuration (SASL and SSL passwords included) at DEBUG when an
    admin client starts; secrets must never reach a log.
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
    return value


_REDACT = RedactSecrets()
for _name in ("kafka.admin.client", "kafka.net.manager", "kafka.net.compat"):
    logging.getLogger(_name).addFilter(_REDACT)


def _new_admin_client(conf: dict[str, Any]) -> KafkaAdminClient:
    # KafkaAdminClient starts its IO thread before bootstrapping and does not stop it when the
    # bootstrap fails; keep a handle on the network client so a failed attempt leaks nothing.
    made: list[KafkaNetClient] = []

    def factory(**kwargs: Any) -> KafkaNetClient:
        made.append(KafkaNetClient(**kwargs))
        return made[-1]

    try:
        return KafkaAdminClient(kafka_client=factory, **conf)
    except BaseException:
        for net in made:
            net.close()
        raise
