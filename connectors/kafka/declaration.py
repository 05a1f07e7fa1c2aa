"""The Kafka connector's declaration: the one place outside this folder's code that the
runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(confluent-kafka's transactional producer, kafka-python's transaction admin calls) is a
``MissingExtraError`` naming ``pip install 'twophase[kafka]'``. ``kafka.<librdkafka key>`` options
of the data source reach ``client_config``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="kafka",
    title="Kafka",
    package="twophase.connectors.kafka",
    config="twophase.connectors.kafka.config:KafkaSinkConfig",
    sink="twophase.connectors.kafka.sink:KafkaSink",
    extra="kafka",
    # what `pip install 'twophase[kafka]'` brings (setup.py reads this tuple from the source):
    # the transactional producer on executors (librdkafka), and EndTxn / FindCoordinator /
    # transaction admin calls that librdkafka does not expose (kafka-python)
    requirements=("confluent-kafka>=2.10,<3", "kafka-python>=3.0,<4"),
    libraries={"confluent_kafka": "confluent-kafka", "kafka": "kafka-python"},
    exports={
        "KafkaSink": "sink",
        "KafkaSinkConfig": "config",
        "KafkaCommittable": "internal.committable",
        "KafkaTransactionError": "errors",
        "staging_jar": "jvm_jar",
    },
    top_level=("KafkaSink", "KafkaSinkConfig"),
    listing="twophase.connectors.kafka.listing:list_lingering",
    mapping_options={"kafka.": "client_config"},
)
"""The Kafka connector, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
