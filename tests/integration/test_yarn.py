"""The flights job on a real YARN (issue #45 item 2): ``spark-submit --master yarn`` with the packed
environment, in client and in cluster deploy mode, and a driver restarted by YARN.

A native ResourceManager and NodeManager (:class:`~twophase.integration.services.yarn.YarnCluster`,
Hadoop's jars from Maven) stage on MinIO (``spark.yarn.stagingDir=s3a://...``); the job's
checkpoints are on ``s3://``. In cluster mode with ``spark.yarn.maxAppAttempts=2``, the driver's
container (the application master, its JVM and the driver's Python) is killed with SIGKILL once
the first checkpoint is published: YARN starts a second attempt, which restores from the
checkpoint and finishes, and ``twophase verify`` reads every sink back exactly once.

Long (minutes on a 2-core machine): runs in ``make chaos``, not ``make test``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.packed_runs import flights_env, outcome_line, verify_exactly_once

from twophase.integration.packing import PackedEnv, pack_environment
from twophase.integration.services import S3Endpoint
from twophase.integration.services.launcher import given_env
from twophase.integration.services.process import wait_ready
from twophase.integration.services.yarn import (
    CONF_DIR_ENV,
    YarnEndpoint,
    application_masters,
    kill_container_of,
    yarn_service,
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.s3,
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.chaos,
]

RUN_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def packed() -> PackedEnv:
    """The packed environment with the flights extra (the driver lands the input)."""
    return pack_environment(extras=["flights"])


@pytest.fixture(scope="module")
def yarn(s3_endpoint: S3Endpoint) -> Iterator[YarnEndpoint]:
    """A ResourceManager and a NodeManager staging on the session's MinIO."""
    with yarn_service(s3_endpoint) as endpoint:
        yield endpoint


def _submit(
    tmp_path: Path, work: Path, mode: str, packed: PackedEnv, env: dict[str, str], days: int
) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "twophase.integration.jobs.flights_yarn", "submit"]
    command += ["--work-dir", str(work), "--deploy-mode", mode, "--archive", str(packed.archive)]
    command += ["--days", str(days), "--files-per-trigger", "1", "--job-id", _job_id(work)]
    return subprocess.Popen(
        command,
        env={**flights_env(tmp_path), **env},
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "submit.log").open("w"),
        text=True,
    )


def _finished(proc: subprocess.Popen[str], tmp_path: Path) -> dict[str, Any]:
    stdout, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    log = (tmp_path / "submit.log").read_text(errors="replace")
    assert proc.returncode == 0, stdout[-3000:] + log[-8000:]
    return outcome_line(stdout)


def test_client_mode_runs_the_flights_job_exactly_once(
    tmp_path: Path, packed: PackedEnv, yarn: YarnEndpoint, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    env = {**given_env(kafka_bootstrap, s3_endpoint), CONF_DIR_ENV: str(yarn.conf_dir)}
    work = tmp_path / "flights"
    outcome = _finished(_submit(tmp_path, work, "client", packed, env, days=2), tmp_path)
    assert outcome["final_status"] == "SUCCEEDED" and len(outcome["attempts"]) == 1, outcome
    # the line printed for users: the archive on S3, the staging folder, no S3 secret
    log = (tmp_path / "submit.log").read_text()
    line = next(ln for ln in log.splitlines() if "spark-submit" in ln and "--conf" in ln)
    assert "spark.yarn.stagingDir=s3a://" in line and "#environment" in line
    assert s3_endpoint.secret_key not in line
    verify_exactly_once(tmp_path, work, env)


def test_cluster_mode_restarts_a_killed_driver_which_restores_from_the_checkpoint(
    tmp_path: Path, packed: PackedEnv, yarn: YarnEndpoint, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    env = {**given_env(kafka_bootstrap, s3_endpoint), CONF_DIR_ENV: str(yarn.conf_dir)}
    work = tmp_path / "flights"
    proc = _submit(tmp_path, work, "cluster", packed, env, days=4)
    client = s3_endpoint.boto3_client()

    def first_checkpoint() -> str | None:
        if proc.poll() is not None:
            return "done"
        found = client.list_objects_v2(Bucket="twophase-flights", Prefix="checkpoints/").get("Contents", [])
        mine = [o["Key"] for o in found if f"/{_job_id(work)}/" in o["Key"] and "_committed" in o["Key"]]
        return None if mine and application_masters(str(work)) else "no committed checkpoint yet"

    assert wait_ready(first_checkpoint, RUN_TIMEOUT_S, 1.0) is None
    assert proc.poll() is None, "the job ended before its driver could be killed"
    (driver,) = application_masters(str(work))
    kill_container_of(driver)
    killed_at = time.monotonic()
    outcome = _finished(proc, tmp_path)
    assert outcome["final_status"] == "SUCCEEDED", outcome
    assert len(outcome["attempts"]) == 2, outcome  # YARN started the driver again
    assert time.monotonic() > killed_at
    verify_exactly_once(tmp_path, work, env)


def _job_id(work: Path) -> str:
    """The run's job id: its test's temporary folder's name (unique)."""
    return "flights_" + "".join(c if c.isalnum() else "_" for c in work.parent.name)
