"""The standalone-cluster recipe with a packed environment, both ways to start a driver.

A native cluster of two one-core workers (:class:`SparkCluster`); the executors' Python is the
archive of ``twophase package env --extra flights`` (no pyspark in it), shipped with
``spark.archives`` and run as ``./environment/bin/python``; Spark's jars are on the class path,
not in ``spark.jars``. The flights job runs a small input into Kafka, S3 and Delta, and ``twophase
verify`` reads every sink back:

(a) spark-submit, everything on its command line, the driver on the same archive unpacked as
    ``./environment`` where spark-submit runs (no pip-installed pyspark on either side);
(b) ``python flights_submit.py run --master ... --archive ...``: the builder carries
    ``spark.archives`` and the rest, ``PYSPARK_PYTHON`` picks the executors' Python.

Executors import twophase from the unpacked archive in their work directory and pyspark from the
Spark installation's ``python/lib/pyspark.zip``; no jar lands in a work directory, and the workers
delete finished applications' folders (the unpacked environments) after ``CLEAN_AFTER_S``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.packed_runs import flights_env, outcome_line, verify_exactly_once

from twophase.integration.jobs import flights_submit
from twophase.integration.packing import PackedEnv, pack_environment
from twophase.integration.services import S3Endpoint
from twophase.integration.services.cache import cache_dir
from twophase.integration.services.launcher import given_env
from twophase.integration.services.process import wait_ready
from twophase.integration.services.spark_cluster import SparkCluster, spark_home

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow, pytest.mark.long]

CLEAN_AFTER_S = 20
SITE = ("environment", "lib", "python3.11", "site-packages")


@pytest.fixture(scope="module")
def packed() -> PackedEnv:
    """The packed environment with the flights extra (the driver of (a) lands the input)."""
    return pack_environment(extras=["flights"])


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    """Two one-core workers whose folders are under the cache, not /tmp: each executor unpacks the
    ~580 MB environment into its work directory."""
    root = Path(tempfile.mkdtemp(prefix="packed-cluster-", dir=cache_dir()))
    started = SparkCluster(root, workers=2, cores=1, memory="1g", clean_after_s=CLEAN_AFTER_S)
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)


def _check_executors(outcome: dict[str, Any], cluster: SparkCluster) -> None:
    """Two executors, each on the archive unpacked in its work dir, with Spark's pyspark; no jar
    was copied into any work dir (the class path reads them in place)."""
    executors = outcome["executors"]
    assert len(executors) == 2, executors
    pyspark_zip = spark_home() / "python" / "lib" / "pyspark.zip"
    for twophase_file, pyspark_file, python in executors:
        work = Path(python).parents[2]  # worker-i/app-.../<executor id>/environment/bin/python
        assert Path(python).parts[-3:] == ("environment", "bin", "python")
        assert work.is_relative_to(cluster.root) and work.parent.name.startswith("app-"), python
        assert Path(twophase_file) == work.joinpath(*SITE, "twophase", "__init__.py")
        assert Path(pyspark_file) == pyspark_zip / "pyspark" / "__init__.py"
    assert list(cluster.root.glob("worker-*/app-*/*/*.jar")) == []


def _run_driver(
    command: list[str], tmp_path: Path, env: dict[str, str], cluster: SparkCluster
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run a driver command to its end; it must finish the job on the cluster's two executors."""
    proc = subprocess.run(
        command, env={**flights_env(tmp_path), **env}, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    outcome = outcome_line(proc.stdout)
    assert outcome["state"] == "FINISHED" and outcome["records"] > 0, outcome
    _check_executors(outcome, cluster)
    return proc, outcome


def test_spark_submit_with_a_packed_environment_runs_the_flights_job_exactly_once(
    tmp_path: Path, packed: PackedEnv, cluster: SparkCluster, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    env = given_env(kafka_bootstrap, s3_endpoint)
    work = tmp_path / "flights"
    args = [
        "submit",
        "--archive",
        str(packed.archive),
        "--work-dir",
        str(work),
        "--master",
        cluster.master_url,
    ]
    args += ["--days", "2", "--files-per-trigger", "1"]
    command = [sys.executable, "-m", "twophase.integration.jobs.flights_submit", *args]
    proc, outcome = _run_driver(command, tmp_path, env, cluster)
    # the driver: the same archive unpacked where spark-submit ran, pyspark from Spark's zip too
    driver_env = flights_submit.driver_dir(work) / "environment"
    twophase_file, pyspark_file, python = outcome["driver"]
    assert Path(python) == driver_env / "bin" / "python"
    assert Path(twophase_file) == driver_env.joinpath(*SITE[1:], "twophase", "__init__.py")
    assert Path(pyspark_file).parent.parent == spark_home() / "python" / "lib" / "pyspark.zip"
    # the line printed for users: the archive, the relative Python, no S3 secret
    line = next(ln for ln in proc.stderr.splitlines() if "spark-submit" in ln and "--conf" in ln)
    assert f"spark.archives={packed.archive}#environment" in line
    assert "spark.pyspark.python=./environment/bin/python" in line
    assert s3_endpoint.secret_key not in line
    verify_exactly_once(tmp_path, work, env)


def test_a_python_started_driver_sets_the_archive_on_its_builder(
    tmp_path: Path, packed: PackedEnv, cluster: SparkCluster, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    env = given_env(kafka_bootstrap, s3_endpoint)
    work = tmp_path / "flights"
    args = ["run", "--master", cluster.master_url, "--archive", str(packed.archive), "--work-dir", str(work)]
    args += ["--days", "1", "--files-per-trigger", "1"]
    _, outcome = _run_driver([sys.executable, str(flights_submit.SCRIPT), *args], tmp_path, env, cluster)
    _, pyspark_file, python = outcome["driver"]  # this Python, with pip's pyspark
    assert python == sys.executable and "site-packages" in Path(pyspark_file).parts
    verify_exactly_once(tmp_path, work, env)


def test_the_workers_delete_finished_applications_folders(cluster: SparkCluster) -> None:
    """Runs after the two jobs above: their executors' folders (~580 MB each, the unpacked
    environment) go once the applications ended ``CLEAN_AFTER_S`` ago."""

    def left() -> str | None:
        apps = sorted(p.name for p in cluster.root.glob("worker-*/app-*"))
        return f"application folders left: {apps}" if apps else None

    assert wait_ready(left, CLEAN_AFTER_S + 90, 2.0) is None
    size = sum(p.stat().st_size for p in cluster.root.rglob("*") if p.is_file() and not p.is_symlink())
    assert size < 20 * 2**20, size  # logs only
