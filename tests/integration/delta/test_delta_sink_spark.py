"""The Delta sink writes from Spark tasks and commits per checkpoint; delta-spark reads the table back."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.delta.spark_write import write_and_commit, write_epoch

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.integration.services import S3Endpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.delta]

JOB = "delta-it"
COLUMNS = ["id", "name", "amount", "big", "ts", "local_ts", "day", "flag", "country"]
SCHEMA_DDL = (
    "id long, name string, amount decimal(12,2), big decimal(30,6), ts timestamp, "
    "local_ts timestamp_ntz, day date, flag boolean, country string"
)
UTC = dt.timezone.utc


def rows(start: int, stop: int) -> list[tuple[Any, ...]]:
    countries = ["fr", "de", None, "a b:c/é%", "日本"]
    out = []
    for i in range(start, stop):
        out.append(
            (
                i,
                None if i % 6 == 0 else f"nom-{i}-ünï-😀",
                None if i % 7 == 0 else decimal.Decimal(i * 37 % 100000) / 100,
                decimal.Decimal(f"{i}123456789012345678.123456") * (-1 if i % 2 else 1),
                None
                if i % 5 == 0
                else dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=i * 1_000_001),
                dt.datetime(1999, 12, 31, 23, 59, 59, 999999) + dt.timedelta(microseconds=i),
                None if i % 4 == 0 else dt.date(2020, 2, 29) + dt.timedelta(days=i),
                None if i % 3 == 0 else i % 2 == 0,
                countries[i % len(countries)],
            )
        )
    return out


def frame(spark: SparkSession, start: int, stop: int, partitions: int = 3) -> DataFrame:
    return spark.createDataFrame(rows(start, stop), SCHEMA_DDL).repartition(partitions)


def by_id(table_rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in COLUMNS) for r in table_rows), key=lambda t: t[0])


@pytest.fixture(autouse=True)
def utc_session(spark: SparkSession) -> None:
    # timestamps compare as the same instants whatever the machine's zone
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    # Python workers must run this venv's interpreter (pyarrow, the connectors); the shared session
    # does not set PYSPARK_PYTHON, and pyspark reads pythonExec per function it ships.
    spark.sparkContext.pythonExec = sys.executable


def test_delta_spark_reads_exactly_the_committed_rows(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "orders")
    sink = DeltaSink("orders", DeltaSinkConfig(path, partition_by=("country",), target_file_size_bytes=4096))
    expected = []
    for checkpoint, (start, stop) in enumerate([(0, 300), (300, 420), (420, 1000)], start=1):
        df = frame(spark, start, stop)
        expected += df.collect()
        assert write_and_commit(df, sink, JOB, checkpoint) is CommitOutcome.COMMITTED

    table = spark.read.format("delta").load(path)
    got = table.select(*COLUMNS).collect()
    assert len(got) == 1000
    assert by_id(got) == by_id(expected)
    # partition values came from the Add actions, including null and escaped ones
    counts = {r["country"]: r["count"] for r in table.groupBy("country").count().collect()}
    assert counts == {"fr": 200, "de": 200, None: 200, "a b:c/é%": 200, "日本": 200}
    # data skipping on our stats keeps exactly the matching rows
    assert table.where("id between 10 and 19").count() == 10
    source = frame(spark, 0, 1000)
    for predicate in ["ts >= '2024-01-01 00:05:00'", "name > 'nom-5'", "amount < 10", "day = '2020-03-05'"]:
        assert table.where(predicate).count() == source.where(predicate).count() > 0, predicate

    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [h["version"] for h in history] == [0, 1, 2]  # one commit per checkpoint
    assert history[0]["operation"] == "CREATE TABLE"


# tests/connectors/delta covers ALREADY_COMMITTED on recovery; make chaos runs this on Spark
@pytest.mark.long
def test_recommit_after_recovery_adds_nothing(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "again")
    sink = DeltaSink("again", DeltaSinkConfig(path))
    committables = write_epoch(frame(spark, 0, 50), sink, JOB, 1)
    assert len(committables) == 3  # one per Spark partition, committed together
    assert sink.commit_checkpoint(1, committables) is CommitOutcome.COMMITTED
    fresh = DeltaSink("again", DeltaSinkConfig(path))
    decoded = [fresh.decode(sink.encode(c)) for c in committables]
    assert fresh.recover_and_commit_checkpoint(1, decoded) is CommitOutcome.ALREADY_COMMITTED
    assert spark.read.format("delta").load(path).count() == 50
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count() == 1


@pytest.mark.s3
def test_s3_table_on_minio(spark_s3: SparkSession, s3_endpoint: S3Endpoint) -> None:
    bucket = "twophase-delta-it"
    s3_endpoint.ensure_bucket(bucket)
    prefix = f"tables/{uuid.uuid4().hex[:8]}"
    config = DeltaSinkConfig(
        f"s3://{bucket}/{prefix}", partition_by=("country",), storage_options=s3_endpoint.s3_options()
    )
    sink = DeltaSink("s3orders", config)
    expected = []
    for checkpoint, (start, stop) in enumerate([(0, 200), (200, 500)], start=1):
        df = frame(spark_s3, start, stop, partitions=2)
        expected += df.collect()
        assert write_and_commit(df, sink, JOB, checkpoint) is CommitOutcome.COMMITTED
    # a failed attempt's files of checkpoint 3 linger until abort_lingering
    lingering = write_epoch(frame(spark_s3, 500, 520, partitions=2), sink, JOB, 3)
    scope = LingeringScope[DeltaCommittable](JOB, "s3orders")
    assert sink.abort_lingering(scope) == sum(len(c.adds) for c in lingering)

    uri = f"s3a://{bucket}/{prefix}"
    got = spark_s3.read.format("delta").load(uri).select(*COLUMNS).collect()
    assert by_id(got) == by_id(expected)
    history = spark_s3.sql(f"DESCRIBE HISTORY delta.`{uri}`").collect()
    assert sorted(h["version"] for h in history) == [0, 1]
    keys = [
        o["Key"]
        for page in s3_endpoint.boto3_client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
        if "_delta_log" not in o["Key"]
    ]
    # nothing but the committed data files is left under the table
    assert len(keys) == len(spark_s3.read.format("delta").load(uri).inputFiles())


@pytest.mark.long  # CI under 25 minutes (stop 54): runs in `make chaos`
@pytest.mark.s3
def test_s3_cleanup_decides_from_the_checkpoints_commit_in_the_log(
    spark_s3: SparkSession, s3_endpoint: S3Endpoint
) -> None:
    """On S3, a file outside the snapshot is decided by its checkpoint's commit in the log: ours
    that Spark's OPTIMIZE compacted away stay (time travel reads them; VACUUM's to delete), the
    files of a committed checkpoint written a second time (a zombie attempt's) go."""
    bucket = "twophase-delta-it"
    s3_endpoint.ensure_bucket(bucket)
    prefix = f"tables/{uuid.uuid4().hex[:8]}"
    sink = DeltaSink(
        "s3optimize", DeltaSinkConfig(f"s3://{bucket}/{prefix}", storage_options=s3_endpoint.s3_options())
    )
    expected, committed = [], []
    for checkpoint, (start, stop) in enumerate([(0, 100), (100, 200)], start=1):
        df = frame(spark_s3, start, stop, partitions=2)
        expected += df.collect()
        committables = write_epoch(df, sink, JOB, checkpoint)
        assert sink.commit_checkpoint(checkpoint, committables) is CommitOutcome.COMMITTED
        committed += committables
    zombie = write_epoch(frame(spark_s3, 100, 200, partitions=2), sink, JOB, 2)
    uri = f"s3a://{bucket}/{prefix}"
    spark_s3.sql(f"OPTIMIZE delta.`{uri}`").collect()

    scope = LingeringScope[DeltaCommittable](JOB, "s3optimize")
    assert sink.abort_lingering(scope) == sum(len(c.adds) for c in zombie)
    keys = {
        o["Key"]
        for page in s3_endpoint.boto3_client()
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    }
    assert {f"{prefix}/{a.path}" for c in committed for a in c.adds} <= keys
    assert not {f"{prefix}/{a.path}" for c in zombie for a in c.adds} & keys
    latest = spark_s3.read.format("delta").load(uri).select(*COLUMNS).collect()
    before = spark_s3.read.format("delta").option("versionAsOf", 1).load(uri).select(*COLUMNS).collect()
    assert by_id(latest) == by_id(before) == by_id(expected)
