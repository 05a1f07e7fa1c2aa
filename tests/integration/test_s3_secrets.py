"""Explicit S3 credentials (``S3Options``) reach S3 and nothing else (#18 §1).

A batch job with its checkpoints on ``s3://`` and an S3 and a Delta sink, every client given the
same explicit keys, writes to MinIO. Then every object it wrote (checkpoint metadata, Delta log,
data files) and every log record of the run are scanned for the secret key and the access key,
and so are the reprs of the job's configs.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

import pytest

from twophase import DeltaSink, DeltaSinkConfig, Job, S3Sink, S3SinkConfig
from twophase.integration.services import S3Endpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.delta]


def test_explicit_keys_stay_out_of_checkpoints_tables_logs_and_reprs(
    spark: SparkSession, s3_endpoint: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="twophase")
    bucket = "twophase-secrets"
    s3_endpoint.ensure_bucket(bucket)
    run = uuid.uuid4().hex[:8]
    options = s3_endpoint.s3_options()
    secret, access = s3_endpoint.secret_key.encode(), s3_endpoint.access_key.encode()
    files = S3SinkConfig(bucket=bucket, prefix=f"{run}/files", storage_options=options)
    table = DeltaSinkConfig(f"s3://{bucket}/{run}/table", storage_options=options)
    job = Job(spark, f"secrets_{run}", f"s3://{bucket}/{run}/chk", storage_options=options)
    job.sink(S3Sink("files", files)).sink(DeltaSink("table", table))

    result = job.write(spark.range(0, 500, numPartitions=2).selectExpr("id", "CAST(id AS STRING) AS v"))

    assert result.state.value == "FINISHED"
    client = s3_endpoint.boto3_client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=run).get("Contents", [])]
    assert any("/chk/" in k for k in keys) and any("_delta_log" in k for k in keys)
    for key in keys:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert secret not in body and access not in body, key
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    assert logged and s3_endpoint.secret_key not in logged and s3_endpoint.access_key not in logged
    for shown in (repr(files), repr(table), repr(options), str(job.sinks)):
        assert s3_endpoint.secret_key not in shown and s3_endpoint.access_key not in shown
