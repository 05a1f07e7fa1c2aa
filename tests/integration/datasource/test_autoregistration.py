"""``.format("twophase")`` in a classic session with no ``register`` call (#18 §4).

The job is submitted as users submit one: ``spark-submit --py-files twophase.zip job.py`` on a
Python with twophase's dependencies but not twophase. Spark's data source lookup then finds the
wheel's top-level ``pyspark_twophase`` module and registers its ``DefaultSource``. (The lookup runs
in a Python worker that sees the environment's ``PYTHONPATH``, not ``--py-files``; an installed
wheel needs neither.) The stream writes three batches to a Delta table, read back once each.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.exactly_once.support import make_input

from twophase.integration.services.spark_cluster import spark_home
from twophase.integration.spark_shipping import build_wheel, executor_python, importable, py_file

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = """
import sys
from pyspark.sql import SparkSession

root = sys.argv[1]
spark = SparkSession.builder.getOrCreate()
query = (
    spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(root + "/input")
    .writeStream.format("twophase")
    .option("sink", "delta")
    .option("job", "autoreg")
    .option("twophaseCheckpointDir", root + "/chk")
    .option("checkpointLocation", root + "/spark")
    .option("table_uri", root + "/table")
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
"""


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_the_wheel_registers_the_format_in_a_classic_session(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    python = executor_python()
    assert not importable(python, "twophase")  # only the shipped wheel brings it
    wheel = py_file(build_wheel())
    expected = make_input(tmp_path, files=3, rows_per_file=50)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {
        **os.environ,
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_DRIVER_PYTHON": str(python),
        "PYTHONPATH": str(wheel),
    }
    submit = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--master", "local[2]", "--py-files", str(wheel)),
        *("--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={python}"),
        str(script),
        str(tmp_path),
    ]
    run = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    table = DeltaTable(str(tmp_path / "table"))
    assert Counter(table.to_pyarrow_table().column("id").to_pylist()) == Counter(expected)
    assert table.version() == 2  # one commit per batch
