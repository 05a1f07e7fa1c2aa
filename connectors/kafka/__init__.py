"""Exactly-once Kafka sink: transactional producers on executors, EndTxn commits on the driver.

Public API: :class:`KafkaSink`, :class:`KafkaSinkConfig`, :class:`KafkaCommittable`.
"""

from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.errors import KafkaTransactionError
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.connectors.kafka.sink import KafkaSink

__all__ = ["KafkaCommittable", "KafkaSink", "KafkaSinkConfig", "KafkaTransactionError"]
