"""Exactly-once Kafka sink: transactional producers on executors, EndTxn commits on the driver.

Public API: :class:`KafkaSink`, :class:`KafkaSinkConfig`, :class:`KafkaCommittable`.
"""

from connectors.kafka.committable import CODEC, KafkaCommittable
from connectors.kafka.config import KafkaSinkConfig
from connectors.kafka.errors import KafkaTransactionError
from connectors.kafka.sink import KafkaSink

__all__ = ["CODEC", "KafkaCommittable", "KafkaSink", "KafkaSinkConfig", "KafkaTransactionError"]
