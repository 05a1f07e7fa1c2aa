"""The test SparkSession really starts with its jars: Delta round trip, Kafka batch read, s3a."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from twophase.integration.services import S3Endpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


@pytest.mark.delta
def test_delta_table_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    spark.range(0, 100).write.format("delta").save(path)
    spark.range(100, 150).write.format("delta").mode("append").save(path)

    ids = {row.id for row in spark.read.format("delta").load(path).collect()}

    assert ids == set(range(150))
    versions = [row.version for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]
    assert sorted(versions) == [0, 1]


@pytest.mark.kafka
def test_kafka_topic_batch_read(spark: SparkSession, kafka_bootstrap: str) -> None:
    topic = f"spark-read-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(200):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = frame.selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition").collect()

    assert {(row.k, row.v) for row in rows} == {(str(i), f"v{i}") for i in range(200)}
    assert {row.partition for row in rows} == {0, 1}


@pytest.mark.s3
@pytest.mark.delta
def test_delta_table_on_s3a(spark_s3: SparkSession, s3_endpoint: S3Endpoint) -> None:
    bucket = f"spark-{uuid.uuid4().hex[:8]}"
    s3_endpoint.ensure_bucket(bucket)
    path = f"s3a://{bucket}/table"

    spark_s3.range(0, 20).write.format("delta").save(path)
    ids = {row.id for row in spark_s3.read.format("delta").load(path).collect()}

    assert ids == set(range(20))
    listed = s3_endpoint.boto3_client().list_objects_v2(Bucket=bucket, Prefix="table/_delta_log/")
    assert any(obj["Key"].endswith("00000000000000000000.json") for obj in listed.get("Contents", []))
