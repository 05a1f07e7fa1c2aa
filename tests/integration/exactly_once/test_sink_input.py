"""What a Spark epoch hands Python: only the columns its sinks read, projected in the JVM, and nothing
computed that only the other columns need (a column that would fail the job if computed)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.exactly_once.support import make_input
from support.file_sink import JsonLinesFileSink, read_committed

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.coordinator.spark.job import Job
from twophase.coordinator.spark.tasks import sink_input
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.integration.readback import read_topic

pytestmark = [pytest.mark.spark]


class _Reads(JsonLinesFileSink):
    """The reference file sink, declaring the columns it reads; it writes every column it is given."""

    def __init__(self, name: str, root: Path, columns: tuple[str, ...]) -> None:
        super().__init__(name, root)
        self.columns = columns

    def read_columns(self) -> tuple[str, ...]:
        return self.columns


def _wide(spark: Any) -> Any:
    """25 columns like the flights job's, one of which fails the job if it is ever computed."""
    from pyspark.sql import functions as F

    frame = spark.range(0, 40, numPartitions=2).select(
        F.col("id"),
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        *(F.col("id").alias(f"c{i}") for i in range(21)),
    )
    return frame.withColumn("poison", F.raise_error(F.lit("a column no sink reads was computed")))


def _arrow_names(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    seen = {",".join(batch.schema.names) for batch in batches}
    yield pa.record_batch({"names": sorted(seen)})


def test_a_kafka_only_job_hands_python_its_key_and_value_only(spark: Any) -> None:
    kafka = KafkaSink("k", KafkaSinkConfig(bootstrap_servers="broker:9092", topic="t"))
    wide = _wide(spark)
    assert len(wide.columns) == 25
    projected = sink_input(wide, [kafka])
    assert projected.columns == ["key", "value"]
    seen = {row.names for row in projected.mapInArrow(_arrow_names, "names string").collect()}
    assert seen == {"key,value"}  # the Arrow schema reaching the Python worker, and no error raised
    plan = projected._jdf.queryExecution().executedPlan().toString()
    assert "raise_error" not in plan and "c20" not in plan


def test_a_job_writes_the_union_of_its_sinks_columns(spark: Any, tmp_path: Path) -> None:
    job = Job(spark, "union", str(tmp_path / "chk"))
    job.sink(_Reads("a", tmp_path / "out", ("id",))).sink(_Reads("b", tmp_path / "out", ("value", "id")))
    result = job.write(_wide(spark))
    assert result.state is JobState.FINISHED
    for name in ("a", "b"):
        rows = read_committed(tmp_path / "out", name)
        assert sorted(rows, key=lambda r: r["id"]) == [{"id": i, "value": f"v{i}"} for i in range(40)]


def test_a_sink_reading_every_column_gets_every_column(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    frame = spark.range(0, 6, numPartitions=1).select("id", (F.col("id") * 2).alias("double"))
    job = Job(spark, "all", str(tmp_path / "chk"))
    job.sink(_Reads("a", tmp_path / "out", ("id",))).sink(JsonLinesFileSink("b", tmp_path / "out"))
    assert job.write(frame).state is JobState.FINISHED
    assert read_committed(tmp_path / "out", "a")[0].keys() == {"id", "double"}


@pytest.mark.kafka
def test_a_kafka_only_job_writes_every_record_without_computing_the_other_columns(
    spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"sink-input-{uuid.uuid4().hex[:8]}"
    config = KafkaSinkConfig(bootstrap_servers=kafka_bootstrap, topic=topic, create_topic=True)
    result = Job(spark, "kafka_only", str(tmp_path / "chk")).sink(KafkaSink("k", config)).write(_wide(spark))
    assert result.state is JobState.FINISHED
    records = read_topic(kafka_bootstrap, topic)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (str(i).encode(), f"v{i}".encode()) for i in range(40)
    )


def test_a_streaming_job_hands_each_batch_only_the_columns_its_sink_reads(spark: Any, tmp_path: Path) -> None:
    # foreachBatch hands over a micro-batch Spark computed whole (every column of the query), so
    # only the hand-off to Python is projected here, not the computation
    from pyspark.sql import functions as F

    ids = make_input(tmp_path, files=2, rows_per_file=10)
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "input"))
        .select("id", (F.col("id") * 10).alias("tens"), F.lit("wide").alias("other"))
    )
    job = Job(spark, "stream", str(tmp_path / "chk")).sink(_Reads("a", tmp_path / "out", ("tens",)))
    handle = job.start(
        stream, spark_checkpoint_location=str(tmp_path / "spark"), trigger={"availableNow": True}
    )
    assert handle.await_termination(300)
    assert handle.status is JobState.FINISHED
    rows = read_committed(tmp_path / "out", "a")
    assert sorted(rows, key=lambda r: r["tens"]) == [{"tens": i * 10} for i in ids]
