"""Sink configurations from Spark's string options: every field reachable, every mistake named."""

from __future__ import annotations

import pytest

from twophase.connectors.delta import DeltaSinkConfig
from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.s3 import FileFormat, RollingPolicy, S3SinkConfig
from twophase.coordinator.spark.sink_options import config_from_options, option_names
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options


def test_scalars_tuples_enums_nested_configs_and_s3_options() -> None:
    options = {
        "bucket": "lake",
        "prefix": "events",
        "format": "JSONL",
        "partition_by": "origin, month",
        "part_size_bytes": "5242880",
        "csv_header": "false",
        "rolling.on_checkpoint": "true",
        "rolling.inactivity_interval_ms": "none",
        "s3.endpoint_url": "http://127.0.0.1:9000",
        "s3.path_style": "true",
    }
    config, used = config_from_options(S3SinkConfig, options)
    assert config == S3SinkConfig(
        bucket="lake",
        prefix="events",
        format=FileFormat.JSON_LINES,
        partition_by=("origin", "month"),
        part_size_bytes=5 * 1024 * 1024,
        csv_header=False,
        rolling=RollingPolicy(on_checkpoint=True, inactivity_interval_ms=None),
        storage_options=S3Options(endpoint_url="http://127.0.0.1:9000", path_style=True),
    )
    assert used == set(options)


def test_mappings_are_json_objects_and_keep_their_keys_case() -> None:
    config, _ = config_from_options(
        DeltaSinkConfig,
        {"table_uri": "/tmp/t", "table_configuration": '{"delta.appendOnly": "true"}', "columns": "a,b"},
    )
    assert config.table_configuration == {"delta.appendOnly": "true"}
    assert config.columns == ("a", "b")
    with pytest.raises(ConfigError, match="'table_configuration' must be a JSON object"):
        config_from_options(DeltaSinkConfig, {"table_uri": "/t", "table_configuration": "delta.x=1"})


def test_literals_and_optional_strings() -> None:
    config, _ = config_from_options(
        KafkaSinkConfig,
        {"bootstrap_servers": "b:9092", "topic": "t", "value_format": "json", "key_column": "null"},
    )
    assert (config.value_format, config.key_column) == ("json", None)
    with pytest.raises(ConfigError, match="'value_format' must be one of"):
        config_from_options(KafkaSinkConfig, {"bootstrap_servers": "b", "topic": "t", "value_format": "xml"})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"bucket": "bkt", "prefix": "p", "max_open_files": "many"}, "'max_open_files' must be a number"),
        ({"bucket": "bkt", "prefix": "p", "csv_header": "maybe"}, "'csv_header' must be true or false"),
        ({"bucket": "bkt", "prefix": "p", "format": "avro"}, "unknown S3 file format 'avro'"),
        ({"prefix": "p"}, "bucket"),  # a required field without its option
        ({"bucket": "bkt", "prefix": "p", "s3.endpoint": "http://h:1"}, r"unknown S3 option 's3\.endpoint'"),
        ({"bucket": "bkt", "prefix": "p", "max_open_files": "0"}, "max_open_files must be >= 1"),
    ],
)
def test_mistakes_are_config_errors_naming_the_option(options: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config_from_options(S3SinkConfig, options)


def test_every_field_has_an_option_name() -> None:
    names = option_names(S3SinkConfig)
    assert "rolling.max_file_bytes" in names and "s3.endpoint_url" in names and "s3.profile" in names
    assert "storage_options" not in names and "rolling" not in names
    assert "client_config" in option_names(KafkaSinkConfig)
