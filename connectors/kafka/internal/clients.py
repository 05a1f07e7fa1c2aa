"""Where the Kafka sink gets its clients: transactional producers (executors) and the driver's
transaction transport.

:class:`ConfluentClients`, the default, makes confluent-kafka ``Producer`` s (and, once per
transaction, an ``AdminClient`` that reads one partition's end offset) and a kafka-python
:class:`~twophase.connectors.kafka.internal.transport.KafkaPythonTransport`. A test passes another
:class:`KafkaClients` (a model of the transaction coordinator) to run the sink's real code against
it. The object is pickled to executors with the sink, so it holds no connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from twophase.connectors.kafka.internal.transport import KafkaPythonTransport, TransactionTransport

if TYPE_CHECKING:
    from twophase.connectors.kafka.config import KafkaSinkConfig


class KafkaClients(Protocol):
    """Makes the Kafka sink's clients."""

    def producer(self, conf: dict[str, Any]) -> Any:
        """A transactional producer for librdkafka configuration ``conf`` (confluent-kafka's API)."""
        ...

    def transport(self, config: KafkaSinkConfig) -> TransactionTransport:
        """A connected driver-side transport (one attempt; the caller retries).

        Raises:
            one of ``admin.NETWORK_ERRORS``: no broker answered.
        """
        ...

    def end_offsets(self, conf: dict[str, Any]) -> EndOffsets:
        """A client that reads partitions' end offsets with librdkafka configuration ``conf`` (the
        producer's, without its transactional settings). Made when a transaction opens, so that
        its connections are up by the pre-commit that reads.
        """
        ...


class EndOffsets(Protocol):
    """Reads a partition's end offset (ListOffsets latest, read_uncommitted: the high watermark)."""

    def read(self, topic: str, partition: int, timeout_s: float) -> int:
        """``topic[partition]``'s end offset.

        Raises:
            any exception when it cannot be read within ``timeout_s`` (the caller goes on without).
        """
        ...


class ConfluentEndOffsets:
    """:class:`EndOffsets` through a confluent-kafka ``AdminClient`` (ListOffsets, KIP-396)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self._admin = AdminClient(conf)

    def read(self, topic: str, partition: int, timeout_s: float) -> int:
        spec = {TopicPartition(topic, partition): OffsetSpec.latest()}  # type: ignore[no-untyped-call]
        futures = self._admin.list_offsets(
            spec, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s
        )
        (answer,) = futures.values()
        return int(answer.result(timeout=timeout_s).offset)


class ConfluentClients:
    """The real clients: confluent-kafka producers, kafka-python for the transaction calls."""

    def producer(self, conf: dict[str, Any]) -> Any:
        return Producer(conf)

    def transport(self, config: KafkaSinkConfig) -> TransactionTransport:
        return KafkaPythonTransport.connect(config.admin_config(), config.marker_search_max_bytes)

    def end_offsets(self, conf: dict[str, Any]) -> EndOffsets:
        return ConfluentEndOffsets(conf)
