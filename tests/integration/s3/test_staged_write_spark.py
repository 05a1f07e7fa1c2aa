"""The S3 sink's Spark-staged writes on real MinIO and Spark (#44 item 4): a job whose only sink
stages its epochs with Spark's Parquet writer through twophase's committer, read back by pyarrow;
a write that is never committed (the driver died after it) is aborted whole by the lingering
cleanup, with the upload of a file nothing records; a session without twophase's commit protocol
is refused by name before anything is written."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from twophase.connectors.s3 import S3Sink, S3SinkConfig, staging_jar
from twophase.connectors.s3.internal import staged_write
from twophase.coordinator.spark.job import Job
from twophase.integration.services import S3Endpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.s3

MakeConfig = Callable[..., S3SinkConfig]
STAGED = staged_write.SESSION_SETTINGS


@contextmanager
def staged_session(spark: SparkSession) -> Iterator[SparkSession]:
    """The session with twophase's commit protocol for the test's writes only."""
    staging_jar()  # the checkout built it (make jars): a missing one is named here, not as a class
    before = {k: spark.conf.get(k, None) for k in STAGED}
    for key, value in STAGED.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, was in before.items():
            spark.conf.unset(key) if was is None else spark.conf.set(key, was)


def rows(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    return spark.range(0, n, 1, partitions).selectExpr("id", "cast(id * 7 as string) as v")


def read_back(s3_endpoint: S3Endpoint, bucket: str, prefix: str) -> list[int]:
    fs = pafs.S3FileSystem(
        access_key=s3_endpoint.access_key,
        secret_key=s3_endpoint.secret_key,
        endpoint_override=s3_endpoint.endpoint_url,
        scheme="http",
    )
    table = ds.dataset(
        f"{bucket}/{prefix}", filesystem=fs, format="parquet", ignore_prefixes=["_", "."]
    ).to_table()
    return sorted(table.column("id").to_pylist())


def pending(s3: S3Client, bucket: str, prefix: str) -> list[str]:
    uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return [u["Key"] for u in uploads if u["Key"].startswith(prefix + "/")]


def test_a_job_stages_with_spark_and_commits_exactly_once(
    spark_s3: SparkSession, s3: S3Client, s3_endpoint: S3Endpoint, bucket: str, make_config: MakeConfig
) -> None:
    sink = S3Sink("out", make_config(format="parquet", write_path="spark"))
    with staged_session(spark_s3):
        result = Job(spark_s3, "staged-job", tempfile.mkdtemp()).sink(sink).write(rows(spark_s3, 30_000, 3))
    assert result.state.name == "FINISHED"
    assert read_back(s3_endpoint, bucket, "warehouse/out") == list(range(30_000))
    assert pending(s3, bucket, "warehouse/out") == []
    left = s3.list_objects_v2(Bucket=bucket, Prefix="warehouse/out/").get("Contents", [])
    assert [o["Key"] for o in left if "__magic" in o["Key"] or "/staged/" in o["Key"]] == []


def test_a_write_never_committed_is_aborted_whole(
    spark_s3: SparkSession, s3: S3Client, s3_endpoint: S3Endpoint, bucket: str, make_config: MakeConfig
) -> None:
    sink = S3Sink("out", make_config(format="parquet", write_path="spark"))
    with staged_session(spark_s3):
        staged = {
            p: t.committable
            for p, t in sink.stage_with_spark(rows(spark_s3, 10_000, 2), "job-crashed", 4).items()
        }
    assert sorted(staged) == [0, 1]
    target_marker = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=bucket, Prefix="warehouse/out/_twophase/").get("Contents", [])
    ]
    file_id = staged_write.file_job_id(s3.get_object(Bucket=bucket, Key=target_marker[0])["Body"].read())
    assert file_id is not None and all(f"-{file_id}-" in f.key for c in staged.values() for f in c.files)
    # the upload of a file a killed attempt was writing: in S3, recorded nowhere
    s3.create_multipart_upload(Bucket=bucket, Key=f"warehouse/out/part-00005-{file_id}-c000.snappy.parquet")
    assert len(pending(s3, bucket, "warehouse/out")) == 3
    held = [staged[0]]
    aborted = sink.abort_lingering(LingeringScope("job-crashed", "out", held=held, up_to_checkpoint=4))
    assert aborted == 2 and pending(s3, bucket, "warehouse/out") == [f.key for f in staged[0].files]
    sink.commit_batch(held)
    assert read_back(s3_endpoint, bucket, "warehouse/out") == list(range(5_000))  # partition 0's


def test_a_session_without_the_commit_protocol_is_refused_before_writing(
    spark_s3: SparkSession, s3: S3Client, bucket: str, make_config: MakeConfig
) -> None:
    sink = S3Sink("out", make_config(format="parquet", write_path="spark"))
    setting = re.escape("spark.sql.sources.commitProtocolClass=twophase.s3.StagingCommitProtocol")
    with pytest.raises(ConfigError, match=setting):
        sink.stage_with_spark(rows(spark_s3, 10, 1), "job-refused", 1)
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
