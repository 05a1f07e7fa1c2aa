"""A job refused by S3, run as a user runs one (test_refusal_as_seen.py, #45 item 8).

A user's script: a session, a ``Job`` with one S3 sink whose files span checkpoints, a bounded
stream, ``job.start(...).await_termination()``, no ``try``, no logging set up. What the user sees
is this process's stderr (Spark's log and Python's report of the uncaught error) and its exit code.

Usage: ``python refused_job.py WORK_DIR`` with ``REFUSED_JOB_*`` and ``AWS_CA_BUNDLE`` set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from twophase import Job, RollingPolicy, S3Options, S3Sink, S3SinkConfig


def main(work: Path) -> None:
    env = os.environ
    options = S3Options(
        endpoint_url=env["REFUSED_JOB_ENDPOINT"],
        region=env["REFUSED_JOB_REGION"],
        access_key_id=env["REFUSED_JOB_ACCESS_KEY"],
        secret_access_key=env["REFUSED_JOB_SECRET_KEY"],
    )
    config = S3SinkConfig(
        bucket=env["REFUSED_JOB_BUCKET"],
        prefix=f"{env['REFUSED_JOB_PREFIX']}/files",
        format="jsonl",
        json_column="v",
        rolling=RollingPolicy(max_file_bytes=10**12, rollover_interval_ms=None, inactivity_interval_ms=None),
        storage_options=options,
    )
    spark = SparkSession.builder.master("local[2]").appName("refused_job").getOrCreate()
    job = Job(spark, "refused", str(work / "chk")).sink(S3Sink("files", config))
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(work / "input"))
        .selectExpr("CAST(id AS STRING) AS v")
    )
    job.start(
        stream, spark_checkpoint_location=str(work / "spark"), trigger={"availableNow": True}
    ).await_termination(600)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
