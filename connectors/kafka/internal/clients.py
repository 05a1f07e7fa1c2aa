"""Where the Kafka sink gets its clients: transactional producers (executors) and the driver's
transaction transport.

:class:`ConfluentClients`, the default, makes confluent-kafka ``Producer`` s and a kafka-python
:class:`~twophase.connectors.kafka.internal.transport.KafkaPythonTransport`. A test passes another
:class:`KafkaClients` (a model of the transaction coordinator) to run the sink's real code against
it. The object is pickled to executors with the sink, so it holds no connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Producer

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


class ConfluentClients:
    """The real clients: confluent-kafka producers, kafka-python for the transaction calls."""

    def producer(self, conf: dict[str, Any]) -> Any:
        return Producer(conf)

    def transport(self, config: KafkaSinkConfig) -> TransactionTransport:
        return KafkaPythonTransport.connect(config.admin_config())
