"""A small user job (not the flights demo): ``id`` rows into a Kafka topic and Parquet files on S3.

It is what a user writes with ``twophase.Job``, run as its own process so that ``TWOPHASE_FAULT``
crashes are real exits, and it offers the factories the CLI's ``--sinks`` imports:

- :func:`job`: the ``twophase.Job`` (id, checkpoint directory and sinks);
- :func:`sinks`: the sinks only (then the CLI needs ``--checkpoint-dir`` and ``--job``).

Settings come from one environment variable, :data:`SETTINGS_ENV`, holding JSON: ``root`` (input in
``root/input``, checkpoints in ``root/chk``, Spark's in ``root/spark``), ``job``, ``topic``,
``bootstrap``, ``bucket``, ``prefix`` and ``s3`` (``endpoint_url``, ``access_key``, ``secret_key``).

    python -m support.exactly_once.kafka_s3_job
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from twophase import Job, KafkaSink, KafkaSinkConfig, S3Sink
from twophase.integration.services import S3Endpoint
from twophase.sinks.api import TwoPhaseCommitSink

SETTINGS_ENV = "KAFKA_S3_JOB"
KAFKA_SINK = "events"
S3_SINK = "files"


def settings() -> dict[str, Any]:
    """The job's settings (see the module docstring)."""
    return dict(json.loads(os.environ[SETTINGS_ENV]))


def endpoint(s: dict[str, Any]) -> S3Endpoint:
    """The S3 endpoint of the settings."""
    return S3Endpoint(s["s3"]["endpoint_url"], s["s3"]["access_key"], s["s3"]["secret_key"])


def sinks() -> list[TwoPhaseCommitSink[Any, Any]]:
    """The job's two sinks: Kafka (key and value columns) and S3 (Parquet of the ``id`` column)."""
    s = settings()
    kafka = KafkaSink(
        KAFKA_SINK,
        KafkaSinkConfig(
            bootstrap_servers=s["bootstrap"],
            topic=s["topic"],
            create_topic=True,
            new_topic_partitions=1,
            new_topic_replication_factor=1,
            transaction_timeout_ms=120_000,
            max_epoch_ms=60_000,
            max_commit_delay_ms=30_000,
        ),
    )
    files = S3Sink(S3_SINK, endpoint(s).sink_config(bucket=s["bucket"], prefix=s["prefix"], columns=("id",)))
    return [kafka, files]


def job(spark: Any = None) -> Job:
    """The job (without a SparkSession when the CLI asks for it)."""
    s = settings()
    j = Job(spark, s["job"], str(Path(s["root"]) / "chk"))
    for sink in sinks():
        j.sink(sink)
    return j


def main() -> int:
    """Run the job over ``root/input`` (one file per micro-batch) to its end; print one JSON line."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    s = settings()
    endpoint(s).ensure_bucket(s["bucket"])
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("twophase-kafka-s3-job")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(Path(s["root"]) / "input"))
        .select(
            F.col("id"),
            F.col("id").cast("string").alias("key"),
            F.concat(F.lit("v-"), F.col("id").cast("string")).alias("value"),
        )
    )
    handle = job(spark).start(
        rows, spark_checkpoint_location=str(Path(s["root"]) / "spark"), trigger={"availableNow": True}
    )
    handle.await_termination()
    print(json.dumps({"state": handle.status.value, "epochs": len(handle.metrics)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
