"""The flights job with ``--store azure`` end to end at small size (issue #46 item 5).

``twophase demo --store azure`` runs in its own process (its Spark session carries hadoop-azure)
against Kafka and Azurite: twophase's checkpoints, the Azure file sink's Parquet files and the
Delta table on ``abfss://``. Its verifier reads every sink back with readers that are not the
writers (Kafka ``read_committed``; the files with pyarrow's Azure file system and with Spark
through hadoop-azure; Delta with delta-spark over ABFS), and this test reads the container once
more with the Azure SDK: every file committed, nothing staged left, no key in the output.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.cli import json_output, run_twophase

from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.services import S3Endpoint
from twophase.integration.services.azurite import CONNECTION_STRING_ENV, AzureBlobEndpoint
from twophase.integration.services.launcher import given_env

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.delta, pytest.mark.slow]


@pytest.mark.long  # CI under 25 minutes (stop 54): runs in `make chaos`
def test_the_flights_demo_on_azure_verifies_every_sink_with_spark_through_hadoop_azure(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint, azure_endpoint: AzureBlobEndpoint
) -> None:
    work_dir = tmp_path / "run-azure"
    env = {
        **given_env(kafka_bootstrap, s3_endpoint),
        CONNECTION_STRING_ENV: azure_endpoint.connection_string(),
    }
    result = run_twophase(
        ["demo", "--store", "azure", "--days", "3", "--files-per-trigger", "2", "--work-dir", str(work_dir),
         "--json"],
        tmp_path,
        env,
        timeout_s=1200,  # a first run resolves hadoop-azure with Maven
    )  # fmt: skip

    assert azure_endpoint.account_key not in result.stdout + result.stderr
    body = json_output(result)
    report = body["verification"]
    assert body["state"] == "FINISHED" and report["ok"] is True, report
    expected = report["expected_records"]
    sinks = {s["sink"]: s for s in report["sinks"]}
    assert sorted(sinks) == ["azure", "delta", "kafka"]
    for s in sinks.values():
        assert (s["records"], s["duplicates"], s["missing"], s["lingering"]) == (expected, 0, 0, 0), s
    assert "Spark (hadoop-azure)" in sinks["azure"]["detail"]
    assert sinks["azure"]["location"].startswith("abfss://")
    assert sinks["delta"]["location"].startswith("abfss://")
    assert "checkpoint" in report["checkpoint_detail"] and report["checkpoint_ok"] is True

    # the Azure SDK as one more reader: committed Parquet blobs only, each readable, all rows there
    spec = FlightsJobSpec.load(work_dir)
    container = azure_endpoint.service_client().get_container_client(spec.bucket)
    prefix = spec.s3_prefix.strip("/") + "/"
    names = sorted(container.list_blob_names(name_starts_with=prefix))
    staged = {b.name for b in container.list_blobs(name_starts_with=prefix, include=["uncommittedblobs"])}
    assert names and staged == set(names)
    rows = sum(pq.read_table(io.BytesIO(container.download_blob(n).readall())).num_rows for n in names)
    assert rows == expected
    checkpoints = list(container.list_blob_names(name_starts_with=f"checkpoints/{spec.job_id}/"))
    assert any(n.endswith("_metadata") for n in checkpoints), checkpoints
