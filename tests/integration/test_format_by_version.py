"""``.format("twophase")`` on the Spark this Python runs, as each Spark version allows (#30).

Spark 4.1 and later: the installed wheel's ``pyspark_twophase`` registers the format with no
``register`` call, and a stream writes through it exactly once. Spark 4.0: the format is found, and a
write is refused with one line naming the Spark it needs. Spark 3.5 has no Python data sources:
Spark itself reports the format missing, and twophase's data source module refuses by name.
"""

from __future__ import annotations

import pkgutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.exactly_once.support import make_input

from twophase.coordinator.spark.compat import DATA_SOURCE_SPARK, spark_version
from twophase.sinks.errors import UnsupportedSparkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.compat]

NEEDS = "needs Spark 4.1 or later"
# Spark's lookup lists modules with pkgutil.iter_modules, which does not see an editable install's
# pyspark_twophase (the development venv): the wheel installed in a `make compat` cell is seen;
# here test_autoregistration.py ships the wheel to spark-submit instead
INSTALLED = any(m.name == "pyspark_twophase" for m in pkgutil.iter_modules())


def _start(spark: SparkSession, root: Path) -> object:
    return (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(root / "input"))
        .writeStream.format("twophase")
        .option("sink", "delta")
        .option("job", "by-version")
        .option("twophaseCheckpointDir", str(root / "chk"))
        .option("checkpointLocation", str(root / "spark"))
        .option("table_uri", str(root / "table"))
        .trigger(availableNow=True)
        .start()
    )


@pytest.mark.skipif(spark_version() < DATA_SOURCE_SPARK, reason=f'format("twophase") {NEEDS}')
@pytest.mark.skipif(not INSTALLED, reason="an editable install: Spark's lookup cannot list pyspark_twophase")
def test_the_installed_format_writes_exactly_once(spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    expected = make_input(tmp_path, files=3, rows_per_file=50)
    query = _start(spark, tmp_path)
    query.awaitTermination()  # type: ignore[attr-defined]
    table = DeltaTable(str(tmp_path / "table"))
    assert Counter(table.to_pyarrow_table().column("id").to_pylist()) == Counter(expected)
    assert table.version() == 2  # one commit per batch


@pytest.mark.skipif(spark_version() != (4, 0), reason="Spark 4.0 only: it has Python data sources")
@pytest.mark.skipif(not INSTALLED, reason="an editable install: Spark's lookup cannot list pyspark_twophase")
def test_on_spark_4_0_a_write_is_refused_by_name(spark: SparkSession, tmp_path: Path) -> None:
    make_input(tmp_path, files=1, rows_per_file=5)
    with pytest.raises(Exception, match=NEEDS):
        _start(spark, tmp_path).awaitTermination()  # type: ignore[attr-defined]
    assert not (tmp_path / "table").exists()


@pytest.mark.skipif(spark_version() >= (4, 0), reason="Spark 3.5 only: it has no Python data sources")
def test_on_spark_3_5_the_data_source_module_is_refused_by_name() -> None:
    import importlib

    with pytest.raises(UnsupportedSparkError, match=NEEDS):
        importlib.import_module("twophase.coordinator.spark.datasource")
