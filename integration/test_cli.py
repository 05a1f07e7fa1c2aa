"""The ``twophase`` command line, run as a subprocess like a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from twophase.integration.services import S3Endpoint
from twophase.integration.services.process import free_port, pid_alive

TWOPHASE = str(Path(sys.executable).parent / "twophase")


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("TWOPHASE_")}
    if "TWOPHASE_CACHE" in os.environ:
        clean["TWOPHASE_CACHE"] = os.environ["TWOPHASE_CACHE"]
    # a private run dir: never reuse nor stop a developer's `services up`
    clean.update({"TWOPHASE_RUN_DIR": str(tmp_path / "run"), "COLUMNS": "200", **env})
    return subprocess.run(
        [TWOPHASE, *args], capture_output=True, text=True, env=clean, timeout=300, check=False
    )


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_unreachable_bootstrap_fails_in_one_line(tmp_path: Path) -> None:
    closed = free_port()

    result = _run(
        ["demo"], tmp_path, TWOPHASE_KAFKA_BOOTSTRAP=f"127.0.0.1:{closed}", TWOPHASE_CONNECT_TIMEOUT_S="3"
    )

    line = _one_line_error(result)
    assert f"127.0.0.1:{closed}" in line
    assert "not reachable" in line


@pytest.mark.s3
def test_wrong_s3_credentials_fail_in_one_line(tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    result = _run(
        ["services", "up"],
        tmp_path,
        TWOPHASE_S3_ENDPOINT=s3_endpoint.endpoint_url,
        TWOPHASE_S3_ACCESS_KEY=s3_endpoint.access_key,
        TWOPHASE_S3_SECRET_KEY="not-the-secret-key",
    )

    line = _one_line_error(result)
    assert "rejected the credentials" in line
    assert "not-the-secret-key" not in result.stdout + result.stderr
    assert not (tmp_path / "run" / "services.json").exists()


@pytest.mark.parametrize("variable", ["TWOPHASE_KAFKA_PORT", "TWOPHASE_S3_PORT"])
def test_port_taken_fails_in_one_line(tmp_path: Path, variable: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = _run(["services", "up"], tmp_path, **{variable: str(port)})

    line = _one_line_error(result)
    assert f"127.0.0.1:{port}" in line
    assert "already in use" in line
    assert not (tmp_path / "run" / "services.json").exists()


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.spark
@pytest.mark.slow
def test_demo_runs_the_flights_job_against_given_endpoints(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    result = _run(
        ["demo", "--days", "3", "--files-per-trigger", "2", "--work-dir", str(tmp_path / "run"),
         "--delta-reader", "deltalake"],
        tmp_path,
        TWOPHASE_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TWOPHASE_S3_ENDPOINT=s3_endpoint.endpoint_url,
        TWOPHASE_S3_ACCESS_KEY=s3_endpoint.access_key,
        TWOPHASE_S3_SECRET_KEY=s3_endpoint.secret_key,
        COLUMNS="240",  # the summary table must not wrap
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    assert "✗" not in result.stdout
    summary = [line for line in result.stdout.splitlines() if line.strip().startswith("│ ")]
    for sink in ("kafka", "s3", "delta"):
        rows = [line for line in summary if line.split("│")[1].strip() == sink]
        assert any("✓" in row for row in rows), rows  # the summary table's "verified" column


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.s3
def test_services_up_status_down(tmp_path: Path) -> None:
    up = _run(["services", "up"], tmp_path)
    state_file = tmp_path / "run" / "services.json"
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads(state_file.read_text())
        assert oct(state_file.stat().st_mode & 0o777) == "0o600"
        pids = [state["kafka"]["pid"], state["s3"]["pid"]]
        assert all(pid_alive(pid) for pid in pids)

        status = _run(["services", "status"], tmp_path)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("✓") == 2
        assert state["kafka"]["bootstrap"] in status.stdout
    finally:
        down = _run(["services", "down"], tmp_path)

    assert down.returncode == 0, down.stderr
    assert "kafka" in down.stdout and "s3" in down.stdout
    assert not state_file.exists()
    assert not any(pid_alive(pid) for pid in pids)
