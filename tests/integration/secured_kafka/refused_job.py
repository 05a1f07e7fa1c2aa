"""A job refused by Kafka, run as a user runs one (test_refusal_as_seen.py, #45 item 8).

A user's script: a session, a ``Job`` with one Kafka sink whose principal may describe the topic
but not write it, a bounded stream, ``job.start(...).await_termination()``, no ``try``, no logging
set up. What the user sees is this process's stderr and its exit code.

Usage: ``python refused_job.py WORK_DIR`` with ``REFUSED_JOB_KAFKA`` (a JSON object: bootstrap,
topic, prefix, client_config) set.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from twophase import Job, KafkaSink, KafkaSinkConfig


def main(work: Path) -> None:
    kafka = json.loads(os.environ["REFUSED_JOB_KAFKA"])
    config = KafkaSinkConfig(
        bootstrap_servers=kafka["bootstrap"],
        topic=kafka["topic"],
        transactional_id_prefix=kafka["prefix"],
        client_config=kafka["client_config"],
        connect_attempts=2,
    )
    spark = SparkSession.builder.master("local[2]").appName("refused_job").getOrCreate()
    job = Job(spark, "refused", str(work / "chk")).sink(KafkaSink("out", config))
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(work / "input"))
        .select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    )
    job.start(
        stream, spark_checkpoint_location=str(work / "spark"), trigger={"availableNow": True}
    ).await_termination(600)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
