"""The flights job with ``--store gcs`` end to end at small size (issue #46 item 5).

``twophase demo --store gcs`` runs in its own process (its Spark session carries Google's GCS
connector) against Kafka, MinIO and fake-gcs-server: twophase's checkpoints and the GCS file sink's
Parquet files on ``gs://``, the Delta table in the run's work directory (delta-rs cannot write
``gs://`` to fake-gcs-server). Its verifier reads every sink back with readers that are not the
writers (Kafka ``read_committed``; the files with pyarrow's GCS file system and with Spark through
the GCS connector; Delta with delta-spark), and this test reads the bucket once more with
google-cloud-storage: every file a finished Parquet object, all rows there, the checkpoints beside.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import json_output, run_twophase

from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.services import S3Endpoint
from twophase.integration.services.gcs_server import ENDPOINT_ENV, GcsEndpoint
from twophase.integration.services.launcher import given_env

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.delta, pytest.mark.slow]


@pytest.mark.long  # as the azure one: minutes under load, runs in `make chaos`
def test_the_flights_demo_on_gcs_verifies_every_sink_with_spark_through_the_gcs_connector(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint, gcs_endpoint: GcsEndpoint
) -> None:
    work_dir = tmp_path / "run-gcs"
    env = {**given_env(kafka_bootstrap, s3_endpoint), ENDPOINT_ENV: gcs_endpoint.url}
    result = run_twophase(
        ["demo", "--store", "gcs", "--days", "3", "--files-per-trigger", "2", "--work-dir", str(work_dir),
         "--json"],
        tmp_path,
        env,
        timeout_s=1200,  # a first run resolves the GCS connector with Maven
    )  # fmt: skip

    body = json_output(result)
    report = body["verification"]
    assert body["state"] == "FINISHED" and report["ok"] is True, report
    expected = report["expected_records"]
    sinks = {s["sink"]: s for s in report["sinks"]}
    assert sorted(sinks) == ["delta", "gcs", "kafka"]
    for s in sinks.values():
        assert (s["records"], s["duplicates"], s["missing"], s["lingering"]) == (expected, 0, 0, 0), s
    assert "Spark (GCS connector)" in sinks["gcs"]["detail"]
    assert sinks["gcs"]["location"].startswith("gs://")
    assert sinks["delta"]["location"] == str(work_dir / "delta")
    assert "checkpoint" in report["checkpoint_detail"] and report["checkpoint_ok"] is True

    # google-cloud-storage as one more reader: finished Parquet objects only, all rows there
    spec = FlightsJobSpec.load(work_dir)
    bucket = gcs_endpoint.client().bucket(spec.bucket)
    prefix = spec.s3_prefix.strip("/") + "/"
    blobs = list(bucket.list_blobs(prefix=prefix))
    assert blobs and all(b.name.endswith(".parquet") and b.size > 0 for b in blobs)
    assert sum(pq.read_table(io.BytesIO(b.download_as_bytes())).num_rows for b in blobs) == expected
    checkpoints = [b.name for b in bucket.list_blobs(prefix=f"checkpoints/{spec.job_id}/")]
    assert any(n.endswith("_metadata") for n in checkpoints), checkpoints
