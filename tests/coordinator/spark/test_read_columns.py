"""The union of the sinks' read columns, which is all a Spark epoch hands Python (no Spark needed)."""

from __future__ import annotations

from typing import Any

from support.file_sink import JsonLinesFileSink

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.coordinator.spark.tasks import read_columns

FLIGHT_COLUMNS = ["flight_id", "year", "month", "carrier", "key", "value", "dep_delay", "ts"]


def _kafka(**mapping: Any) -> KafkaSink:
    return KafkaSink("k", KafkaSinkConfig(bootstrap_servers="broker:9092", topic="t", **mapping))


def test_a_kafka_sink_reads_its_key_and_value_only() -> None:
    assert read_columns(FLIGHT_COLUMNS, [_kafka()]) == ["key", "value"]


def test_a_kafka_sink_reads_every_mapped_column_in_the_datas_order() -> None:
    sink = _kafka(key_column=None, value_column="carrier", timestamp_column="ts", partition_column="month")
    assert sink.read_columns() == ("carrier", "month", "ts")
    assert read_columns(FLIGHT_COLUMNS, [sink]) == ["month", "carrier", "ts"]


def test_the_union_of_two_sinks_projections() -> None:
    postgres = PostgresSink("p", PostgresSinkConfig(table="t", columns=("dep_delay", "flight_id")))
    assert read_columns(FLIGHT_COLUMNS, [_kafka(), postgres]) == ["flight_id", "key", "value", "dep_delay"]


def test_a_sink_reading_every_column_needs_no_projection(tmp_path: Any) -> None:
    assert PostgresSink("p", PostgresSinkConfig(table="t")).read_columns() is None
    assert read_columns(FLIGHT_COLUMNS, [_kafka(), JsonLinesFileSink("f", tmp_path)]) is None


def test_no_projection_when_the_union_is_every_column_or_a_name_repeats() -> None:
    assert read_columns(["key", "value"], [_kafka()]) is None
    assert read_columns(["key", "value", "x", "x"], [_kafka()]) is None


def test_a_declared_column_the_data_lacks_is_left_to_the_sinks_validate() -> None:
    assert read_columns(["value", "x"], [_kafka()]) == ["value"]
