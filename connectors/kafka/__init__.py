"""Exactly-once Kafka sink: transactional producers on executors, EndTxn commits on the driver.

Public API: :class:`KafkaSink`, :class:`KafkaSinkConfig`, :class:`KafkaCommittable`.

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.kafka.declaration import DECLARATION

__all__ = ["KafkaCommittable", "KafkaSink", "KafkaSinkConfig", "KafkaTransactionError", "staging_jar"]

if TYPE_CHECKING:
    from twophase.connectors.kafka.config import KafkaSinkConfig
    from twophase.connectors.kafka.errors import KafkaTransactionError
    from twophase.connectors.kafka.internal.committable import KafkaCommittable
    from twophase.connectors.kafka.jvm_jar import staging_jar
    from twophase.connectors.kafka.sink import KafkaSink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
