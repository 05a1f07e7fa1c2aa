"""The flights job end to end on 14 days: all three sinks exactly once, nothing lingering.

Runs the real job (Spark Structured Streaming, real Kafka broker, MinIO, a local Delta table)
in this test process, then reads every sink back: Kafka with a read_committed consumer, S3 by
listing and reading the Parquet files, Delta with delta-spark.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.storage import open_storage
from twophase.integration.jobs import flights_data
from twophase.integration.jobs.flights import (
    DELTA_SINK,
    KAFKA_SINK,
    S3_SINK,
    TYPED_COLUMNS,
    FlightsEndpoints,
    FlightsJobSpec,
    run_flights,
)
from twophase.integration.jobs.flights_sinks import verify_run
from twophase.integration.services import S3Endpoint
from twophase.integration.verify import CONTENT_COLUMNS, compare, expected_input, read_kafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.s3, pytest.mark.delta, pytest.mark.slow]

DAYS = 14
FILES_PER_TRIGGER = 7


@pytest.fixture
def endpoints(kafka_bootstrap: str, s3_endpoint: S3Endpoint) -> FlightsEndpoints:
    return FlightsEndpoints(kafka_bootstrap, s3_endpoint)


def test_flights_subset_lands_exactly_once_in_kafka_s3_and_delta(
    tmp_path: Path, spark_s3: SparkSession, endpoints: FlightsEndpoints
) -> None:
    spec = FlightsJobSpec(
        job_id=f"flights_it_{uuid.uuid4().hex[:8]}",
        work_dir=str(tmp_path / "run"),
        days=DAYS,
        files_per_trigger=FILES_PER_TRIGGER,
    )
    run = run_flights(spark_s3, spec, endpoints)

    assert run.state is JobState.FINISHED
    landed = flights_data.land(DAYS).rows
    assert len(run.epochs) == 2 and sum(m.records for m in run.epochs) == landed
    # two epoch checkpoints and ONE final checkpoint for the three sinks (FLIP-147)
    assert [c.kind.value for c in run.checkpoints] == ["checkpoint", "checkpoint", "final"]
    latest = open_storage(spec.checkpoint_dir, spec.job_id).latest()
    assert latest is not None and latest.end_of_input
    for name in (KAFKA_SINK, S3_SINK):
        assert run.counters[name].records_committed == landed
    assert run.counters[DELTA_SINK].records_committed == landed
    assert len(run.counters[DELTA_SINK].checkpoints) == 2  # one Delta commit per epoch checkpoint

    report = verify_run(spec, endpoints, spark_s3)  # Delta read with delta-spark
    for sink in report.sinks:
        assert sink.error is None, sink
        assert (sink.records, sink.duplicates, sink.missing, sink.unexpected) == (landed, 0, 0, 0), sink
        assert sink.ids_ok and sink.content_ok, sink
        assert sink.lingering == 0, sink.lingering_detail
    assert report.ok
    assert "delta-spark" in report.sink(DELTA_SINK).detail

    # the enrichment: typed columns in Delta (read by delta-spark), JSON values in Kafka
    delta = spark_s3.read.format("delta").load(spec.delta_uri)
    assert tuple(delta.columns) == TYPED_COLUMNS
    rows = {r["flight_id"]: r for r in delta.collect()}
    first = rows["2013-01-01-0000"]  # UA 1545 EWR→IAH, 05:15 scheduled, 2 min late
    assert (first["carrier"], first["airline"], first["origin"], first["dest"]) == (
        "UA",
        "United Air Lines Inc.",
        "EWR",
        "IAH",
    )
    assert first["origin_name"] == "Newark Liberty Intl" and first["origin_tzone"] == "America/New_York"
    assert first["delay_class"] == "on_time"
    # 05:15 in New York (EST, UTC-5) is 10:15 UTC
    row = delta.where("flight_id = '2013-01-01-0000'").selectExpr("unix_timestamp(sched_dep_at)").first()
    assert row is not None
    epoch_s = row[0]
    assert epoch_s == dt.datetime(2013, 1, 1, 10, 15, tzinfo=dt.timezone.utc).timestamp()
    classes = {r["delay_class"] for r in rows.values()}
    assert classes <= {"cancelled", "on_time", "minor", "moderate", "severe"} and "cancelled" in classes
    assert all((r["delay_class"] == "cancelled") == (r["dep_delay"] is None) for r in rows.values())
    # destinations missing from the airports table keep their flights, with null names (left join)
    unknown = {r["dest"] for r in rows.values() if r["dest_name"] is None}
    assert unknown and unknown <= {"BQN", "SJU", "STT", "PSE"}

    table, _ = read_kafka(endpoints.kafka_bootstrap, spec.topic)
    assert table.num_rows == landed
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "group.id": f"{spec.job_id}-keys",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(spec.topic, p, 0) for p in range(spec.kafka_partitions)])
        messages = [m for m in consumer.consume(100, 10) if m.error() is None]
    finally:
        consumer.close()
    assert messages
    for message in messages:
        raw_key, raw_value = message.key(), message.value()
        assert raw_key is not None and raw_value is not None
        value = json.loads(raw_value)
        assert raw_key.decode() == value["flight_id"] and set(value) <= set(TYPED_COLUMNS)


def test_verifier_detects_duplicates_missing_and_altered_records() -> None:
    spec = FlightsJobSpec(job_id="verifier_check", work_dir="/tmp/unused", days=1)
    expected = expected_input(spec)
    data = flights_data.land(1)
    good = pa.concat_tables(
        pq.read_table(f, columns=list(CONTENT_COLUMNS)) for f in sorted(data.flights_dir.glob("*.parquet"))
    )
    assert compare("x", "", good, expected).exactly_once

    tampered = pa.concat_tables([good.slice(1), good.slice(5, 2)])  # first lost, two duplicated
    report = compare("x", "", tampered, expected)
    assert (report.missing, report.duplicates, report.unexpected) == (1, 2, 0)
    assert not report.ids_ok and not report.exactly_once

    delays = good.column("dep_delay").to_pylist()
    delays[3] = (delays[3] or 0.0) + 1.0
    altered = good.set_column(
        good.schema.get_field_index("dep_delay"), "dep_delay", pa.array(delays, pa.float64())
    )
    report = compare("x", "", altered, expected)
    assert report.ids_ok and not report.content_ok and not report.exactly_once
