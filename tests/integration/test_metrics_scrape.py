"""A Prometheus scrape while a real streaming job runs shows each sink's commits (#18 §6).

Kafka and Delta sinks on local[2]; the scrape happens after two micro-batches committed and before
the job is stopped, and its numbers are checked against what a reader finds in the sinks.
"""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.exactly_once.support import make_input

from twophase import DeltaSink, DeltaSinkConfig, Job, KafkaSink, KafkaSinkConfig, RuntimeConfig
from twophase.integration.services.process import wait_ready

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.coordinator.spark.handle import JobHandle

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.delta]


def test_a_scrape_mid_run_shows_per_sink_commits(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    make_input(tmp_path, files=2, rows_per_file=100)
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    job = Job(
        spark, f"metrics_{uuid.uuid4().hex[:6]}", str(tmp_path / "chk"), config=RuntimeConfig(metrics_port=0)
    )
    job.sink(
        KafkaSink(
            "events", KafkaSinkConfig(bootstrap_servers=kafka_bootstrap, topic=topic, create_topic=True)
        )
    )
    job.sink(DeltaSink("table", DeltaSinkConfig(str(tmp_path / "table"), columns=("id",))))
    df = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "input"))
        .selectExpr("id", "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    )
    handle = job.start(
        df, spark_checkpoint_location=str(tmp_path / "spark"), trigger={"processingTime": "500 milliseconds"}
    )
    try:
        assert wait_ready(lambda: _written(handle, 200), 180, 0.5) is None
        endpoint = handle.runtime.metrics_endpoint
        assert endpoint is not None
        with urllib.request.urlopen(endpoint.url, timeout=10) as response:  # the job still runs
            text = response.read().decode()
    finally:
        handle.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for sink in ("events", "table"):
        labels = (("job", job.job_id), ("sink", sink))
        assert samples[("twophase_sink_records_committed_total", labels)] == 200
        assert (
            samples[("twophase_sink_transactions_total", (*labels[:1], ("outcome", "committed"), labels[1]))]
            >= 2
        )
    assert (
        samples[("twophase_checkpoints_completed_total", (("job", job.job_id), ("kind", "checkpoint")))] >= 2
    )
    assert DeltaTable(str(tmp_path / "table")).to_pyarrow_table().num_rows == 200


def _written(handle: JobHandle, records: int) -> str | None:
    """``None`` once the job's epochs wrote ``records`` records (for ``wait_ready``)."""
    return None if sum(m.records for m in handle.metrics) >= records else "running"
