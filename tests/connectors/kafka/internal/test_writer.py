"""The Kafka writer's open (connectors/kafka/internal/writer.py) against the model's producer:
what it asks librdkafka before ``init_transactions``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from support.kafka_model import KafkaModel, ModelProducer

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.internal.writer import KafkaTransaction
from twophase.sinks.context import WriterContext

CTX = WriterContext(job_id="job", sink_name="out", checkpoint_id=1, partition=0, attempt=0, num_partitions=1)


class RecordingProducer(ModelProducer):
    """The model's producer, recording the calls that reach the cluster before writing."""

    def __init__(
        self, model: KafkaModel, conf: Mapping[str, Any], calls: list[str], metadata_fails: bool
    ) -> None:
        super().__init__(model, conf)
        self.calls = calls
        self.metadata_fails = metadata_fails

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.calls.append(f"metadata:{topic}")
        if self.metadata_fails:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    def init_transactions(self, timeout: float | None = None) -> None:
        self.calls.append("init_transactions")
        super().init_transactions(timeout)


def open_recorded(metadata_fails: bool = False, topic: str | None = "events") -> list[str]:
    model = KafkaModel()
    calls: list[str] = []
    kw: dict[str, Any] = {"topic": topic} if topic else {"topic_column": "topic"}
    config = KafkaSinkConfig(bootstrap_servers="model:9092", stats_wait_ms=10_000, **kw)
    txn = KafkaTransaction.open(
        config, CTX, new_producer=lambda conf: RecordingProducer(model, conf, calls, metadata_fails)
    )
    assert txn.producer_id >= 0
    return calls


def test_metadata_twice_before_init_transactions() -> None:
    # librdkafka 2.16 loses the coordinator lookup to the bootstrap broker's decommissioning about
    # every other time and retries it 500 ms later; after two metadata answers it does not
    assert open_recorded() == ["metadata:events", "metadata:events", "init_transactions"]


def test_metadata_of_every_topic_with_a_topic_column() -> None:
    assert open_recorded(topic=None) == ["metadata:None", "metadata:None", "init_transactions"]


def test_metadata_that_fails_leaves_the_verdict_to_init_transactions() -> None:
    assert open_recorded(metadata_fails=True) == ["metadata:events", "init_transactions"]
