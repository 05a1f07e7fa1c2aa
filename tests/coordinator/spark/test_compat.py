"""The Spark compatibility seam: one code path over pyspark 3.5 to 4.3 (what differs, by feature)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType, TimestampType
from support.fakes import FakeExternalSystem, FakeSink

from twophase.coordinator.spark import compat
from twophase.sinks.errors import ConfigError, UnsupportedSparkError

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("at", TimestampType()),
        StructField("nested", StructType([StructField("at", TimestampType())])),
        StructField("many", ArrayType(TimestampType())),
        StructField("by_name", MapType(StringType(), TimestampType())),
    ]
)
ZONED = pa.timestamp("us", tz="Europe/Berlin")
pytestmark = pytest.mark.compat


def _expected() -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("at", ZONED),
            pa.field("nested", pa.struct([pa.field("at", ZONED)])),
            pa.field("many", pa.list_(pa.field("element", ZONED))),
            pa.field("by_name", pa.map_(pa.string(), ZONED)),
        ]
    )


def _types(schema: pa.Schema) -> list[pa.DataType]:
    return [f.type for f in schema]


def test_timestamps_carry_the_session_time_zone() -> None:
    assert _types(compat.arrow_schema(SCHEMA, "Europe/Berlin")) == _types(_expected())


def test_a_converter_without_time_zone_is_relabelled(monkeypatch: pytest.MonkeyPatch) -> None:
    # pyspark 3.5 to 4.1: to_arrow_schema(schema) labels every timestamp UTC
    import pyspark.sql.pandas.types as types

    real = types.to_arrow_schema
    utc: dict[str, Any] = {"timezone": "UTC"} if "timezone" in inspect.signature(real).parameters else {}

    def old_signature(schema: StructType) -> pa.Schema:
        return real(schema, **utc)

    monkeypatch.setattr(types, "to_arrow_schema", old_signature)
    assert _types(compat.arrow_schema(SCHEMA, "Europe/Berlin")) == _types(_expected())


def test_format_twophase_on_spark_3_5_names_the_version_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "spark_version", lambda: (3, 5))
    with pytest.raises(UnsupportedSparkError) as e:
        compat.require_data_source_api()
    assert isinstance(e.value, ConfigError)
    assert str(e.value).startswith('format("twophase") needs Spark 4.1 or later')
    assert "this is Spark 3.5: write with twophase.Job" in str(e.value)


@pytest.mark.skipif(compat.spark_version() < compat.DATA_SOURCE_SPARK, reason="Spark 4.1+ only")
def test_the_installed_spark_has_the_data_source_api() -> None:
    assert compat.spark_version() >= compat.DATA_SOURCE_SPARK
    compat.require_data_source_api()


class _Spark35Frame:
    """What collect_arrow sees of a Spark 3.5 DataFrame: no toArrow, the internal collection."""

    schema = StructType([StructField("id", LongType())])

    class sparkSession:
        class conf:
            @staticmethod
            def get(key: str) -> str:
                return "UTC"

    def _collect_as_arrow(self) -> list[pa.RecordBatch]:
        return [pa.record_batch([pa.array([1, 2])], names=["id"])]


def test_collect_arrow_without_to_arrow() -> None:
    frame: Any = _Spark35Frame()
    assert compat.collect_arrow(frame).column("id").to_pylist() == [1, 2]


@pytest.mark.skipif(compat.spark_version() < (4, 0), reason="Spark 3.5 has no Python data sources")
def test_spark_4_0_finds_the_format_and_its_write_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "spark_version", lambda: (4, 0))
    source: Any = compat.refusing_data_source()  # a DataSource subclass (pyspark 4's, untyped here)
    assert source is not None and source.name() == "twophase"
    with pytest.raises(UnsupportedSparkError, match=r"needs Spark 4\.1 or later .* this is Spark 4\.0"):
        source({}).streamWriter(SCHEMA, False)


@pytest.mark.parametrize(
    ("version", "release"),
    [("3.5.0", (3, 5, 0)), ("3.5.2+databricks", (3, 5, 2)), ("4.1.0.dev0", (4, 1, 0)), ("4.2", (4, 2, 0))],
)
def test_spark_release_reads_the_patch(
    monkeypatch: pytest.MonkeyPatch, version: str, release: tuple[int, ...]
) -> None:
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", version)
    assert compat.spark_release() == release


def test_the_installed_python_has_what_map_in_arrow_needs() -> None:
    compat.require_map_in_arrow()


def test_a_python_without_pandas_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas fails as if not installed
    with pytest.raises(UnsupportedSparkError) as e:
        compat.require_map_in_arrow()
    assert "mapInArrow, which twophase writes with, needs pandas" in str(e.value)
    assert "install pandas>=1.5.3" in str(e.value) and "\n" not in str(e.value)


def test_spark_3_5_on_python_3_12_without_distutils_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql.pandas import utils

    def no_distutils() -> None:  # what pyspark 3.5's check raises on Python 3.12 without setuptools
        raise ModuleNotFoundError("No module named 'distutils'", name="distutils")

    monkeypatch.setattr(utils, "require_minimum_pandas_version", no_distutils)
    with pytest.raises(UnsupportedSparkError, match=r"needs distutils, .*: install setuptools"):
        compat.require_map_in_arrow()


def test_the_job_refuses_it_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from twophase import Job

    monkeypatch.setitem(sys.modules, "pandas", None)
    spark: Any = object()  # the refusal comes before the job reads its session or the DataFrame
    job = Job(spark, "refused", str(tmp_path / "checkpoints")).sink(FakeSink("fake", FakeExternalSystem()))
    with pytest.raises(UnsupportedSparkError, match="needs pandas"):
        job.write(spark)
    assert not (tmp_path / "checkpoints").exists()
