"""Spark Declarative Pipelines (``pyspark.pipelines``) with a ``twophase`` sink (#18 §4).

A pipeline's ``create_sink`` takes any format the server can look up, so ``format="twophase"``
works: an append flow writes into it through the data source. The pipeline runs with pyspark's
own CLI against the Connect server; a second run (an incremental update) adds only the new input.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.exactly_once.support import make_input

from twophase.coordinator.spark.compat import spark_version

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.compat,
    # declarative pipelines (pyspark.pipelines) came with Spark 4.1, as did format("twophase")
    pytest.mark.skipif(spark_version() < (4, 1), reason="declarative pipelines need Spark 4.1 or later"),
]

FLOW = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

spark = SparkSession.active()
dp.create_sink(
    "orders_table",
    format="twophase",
    options={{"sink": "delta", "job": "sdp", "twophaseCheckpointDir": "{chk}", "table_uri": "{table}"}},
)


@dp.append_flow(target="orders_table")
def orders():
    return spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet("{input}")
"""


def run_pipeline(spec: Path, connect_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARK_REMOTE": connect_url}
    return subprocess.run(
        [sys.executable, "-m", "pyspark.pipelines.cli", "run", "--spec", str(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_a_declarative_pipeline_writes_through_a_twophase_sink(connect_url: str, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    expected = make_input(tmp_path, files=2, rows_per_file=100)
    (tmp_path / "transformations").mkdir()
    table = tmp_path / "table"
    flow = FLOW.format(chk=tmp_path / "chk", table=table, input=tmp_path / "input")
    (tmp_path / "transformations" / "orders.py").write_text(flow)
    spec = tmp_path / "spark-pipeline.yml"
    spec.write_text(
        "name: twophase_orders\n"
        f"storage: file://{tmp_path / 'storage'}\n"
        "libraries:\n  - glob:\n      include: transformations/**\n"
    )
    first = run_pipeline(spec, connect_url)
    assert first.returncode == 0 and "Run is COMPLETED" in first.stdout, first.stdout + first.stderr[-3000:]
    assert Counter(DeltaTable(str(table)).to_pyarrow_table().column("id").to_pylist()) == Counter(expected)
    expected += make_input(tmp_path, files=1, rows_per_file=100, start=1000)
    second = run_pipeline(spec, connect_url)  # an incremental update: only the new file
    assert second.returncode == 0, second.stdout + second.stderr[-3000:]
    delta = DeltaTable(str(table))
    assert Counter(delta.to_pyarrow_table().column("id").to_pylist()) == Counter(expected)
    assert delta.version() == 2  # one commit per micro-batch, none repeated
