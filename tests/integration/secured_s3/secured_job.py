"""The secured-S3 job run by test_secured_job.py in a process of its own (#27 items 5 and 6).

It runs everything a user does with a least-privilege IAM user over TLS, and keeps every text a
secret could leak into, for the test to scan:

- a ``Job`` (S3 sink + Delta sink, checkpoints on ``s3://``, Prometheus metrics on) over a
  streaming input, with the keys given explicitly as :class:`S3Options`;
- a ``.format("twophase")`` query (S3 sink) with the keys as ``s3.*`` options;
- both queries' ``explain`` and last progress, the reprs of every config, the messages, reprs and
  tracebacks of two errors (a missing bucket, a prefix the policy does not cover), a scrape,
  and which files of Spark's scratch folder (removed at exit) hold the secret.

Spark's session has its event log on and ``fs.s3a`` keys in its configuration, to show what
Spark itself redacts. Logs: Python's ``logging`` to ``work/python.log`` (twophase at DEBUG),
Spark's own to this process's stderr (the test keeps it). The secret arrives in
``SECURED_JOB_SECRET_KEY``, never in a file. Also ``sinks()`` for ``twophase lingering --sinks``.

Usage: ``python secured_job.py WORK_DIR`` with ``SECURED_JOB_*`` and ``AWS_CA_BUNDLE`` set.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

from twophase import DeltaSink, DeltaSinkConfig, Job, RuntimeConfig, S3Options, S3Sink, S3SinkConfig

JOB_NAME = "secured_api"
DS_JOB = "secured_ds"


def options() -> S3Options:
    """The job user's S3 settings, keys explicit, from ``SECURED_JOB_*``."""
    env = os.environ
    return S3Options(
        endpoint_url=env["SECURED_JOB_ENDPOINT"],
        region=env["SECURED_JOB_REGION"],
        access_key_id=env["SECURED_JOB_ACCESS_KEY"],
        secret_access_key=env["SECURED_JOB_SECRET_KEY"],
    )


def sinks() -> list[Any]:
    """The Job's two sinks (also for ``twophase lingering --sinks secured_job:sinks``)."""
    bucket, prefix = os.environ["SECURED_JOB_BUCKET"], os.environ["SECURED_JOB_PREFIX"]
    opts = options()
    return [
        S3Sink("files", S3SinkConfig(bucket=bucket, prefix=f"{prefix}/files", storage_options=opts)),
        DeltaSink("table", DeltaSinkConfig(f"s3://{bucket}/{prefix}/table", storage_options=opts)),
    ]


