"""The shared SparkSession, with this venv's Python for workers and ``twophase-jsonl`` registered."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
from support.datasource.jsonl_format import JsonLinesTwoPhase

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def spark_ds(spark: SparkSession) -> SparkSession:
    """``spark`` with workers on this interpreter (the session does not set PYSPARK_PYTHON; pyspark
    reads ``pythonExec`` per function it ships, the data source class included) and the test
    format registered."""
    spark.sparkContext.pythonExec = sys.executable
    spark.dataSource.register(JsonLinesTwoPhase)
    return spark
