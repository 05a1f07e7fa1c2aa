"""A real Spark standalone cluster (issue #17): a master and two workers from pyspark's own jars,
executors in their own JVMs. The job runs on it and an executor JVM is killed mid-write: its
task runs again on the other executor, and every record lands exactly once.

The job is submitted as users ship it: ``spark-submit`` with the built twophase wheel in
``spark.submit.pyFiles`` and, for the executors, a Python that has the dependencies but not
twophase (:mod:`twophase.integration.spark_shipping`): the executors can only import the shipped file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.exactly_once.support import REPO, assert_exactly_once, make_input, run_job

from twophase.integration.services.process import wait_ready
from twophase.integration.services.spark_cluster import SparkCluster, executor_pids, spark_master_from_env
from twophase.integration.spark_shipping import build_wheel, executor_python, importable, ship_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path | None]]:
    """``TWOPHASE_SPARK_MASTER``, or a native cluster of two one-core workers for this module:
    the master URL and, for the native one, the folder holding the workers' work directories."""
    given = spark_master_from_env()
    if given is not None:
        yield given, None
        return
    root = tmp_path_factory.mktemp("spark-cluster")
    cluster = SparkCluster(root, workers=2, cores=1, memory="1g")
    try:
        yield cluster.master_url, root
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def shipping() -> dict[str, str]:
    """The Spark conf that ships the current sources' wheel, with executors on a Python that has
    the runtime dependencies and no twophase (both cached under ``~/.cache/twophase``)."""
    python = executor_python()
    assert not importable(python, "twophase")
    return ship_conf(build_wheel(), str(python))


def executors_launched(root: Path) -> int:
    """Executors the workers launched (one work directory each: worker-i/app-…/<executor id>)."""
    return sum(1 for d in root.glob("worker-*/app-*/*") if d.is_dir())


# make test runs the cluster in test_flights_cluster; make chaos kills executors by the dozen
@pytest.mark.long
def test_an_executor_killed_mid_write_on_a_cluster_is_exactly_once(
    spark_cluster: tuple[str, Path | None], shipping: dict[str, str], tmp_path: Path
) -> None:
    spark_master, work = spark_cluster
    expected = make_input(tmp_path, files=4)
    run = run_job(
        tmp_path,
        "--master",
        spark_master,
        "--sinks",
        "a,b",
        "--report-imports",
        fault="mid_write:2",
        kill="executor",
        timeout=600,
        submit_conf=shipping,
    )
    assert run.returncode == 0, run.log
    assert run.outcome is not None, run.log
    shipped = Path(shipping["spark.submit.pyFiles"]).name
    imports = run.outcome["imports"]
    assert isinstance(imports, dict) and imports["executors"], run.outcome
    for where, python in imports["executors"]:  # from the shipped file in the executor's work dir
        assert Path(where).parts[-3:] == (shipped, "twophase", "__init__.py"), where
        assert python == shipping["spark.pyspark.python"]
        assert not Path(where).is_relative_to(REPO)
        if work is not None:
            assert Path(where).is_relative_to(work), where
    assert shipped in Path(imports["driver"]).parts  # spark-submit puts --py-files on the driver's path too
    assert (tmp_path / "fault-state" / "mid_write_2" / "mid_write.2").exists()  # the kill fired
    assert_exactly_once(tmp_path, ["a", "b"], expected)
    # the workers stop the application's executors after it ends
    wait_ready(lambda: f"executors {executor_pids()}" if executor_pids() else None, 180, 0.5)
    assert executor_pids() == []
    if work is not None:  # two executors, one killed mid-write (exit 137) and replaced
        assert executors_launched(work) == 3
