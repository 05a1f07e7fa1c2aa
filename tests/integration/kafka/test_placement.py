"""Keyed records land where Spark's own Kafka sink puts them, and carry a timestamp column's time
(issue #45 item 6).

Spark's Kafka sink produces with the Java client, whose default partitioner hashes a key with
murmur2 (positive hash modulo the partition count); librdkafka's default, ``consistent_random``,
hashes with CRC32. A pipeline moved from Spark's sink to twophase must keep each key on its
partition, so the sink produces with librdkafka's Java-compatible ``murmur2_random``. Both writes
go to a real broker, and the two topics are read back by a consumer that is neither writer.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from support.kafka.support import create_topic, sink_config, unique, write_one

from twophase.connectors.kafka import KafkaSink
from twophase.integration.readback import read_topic
from twophase.sinks.errors import SchemaError
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.kafka

PARTITIONS = 7
KEYS = [f"customer-{i}" for i in range(300)]


def placement(bootstrap: str, topic: str) -> dict[str, int]:
    return {r.key.decode(): r.partition for r in read_topic(bootstrap, topic) if r.key is not None}


def test_keys_land_on_the_partitions_spark_s_own_kafka_sink_chooses(
    spark: SparkSession, kafka_bootstrap: str
) -> None:
    by_spark, by_twophase, job = unique("placement-spark"), unique("placement-2pc"), unique("job")
    create_topic(kafka_bootstrap, by_spark, partitions=PARTITIONS)
    create_topic(kafka_bootstrap, by_twophase, partitions=PARTITIONS)
    (
        spark.createDataFrame([(k, k) for k in KEYS], "key string, value string")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", by_spark)
        .save()
    )
    sink = KafkaSink("out", sink_config(kafka_bootstrap, by_twophase, job))
    batch = pa.record_batch({"key": KEYS, "value": KEYS})
    sink.validate(batch.schema)
    assert sink.commit(write_one(sink, job, 1, 0, batch)) is CommitOutcome.COMMITTED

    spark_placement = placement(kafka_bootstrap, by_spark)
    assert len(spark_placement) == len(KEYS) and len(set(spark_placement.values())) == PARTITIONS
    assert placement(kafka_bootstrap, by_twophase) == spark_placement


def test_a_partitioner_in_client_config_is_kept(kafka_bootstrap: str) -> None:
    config = sink_config(kafka_bootstrap, "t", "j", client_config={"partitioner": "consistent_random"})
    assert config.producer_config("id")["partitioner"] == "consistent_random"


def test_a_timestamp_column_sets_each_records_timestamp(kafka_bootstrap: str) -> None:
    topic, job = unique("stamped"), unique("job")
    create_topic(kafka_bootstrap, topic)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job, timestamp_column="at"))
    at = pa.array([1_700_000_000_123_456, None], pa.timestamp("us", "UTC"))
    batch = pa.record_batch({"key": ["a", "b"], "value": ["a", "b"], "at": at})
    sink.validate(batch.schema)
    before_ms = int(time.time() * 1000)
    assert sink.commit(write_one(sink, job, 1, 0, batch)) is CommitOutcome.COMMITTED
    stamped = {r.key: r.timestamp_ms for r in read_topic(kafka_bootstrap, topic)}
    assert stamped[b"a"] == 1_700_000_000_123
    assert stamped[b"b"] is not None and stamped[b"b"] >= before_ms  # null: the time of producing


def test_a_timestamp_column_of_another_type_is_refused_before_writing(kafka_bootstrap: str) -> None:
    sink = KafkaSink("out", sink_config(kafka_bootstrap, "t", "j", timestamp_column="at"))
    with pytest.raises(SchemaError, match="timestamp column 'at' must be a timestamp, got string"):
        sink.validate(pa.schema([("key", pa.string()), ("value", pa.string()), ("at", pa.string())]))
