"""The acknowledgements gathered into one partition before the driver collects them (issue #42):
a job of more partitions than ``RuntimeConfig.gather_acknowledgements_above`` writes into real
Kafka and S3 (MinIO), every record reads back once through readers that are not the writer, and the
driver receives fewer Arrow chunks than the write had tasks (``coordinator/spark/tasks.py``)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.exactly_once.support import assert_exactly_once, make_input
from support.file_sink import JsonLinesFileSink
from support.s3.buckets import fresh_bucket

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.s3 import S3Sink
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark import compat, tasks
from twophase.coordinator.spark.job import Job
from twophase.coordinator.state import ack_table
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.integration.readback import read_topic
from twophase.integration.services import S3Endpoint

pytestmark = [pytest.mark.spark]

PARTITIONS = 12
ROWS = 240


@pytest.fixture
def bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh bucket, emptied and removed afterwards."""
    with fresh_bucket(s3_endpoint.boto3_client(), "gather") as name:
        yield name


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> list[pa.Table]:
    """Every acknowledgement table the driver collects, as Spark handed it (before the intake)."""
    tables: list[pa.Table] = []
    real = compat.collect_arrow

    def recording(df: Any) -> pa.Table:
        table = real(df)
        tables.append(table)
        return table

    monkeypatch.setattr(tasks, "collect_arrow", recording)
    return tables


def _frame(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return spark.range(0, ROWS, numPartitions=PARTITIONS).select(
        F.col("id"), F.col("id").cast("string").alias("key"), F.concat(F.lit("v"), F.col("id")).alias("value")
    )


def _s3_ids(s3_endpoint: S3Endpoint, bucket: str) -> list[int]:
    """The ids in every Parquet object under the bucket, read with boto3 and pyarrow (not the sink)."""
    s3 = s3_endpoint.boto3_client()
    ids: list[int] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/"):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".parquet"):
                body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                ids.extend(pq.read_table(io.BytesIO(body)).column("id").to_pylist())
    return ids


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.parametrize(("gather_above", "gathered"), [(4, True), (None, False)])
def test_a_gathered_epoch_writes_kafka_and_s3_exactly_once_in_fewer_chunks(
    spark: Any,
    kafka_bootstrap: str,
    s3_endpoint: S3Endpoint,
    bucket: str,
    collected: list[pa.Table],
    tmp_path: Path,
    gather_above: int | None,
    gathered: bool,
) -> None:
    topic = f"gather-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSink("k", KafkaSinkConfig(bootstrap_servers=kafka_bootstrap, topic=topic, create_topic=True))
    s3 = S3Sink("s", s3_endpoint.sink_config(bucket=bucket, prefix="out", format="parquet"))
    config = RuntimeConfig(gather_acknowledgements_above=gather_above)
    job = Job(spark, f"gather-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk"), config=config)
    result = job.sink(kafka).sink(s3).write(_frame(spark))

    assert result.state is JobState.FINISHED
    assert [e.partitions for e in result.epochs] == [PARTITIONS]
    records = read_topic(kafka_bootstrap, topic)
    assert sorted(int(r.key or b"-1") for r in records) == list(range(ROWS))
    assert sorted(r.value or b"" for r in records) == sorted(f"v{i}".encode() for i in range(ROWS))
    assert sorted(_s3_ids(s3_endpoint, bucket)) == list(range(ROWS))
    assert not s3_endpoint.boto3_client().list_multipart_uploads(Bucket=bucket).get("Uploads")

    [table] = collected  # the one epoch's acknowledgements: one row per (sink, partition)
    assert table.num_rows == 2 * PARTITIONS
    assert sorted(set(zip(table["sink"].to_pylist(), table["partition"].to_pylist(), strict=True))) == sorted(
        (sink, p) for sink in ("k", "s") for p in range(PARTITIONS)
    )
    chunks = max(column.num_chunks for column in table.columns)
    if gathered:
        assert chunks < PARTITIONS, f"{chunks} chunks for {PARTITIONS} tasks: not gathered"
        assert ack_table.in_key_order(table.select(ack_table.KEY).combine_chunks())  # sorted by the gather
    else:
        assert chunks == PARTITIONS  # one batch per task, as Spark hands a result stage's


def test_a_streaming_job_gathers_each_micro_batch_and_finishes_exactly_once(
    spark: Any, tmp_path: Path, collected: list[pa.Table]
) -> None:
    """The foreachBatch path (``JobHandle``) runs the same epoch: each micro-batch of 6 partitions
    is gathered above a threshold of 2 and its records land once in a sink read back by file."""
    expected = make_input(tmp_path, files=3)
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "input"))
        .repartition(6)
    )
    config = RuntimeConfig(gather_acknowledgements_above=2)
    job = Job(spark, "eo", str(tmp_path / "chk"), config=config).sink(
        JsonLinesFileSink("a", tmp_path / "out")
    )
    handle = job.start(
        stream, spark_checkpoint_location=str(tmp_path / "spark"), trigger={"availableNow": True}
    )
    assert handle.await_termination(300)
    assert handle.status is JobState.FINISHED
    assert [m.partitions for m in handle.metrics] == [6, 6, 6]
    assert [max(c.num_chunks for c in t.columns) for t in collected] == [1, 1, 1]
    assert_exactly_once(tmp_path, ["a"], expected)