def wait_for(check: Any, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the job did not get there in time")
        time.sleep(0.5)


def progress(query: Any) -> str:
    """The query's last progress as JSON (a dict on Spark 3.5, an object with ``json`` later)."""
    last = query.lastProgress
    text = getattr(last, "json", None)
    return text if isinstance(text, str) else json.dumps(last, default=str)


def error_texts(fn: Any) -> dict[str, str]:
    try:
        fn()
    except Exception as e:
        return {"type": type(e).__name__, "str": str(e), "repr": repr(e), "traceback": traceback.format_exc()}
    raise AssertionError("expected an error")


def main(work: Path) -> int:
    from support.exactly_once.support import make_input

    from twophase.integration.spark import build_spark_session

    env = os.environ
    bucket, prefix, endpoint = (
        env["SECURED_JOB_BUCKET"],
        env["SECURED_JOB_PREFIX"],
        env["SECURED_JOB_ENDPOINT"],
    )
    logging.basicConfig(filename=work / "python.log", level=logging.INFO, force=True)
    logging.getLogger("twophase").setLevel(logging.DEBUG)
    make_input(work, files=3, rows_per_file=100)
    (work / "events").mkdir()
    opts = options()
    spark = build_spark_session(
        "twophase-secured",
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(work / "events"),
            "spark.eventLog.compress": "false",  # plain JSON lines, for the scan
            "spark.eventLog.rolling.enabled": "false",
            # what Spark keeps on disk (scratch folder) uncompressed too, so the scan sees into it
            "spark.broadcast.compress": "false",
            "spark.shuffle.compress": "false",
            "spark.shuffle.spill.compress": "false",
            "spark.rdd.compress": "false",
            "spark.sql.shuffle.partitions": "2",
            # keys in Spark's own configuration: Spark redacts them (spark.redaction.regex)
            "spark.hadoop.fs.s3a.access.key": opts.access_key_id or "",
            "spark.hadoop.fs.s3a.secret.key": opts.secret_access_key or "",
            "spark.executorEnv.AWS_CA_BUNDLE": env["AWS_CA_BUNDLE"],
        },
    )
    spark.sparkContext.setLogLevel("INFO")
    out: dict[str, Any] = {}

    # the Job API, metrics on
    job = Job(
        spark,
        JOB_NAME,
        f"s3://{bucket}/{prefix}/chk",
        storage_options=opts,
        config=RuntimeConfig(metrics_port=0),
    )
    for sink in sinks():
        job.sink(sink)
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(work / "input"))
    handle = job.start(
        stream.selectExpr("id", "CAST(id AS STRING) AS v"),
        spark_checkpoint_location=str(work / "spark-api"),
        trigger={"processingTime": "500 milliseconds"},
    )
    wait_for(lambda: sum(m.records for m in handle.metrics) >= 300)
    query = handle.query
    assert query is not None
    out["api_explain"] = query._jsq.explainInternal(True)
    out["api_progress"] = progress(query)
    metrics = handle.runtime.metrics_endpoint
    assert metrics is not None
    with urllib.request.urlopen(metrics.url, timeout=10) as response:
        out["metrics"] = response.read().decode()
    handle.stop(savepoint=True, drain=True)  # FINISHED: in-progress data committed
    out["api_state"] = handle.status.value
    out["job_id"] = job.job_id
    out["reprs"] = [repr(opts), str(opts), repr(job), str(job.sinks), repr(handle), *map(repr, sinks())]
    out["reprs"] += [repr(s.config) for s in sinks()]

    # .format("twophase"): the keys as options (the editable install has no pyspark_twophase)
    from twophase.coordinator.spark.default_source import TwophaseDataSource

    spark.dataSource.register(TwophaseDataSource)
    ds = (
        stream.selectExpr("id", "CAST(id AS STRING) AS v")
        .writeStream.format("twophase")
        .option("sink", "s3")
        .option("job", DS_JOB)
        .option("twophaseCheckpointDir", f"s3://{bucket}/{prefix}/ds-chk")
        .option("checkpointLocation", str(work / "spark-ds"))
        .option("bucket", bucket)
        .option("prefix", f"{prefix}/ds")
        .option("s3.endpoint_url", endpoint)
        .option("s3.region", env["SECURED_JOB_REGION"])
        .option("s3.access_key_id", opts.access_key_id)
        .option("s3.secret_access_key", opts.secret_access_key)
        .trigger(availableNow=True)
        .start()
    )
    ds.awaitTermination()
    out["ds_explain"] = ds._jsq.explainInternal(True)
    out["ds_progress"] = progress(ds)
    out["ds_exception"] = str(ds.exception())

    # errors with the keys in their configuration
    missing = S3SinkConfig(bucket="twophase-no-such-bucket", prefix="p", storage_options=opts)
    out["missing_bucket"] = error_texts(lambda: S3Sink("x", missing).validate(_arrow_schema()))
    outside = DeltaSinkConfig(f"s3://{bucket}/outside-the-policy/table", storage_options=opts)
    out["denied"] = error_texts(lambda: DeltaSink("x", outside).validate(_arrow_schema()))
    # a job whose sink writes outside the policy: how a refusal on an executor ends the job
    denied_job = Job(spark, "secured_denied", f"s3://{bucket}/{prefix}/chk-denied", storage_options=opts)
    outside_files = S3SinkConfig(bucket=bucket, prefix="outside-the-policy/files", storage_options=opts)
    denied_job.sink(S3Sink("files", outside_files))
    batch = spark.range(0, 10, numPartitions=1).selectExpr("id", "CAST(id AS STRING) AS v")
    out["job_denied"] = error_texts(lambda: denied_job.write(batch))

    # Spark's scratch folder (local dir, warehouse) is removed at exit: scanned here, while it lives
    scratch = [p for p in Path(env["TWOPHASE_SPARK_SCRATCH"]).rglob("*") if p.is_file()]
    secret = (opts.secret_access_key or "").encode()
    out["scratch_files"] = len(scratch)
    out["scratch_hits"] = [str(p) for p in scratch if secret in p.read_bytes()]
    (work / "artifacts.json").write_text(json.dumps(out, indent=1))
    spark.stop()
    return 0


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("v", pa.string())])


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
