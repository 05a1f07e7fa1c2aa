"""``twophase services`` and ``twophase demo``, run as a subprocess like a user would."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from support.cli import json_output, one_line_error, run_twophase

from twophase.integration.services import S3Endpoint
from twophase.integration.services.process import free_port, pid_alive


def test_unreachable_bootstrap_fails_in_one_line(tmp_path: Path) -> None:
    closed = free_port()

    env = {"TWOPHASE_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed}", "TWOPHASE_CONNECT_TIMEOUT_S": "3"}
    result = run_twophase(["demo"], tmp_path, env)

    line = one_line_error(result)
    assert f"127.0.0.1:{closed}" in line
    assert "not reachable" in line


@pytest.mark.s3
def test_wrong_s3_credentials_fail_in_one_line(tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    result = run_twophase(
        ["services", "up"],
        tmp_path,
        {
            "TWOPHASE_S3_ENDPOINT": s3_endpoint.endpoint_url,
            "TWOPHASE_S3_ACCESS_KEY": s3_endpoint.access_key,
            "TWOPHASE_S3_SECRET_KEY": "not-the-secret-key",
        },
    )

    line = one_line_error(result)
    assert "rejected the credentials" in line
    assert "not-the-secret-key" not in result.stdout + result.stderr
    assert not (tmp_path / "run" / "services.json").exists()


@pytest.mark.parametrize("variable", ["TWOPHASE_KAFKA_PORT", "TWOPHASE_S3_PORT"])
def test_port_taken_fails_in_one_line(tmp_path: Path, variable: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = run_twophase(["services", "up"], tmp_path, {variable: str(port)})

    line = one_line_error(result)
    assert f"127.0.0.1:{port}" in line
    assert "already in use" in line
    assert not (tmp_path / "run" / "services.json").exists()


@pytest.mark.long  # CI under 25 minutes (stop 54): runs in `make chaos`
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.spark
@pytest.mark.slow
def test_demo_runs_the_flights_job_against_given_endpoints(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    result = run_twophase(
        ["demo", "--days", "3", "--files-per-trigger", "2", "--work-dir", str(tmp_path / "run"),
         "--delta-reader", "deltalake", "--json"],
        tmp_path,
        {
            "TWOPHASE_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "TWOPHASE_S3_ENDPOINT": s3_endpoint.endpoint_url,
            "TWOPHASE_S3_ACCESS_KEY": s3_endpoint.access_key,
            "TWOPHASE_S3_SECRET_KEY": s3_endpoint.secret_key,
        },
    )  # fmt: skip

    body = json_output(result)
    assert body["state"] == "FINISHED" and body["verification"]["ok"] is True
    expected = body["verification"]["expected_records"]
    for sink in body["verification"]["sinks"]:
        assert (sink["sink"], sink["records"], sink["duplicates"], sink["missing"], sink["lingering"]) == (
            sink["sink"], expected, 0, 0, 0
        )  # fmt: skip
    assert {name: c["records_committed"] for name, c in body["committed"].items()} == {
        "kafka": expected, "s3": expected, "delta": expected
    }  # fmt: skip


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.s3
def test_services_up_status_down(tmp_path: Path) -> None:
    up = run_twophase(["services", "up"], tmp_path)
    state_file = tmp_path / "run" / "services.json"
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads(state_file.read_text())
        assert oct(state_file.stat().st_mode & 0o777) == "0o600"
        pids = [state["kafka"]["pid"], state["s3"]["pid"]]
        assert all(pid_alive(pid) for pid in pids)

        endpoints = {"kafka": state["kafka"]["bootstrap"], "s3": state["s3"]["endpoint_url"]}
        status = run_twophase(["services", "status"], tmp_path)  # an 80-column terminal
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("✓") == 2
        for endpoint in endpoints.values():  # whole, on one line
            assert any(endpoint in line for line in status.stdout.splitlines()), status.stdout
        assert max(len(line) for line in status.stdout.splitlines()) <= 80

        body = json_output(run_twophase(["services", "status", "--json"], tmp_path))
        assert [(s["name"], s["origin"], s["endpoint"], s["ready"]) for s in body["services"]] == [
            ("kafka", "services up", endpoints["kafka"], True),
            ("s3", "services up", endpoints["s3"], True),
            ("spark", "not running", "", False),  # only with `services up --spark-cluster`
        ]
        assert [s["pid"] for s in body["services"]] == [*pids, None]
    finally:
        down = run_twophase(["services", "down", "--json"], tmp_path)

    assert json_output(down) == {"stopped": ["kafka", "s3"]}
    assert not state_file.exists()
    assert not any(pid_alive(pid) for pid in pids)
