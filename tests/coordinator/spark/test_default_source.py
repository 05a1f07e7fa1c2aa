"""The ``twophase`` data source: the sink chosen and configured by string options alone."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from twophase.connectors.delta import DeltaSink
from twophase.connectors.kafka import KafkaSink
from twophase.connectors.s3 import S3Sink
from twophase.coordinator.spark.default_source import TwophaseDataSource, sink_from_options
from twophase.sinks.errors import ConfigError, MissingExtraError
from twophase.sinks.s3_options import S3Options

FACADE = {"job": "orders", "twophasecheckpointdir": "/tmp/chk", "checkpointlocation": "/tmp/spark-chk"}


def test_kafka_with_librdkafka_settings_as_prefixed_options() -> None:
    options = {
        **FACADE,
        "sink": "Kafka",
        "bootstrap_servers": "broker:9092",
        "topic": "orders",
        "pool_size": "6",
        "client_config": '{"linger.ms": "5", "acks": "all"}',
        "kafka.linger.ms": "20",  # wins over the JSON object
        "kafka.compression.type": "zstd",
    }
    sink = sink_from_options(options)
    assert isinstance(sink, KafkaSink) and sink.name == "kafka"
    assert sink.config.pool_size == 6
    assert dict(sink.config.client_config) == {"linger.ms": "20", "acks": "all", "compression.type": "zstd"}


def test_s3_and_delta_share_the_s3_options_with_the_checkpoints() -> None:
    s3 = {**FACADE, "s3.endpoint_url": "http://127.0.0.1:9000", "s3.region": "us-east-1"}
    files = sink_from_options({**s3, "sink": "s3", "sinkname": "files", "bucket": "lake", "prefix": "o"})
    table = sink_from_options({**s3, "sink": "delta", "table_uri": "s3://lake/tables/o"})
    assert isinstance(files, S3Sink) and files.name == "files"
    assert isinstance(table, DeltaSink) and table.name == "delta"
    expected = S3Options(endpoint_url="http://127.0.0.1:9000", region="us-east-1")
    assert files.config.storage_options == expected == table.config.storage_options


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, 'option "sink" must be one of'),
        ({"sink": "hdfs"}, "got 'hdfs'"),
        (
            {"sink": "kafka", "bootstrap_servers": "b:1", "topic": "t", "topik": "x"},
            r"unknown option\(s\) \['topik'\]",
        ),
        ({"sink": "s3", "bucket": "lake", "prefix": "p", "rolling.max_bytes": "1"}, "rolling.max_file_bytes"),
        (
            {"sink": "kafka", "bootstrap_servers": "b:1", "topic": "t", "write_path": "spark"},
            r"write_path=spark .* leave write_path unset",
        ),
        ({"sink": "s3", "bucket": "lake", "prefix": "p", "write_path": "spark"}, "Python data source"),
    ],
)
def test_unknown_sinks_and_options_are_refused_by_name(options: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        sink_from_options({**FACADE, **options})


def stream_writer(options: dict[str, str]) -> Any:
    source = TwophaseDataSource({**FACADE, **options})
    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    return source.streamWriter(schema, overwrite=False)


def test_row_format_files_that_would_stay_open_are_refused_with_the_way_out() -> None:
    with pytest.raises(ConfigError, match=r"rolling\.on_checkpoint=true"):
        stream_writer(
            {"sink": "s3", "bucket": "lake", "prefix": "p", "format": "jsonl", "speculation": "false"}
        )


def test_files_rolled_on_every_checkpoint_keep_nothing_in_progress() -> None:
    rolled = sink_from_options(
        {
            **FACADE,
            "sink": "s3",
            "bucket": "lake",
            "prefix": "p",
            "format": "jsonl",
            "rolling.on_checkpoint": "true",
        }
    )
    parquet = sink_from_options({**FACADE, "sink": "s3", "bucket": "lake", "prefix": "p"})
    spanning = sink_from_options({**FACADE, "sink": "s3", "bucket": "lake", "prefix": "p", "format": "csv"})
    assert isinstance(rolled, S3Sink) and isinstance(parquet, S3Sink) and isinstance(spanning, S3Sink)
    assert (rolled.keeps_in_progress, parquet.keeps_in_progress, spanning.keeps_in_progress) == (
        False,
        False,
        True,
    )


def test_the_module_spark_discovers_exports_the_data_source() -> None:
    import pyspark_twophase

    assert pyspark_twophase.DefaultSource is TwophaseDataSource
    assert TwophaseDataSource.name() == "twophase"


def test_the_user_guide_lists_every_option_of_every_sink() -> None:
    from pathlib import Path

    from twophase.coordinator.spark.default_source import sink_option_names
    from twophase.sinks.registry import CONNECTORS

    guide = (Path(__file__).resolve().parents[3] / "docs" / "guide" / "configure.md").read_text()
    start = guide.index('## Options of `.format("twophase")`')
    end = guide.find("\n## ", start + 1)
    section = guide[start : end if end > 0 else None]
    missing = [n for k in CONNECTORS.kinds() for n in sink_option_names(k) if f"`{n}`" not in section]
    assert [n for n in missing if not n.startswith("s3.")] == []


def test_a_misspelt_kafka_option_needs_no_other_connectors_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Connect server with the plain wheel has no pyiceberg: naming Kafka's options must not
    import the Iceberg connector (it did, and the misspelt option failed with ModuleNotFoundError)."""
    for name in ["pyiceberg", *(m for m in sys.modules if m.startswith("pyiceberg."))]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ModuleNotFoundError
    for name in [m for m in sys.modules if m.startswith("twophase.connectors.iceberg")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['topicc'\] for sink 'kafka'"):
        sink_from_options({"sink": "kafka", "bootstrap_servers": "b:9092", "topic": "t", "topicc": "t"})
    with pytest.raises(MissingExtraError, match=r"connector 'iceberg' needs pyiceberg.*twophase\[iceberg\]"):
        sink_from_options({"sink": "iceberg", "table": "ns.t", "catalog_uri": "sqlite:///x.db"})
