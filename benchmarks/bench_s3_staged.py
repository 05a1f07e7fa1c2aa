"""Benchmark: a probe of issue #44 item 4's S3 design, Spark's own Parquet writer staged by the S3A
magic committer and committed by a two-phase-commit driver, against the magic committer itself.

Same data (:func:`benchmarks.common.generated_rows`: ``ROWS`` rows in ``PARTITIONS`` partitions,
recomputed by each writer), same MinIO, same ``local[2]`` session holding ``spark-hadoop-cloud``
and the probe's jar, measured side by side in one run, rounds rotating which writer goes first:

- ``spark_s3a_magic``: ``df.write.mode("append").parquet("s3a://<bucket>/<fresh prefix>")`` under
  :data:`~benchmarks.common.MAGIC_COMMITTER` (the tuned Spark baseline of BENCHMARKS.md): tasks
  leave pending uploads and ``.pendingset`` files, the job commit completes every upload, writes
  ``_SUCCESS`` and deletes the ``__magic`` directory;
- ``spark_s3a_magic_lean``: the same with :data:`LEAN_MAGIC` (no listing of the destination's
  pending uploads, no ``_SUCCESS``): the magic committer doing no more than the staged writer does;
- ``spark_s3a_staged``: the same write with one more write option,
  ``mapreduce.outputcommitter.factory.scheme.s3a`` = twophase's committer factory
  (``connectors/s3/jvm``, :func:`twophase.connectors.s3.staging_jar`), and
  ``fs.s3a.committer.uuid`` named per round, so the job commit
  does nothing; then, on the driver and timed with it, what a 2PC driver would do: list the job's
  ``.pendingset`` files and read them (boto3), make the uploads durable in a local file (write,
  fsync, rename: as the local checkpoint storage publishes), complete every upload from a pool of
  8 threads (the S3 sink's ``commit_concurrency``), and delete the ``__magic`` directory;
- ``twophase``: the S3 sink through ``Job.write``, default config: the data handed to Python;
- ``twophase_staged``: the S3 sink with ``write_path="spark"`` through ``Job.write``: Spark's
  Parquet writer stages the epoch through twophase's committer, under the session settings the
  sink needs (``staged_write.SESSION_SETTINGS``), and the sink commits it.

Each writer's first round is read back by Spark (row count) and checked for what it leaves: no
pending upload under its prefix, no ``__magic`` object. ``python -m benchmarks.bench_s3_staged``
prints the result: median seconds (min-max), rows/s, CPU-seconds of Spark's tree and of MinIO,
the staged writer's steps, the ratios over ``spark_s3a_magic`` and the load at start and end.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.bench_s3 import _cpu_summary, _delete_prefix, _minio_pid

ROWS = 4_000_000
PARTITIONS = 4
ROUNDS = 5
BUCKET = "twophase-bench"
LEAN_MAGIC = {
    "fs.s3a.committer.abort.pending.uploads": "false",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}
"""``spark_s3a_magic_lean``'s settings beyond :data:`~benchmarks.common.MAGIC_COMMITTER`: the job
commit neither lists the destination's pending uploads to abort strays nor writes ``_SUCCESS``
(what the staged writer's driver leaves out too)."""
COMMIT_THREADS = 8
"""Uploads completed at once by the staged writer's driver (the S3 sink's ``commit_concurrency``)."""


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring for what is measured."""
    from twophase.connectors.s3 import S3Sink, staging_jar
    from twophase.connectors.s3.internal import staged_write
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.services import s3_service

    rows_n = common.scaled(ROWS)
    rounds = common.runs(ROUNDS)
    start = common.machine()
    jar = staging_jar()
    with s3_service() as endpoint:
        endpoint.ensure_bucket(BUCKET)
        client = endpoint.boto3_client()
        spark = common.spark_session(
            "twophase-bench-s3-staged", s3=endpoint, magic_committer=True, extra_jars=[jar]
        )
        run_id = uuid.uuid4().hex[:8]
        scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-s3-staged-"))
        pool = concurrent.futures.ThreadPoolExecutor(COMMIT_THREADS)
        steps: list[dict[str, float]] = []
        df = common.generated_rows(spark, rows_n, PARTITIONS)

        def prefix(writer: str, r: int | str) -> str:
            return f"{writer}-{run_id}-{r}"

        def spark_s3a_magic(r: int | str) -> object:
            with common.session_conf(spark, common.MAGIC_COMMITTER):
                df.write.mode("append").parquet(f"s3a://{BUCKET}/{prefix('spark_s3a_magic', r)}")
            return None

        def spark_s3a_magic_lean(r: int | str) -> object:
            with common.session_conf(spark, {**common.MAGIC_COMMITTER, **LEAN_MAGIC}):
                df.write.mode("append").parquet(f"s3a://{BUCKET}/{prefix('spark_s3a_magic_lean', r)}")
            return None

        def complete(commit: dict[str, Any]) -> None:
            # Hadoop 3.4 writes each part's etag as an object, earlier releases as a string
            tags = [t["etag"] if isinstance(t, dict) else t for t in commit["etags"]]
            parts = [{"PartNumber": i + 1, "ETag": tag} for i, tag in enumerate(tags)]
            client.complete_multipart_upload(
                Bucket=commit["bucket"],
                Key=commit["destinationKey"],
                UploadId=commit["uploadId"],
                MultipartUpload={"Parts": parts},
            )

        def spark_s3a_staged(r: int | str) -> object:
            where, job_uuid = prefix("spark_s3a_staged", r), f"twophase-{run_id}-{r}"
            began = time.perf_counter()
            with common.session_conf(spark, common.MAGIC_COMMITTER):
                (
                    df.write.mode("append")
                    .option("mapreduce.outputcommitter.factory.scheme.s3a", staged_write.FACTORY_CLASS)
                    .option("fs.s3a.committer.uuid", job_uuid)
                    .parquet(f"s3a://{BUCKET}/{where}")
                )
            written = time.perf_counter()
            magic = f"{where}/__magic_job-{job_uuid}/"
            listed = client.list_objects_v2(Bucket=BUCKET, Prefix=magic)
            keys = [o["Key"] for o in listed.get("Contents", [])]
            sets = [k for k in keys if k.endswith(".pendingset")]
            bodies = pool.map(
                lambda k: json.loads(client.get_object(Bucket=BUCKET, Key=k)["Body"].read()), sets
            )
            commits = [c for body in bodies for c in body["commits"]]
            record = scratch / f"{job_uuid}.json"
            partial = record.with_suffix(".part")
            with open(partial, "w") as f:
                json.dump(commits, f)
                f.flush()
                os.fsync(f.fileno())
            partial.replace(record)
            staged = time.perf_counter()
            list(pool.map(complete, commits))
            committed = time.perf_counter()
            client.delete_objects(
                Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
            steps.append(
                {
                    "write_s": written - began,
                    "stage_s": staged - written,
                    "complete_s": committed - staged,
                    "cleanup_s": time.perf_counter() - committed,
                    "files": len(commits),
                    "pendingsets": len(sets),
                }
            )
            return None

        def twophase(r: int | str) -> object:
            sink = S3Sink(
                "s3", endpoint.sink_config(bucket=BUCKET, prefix=prefix("twophase", r), format="parquet")
            )
            result = Job(spark, f"bench-s3-staged-{run_id}-{r}", str(scratch / "chk")).sink(sink).write(df)
            assert result.state is JobState.FINISHED, result.state
            return None

        def twophase_staged(r: int | str) -> object:
            config = endpoint.sink_config(
                bucket=BUCKET, prefix=prefix("twophase_staged", r), format="parquet", write_path="spark"
            )
            job = Job(spark, f"bench-s3-staged-spark-{run_id}-{r}", str(scratch / "chk-staged"))
            with common.session_conf(spark, {**common.MAGIC_COMMITTER, **staged_write.SESSION_SETTINGS}):
                result = job.sink(S3Sink("s3", config)).write(df)
            assert result.state is JobState.FINISHED, result.state
            return None

        def check(writer: str, r: int, _: object) -> None:
            where = prefix(writer, r)
            if r == 0:
                count = spark.read.parquet(f"s3a://{BUCKET}/{where}").count()
                assert count == rows_n, (writer, count)
                assert common.pending_uploads(client, BUCKET, where + "/") == 0, writer
                pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=where + "/")
                left = [o["Key"] for p in pages for o in p.get("Contents", []) if "__magic" in o["Key"]]
                assert not left, (writer, left[:3])
            _delete_prefix(client, BUCKET, where + "/")

        writers = {
            "spark_s3a_magic": spark_s3a_magic,
            "spark_s3a_magic_lean": spark_s3a_magic_lean,
            "spark_s3a_staged": spark_s3a_staged,
            "twophase": twophase,
            "twophase_staged": twophase_staged,
        }
        try:
            for name, write in writers.items():  # warm up: JVM, classes, Python workers, pools
                write("warmup")
                _delete_prefix(client, BUCKET, prefix(name, "warmup") + "/")
            steps.clear()
            timed, cpu = common.metered(
                writers, common.CpuMeter({"minio": _minio_pid(endpoint.endpoint_url)})
            )
            times = common.side_by_side(timed, rounds, check)
        finally:
            pool.shutdown()
            shutil.rmtree(scratch, ignore_errors=True)
            spark.stop()
    return {
        "rows": rows_n,
        "spark_partitions": PARTITIONS,
        "rounds": rounds,
        **common.load_at_end(start),
        "writers": {w: {**common.summary(t, rows_n), **_cpu_summary(cpu[w])} for w, t in times.items()},
        "per_round_s": {w: [round(s, 3) for s in t] for w, t in times.items()},
        "staged_steps_median": {k: round(statistics.median(s[k] for s in steps), 4) for k in steps[0]},
        "ratio_over_spark_s3a_magic": {
            w: common.ratio(times, w, "spark_s3a_magic") for w in times if w != "spark_s3a_magic"
        },
        "committers": {
            "spark_s3a_magic": common.MAGIC_COMMITTER,
            "spark_s3a_magic_lean": {**common.MAGIC_COMMITTER, **LEAN_MAGIC},
            "twophase_staged": {**common.MAGIC_COMMITTER, **staged_write.SESSION_SETTINGS},
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
