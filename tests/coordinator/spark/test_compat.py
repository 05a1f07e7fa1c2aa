"""The Spark compatibility seam: one code path over pyspark 3.5 to 4.3 (what differs, by feature)."""

from __future__ import annotations

import inspect
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType, TimestampType

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
