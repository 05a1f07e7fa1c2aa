"""Benchmark: the Delta 2PC sink (through the Job API) vs delta-spark's own writers, side by side.

One ``local[2]`` SparkSession builds a cached ``ROWS``-row DataFrame (id, two strings, a decimal,
a timestamp, a date, a double, a partition column with 8 values) in ``PARTITIONS`` Spark
partitions. Each round writes it to a fresh local table with each writer (order rotated):

- ``twophase``: ``Job(spark, name, checkpoint_dir).sink(DeltaSink(...)).write(df)`` — one epoch
  (every task writes its Parquet files with pyarrow and pre-commits the Add actions), the
  checkpoint published, ONE delta-rs commit with all Adds and the ``txn`` of the checkpoint, then
  the final checkpoint; the job is FINISHED when it returns;
- ``delta_spark``: ``df.write.format("delta").partitionBy("bucket").save(path)`` (not idempotent:
  a retried job writes twice);
- ``delta_spark_txn``: the same with ``txnAppId``/``txnVersion`` options — what a streaming
  ``foreachBatch`` handler does to make its per-batch write idempotent (Delta skips a write whose
  ``(appId, version)`` the table has seen). Run here as the batch write it is inside
  ``foreachBatch``, without a streaming query around it.
- ``delta_spark_tuned``: ``delta_spark_txn`` with ``spark.sql.maxConcurrentOutputFileWriters`` =
  :data:`CONCURRENT_WRITERS` (the number of partition values): each task writes its partitions'
  files at once instead of sorting its rows by partition first, the setting a Spark engineer sets
  for a partitioned write (issue #44 item 3).

Timed end to end (wall clock, s, including the commit), median of the rounds with min–max;
rows/s = rows / median; ratios = the 2PC sink's rows/s over the other's. Commits per run = the
table's ``_delta_log/*.json`` files after one write (table creation included). Every table of the
first round is read back with delta-spark and must hold exactly ``ROWS`` rows. Also the 2PC job's
epoch metrics: the coordinator's share of the batch time (persist + commit over epoch time).

``python -m benchmarks.bench_delta``. Needs the integration Spark jars (Maven).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common

ROWS = 1_000_000
PARTITIONS = 4
ROUNDS = 5


CONCURRENT_WRITERS = 8
"""``spark.sql.maxConcurrentOutputFileWriters`` of ``delta_spark_tuned``: one writer per value of
the partition column (``bucket`` has 8)."""


def _commits(table: Path) -> int:
    return len(list((table / "_delta_log").glob("*.json")))


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    from pyspark.sql import functions as F

    from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.state.job_lifecycle import JobState

    rows_n = common.scaled(ROWS)
    rounds = common.runs(ROUNDS)
    env = common.machine()
    spark = common.spark_session("twophase-bench-delta")
    df = (
        spark.range(0, rows_n, numPartitions=PARTITIONS)
        .select(
            F.col("id"),
            F.concat(F.lit("customer-"), (F.col("id") % 10007).cast("string")).alias("customer"),
            F.sha2(F.col("id").cast("string"), 256).alias("digest"),
            (F.col("id") % 100000 / 100).cast("decimal(12,2)").alias("amount"),
            F.timestamp_micros(F.lit(1_700_000_000_000_000) + F.col("id") * 1001).alias("ts"),
            F.date_add(F.lit("2020-01-01").cast("date"), (F.col("id") % 1000).cast("int")).alias("day"),
            (F.col("id") * 0.5).alias("score"),
            (F.col("id") % 8).cast("string").alias("bucket"),
        )
        .cache()
    )
    assert df.count() == rows_n
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-delta-"))
    epochs: list[Any] = []
    commits: dict[str, int] = {}

    def table(writer: str, r: int) -> Path:
        return scratch / f"{writer}-{r}"

    def twophase(r: int) -> object:
        sink = DeltaSink("delta", DeltaSinkConfig(str(table("twophase", r)), partition_by=("bucket",)))
        result = Job(spark, f"bench-delta-{r}", str(scratch / "chk")).sink(sink).write(df)
        assert result.state is JobState.FINISHED, result.state
        assert result.epochs[0].records == rows_n
        epochs.append(result.epochs[0])
        return result

    def delta_spark(r: int) -> object:
        df.write.format("delta").partitionBy("bucket").save(str(table("delta_spark", r)))
        return None

    def idempotent(writer: str, conf: dict[str, str]) -> Callable[[int], object]:
        """delta-spark with ``txnAppId``/``txnVersion``, under the session settings ``conf``."""

        def write(r: int) -> object:
            with common.session_conf(spark, conf):
                (
                    df.write.format("delta")
                    .option("txnAppId", f"bench-{writer}-{r}")
                    .option("txnVersion", 1)
                    .partitionBy("bucket")
                    .save(str(table(writer, r)))
                )
            return None

        return write

    delta_spark_txn = idempotent("delta_spark_txn", {})
    tuned = {"spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_WRITERS)}
    delta_spark_tuned = idempotent("delta_spark_tuned", tuned)

    writers = {
        "twophase": twophase,
        "delta_spark": delta_spark,
        "delta_spark_txn": delta_spark_txn,
        "delta_spark_tuned": delta_spark_tuned,
    }

    def check(writer: str, r: int, _: object) -> None:
        path = table(writer, r)
        commits[writer] = _commits(path)
        if r == 0:
            count = spark.read.format("delta").load(str(path)).count()
            assert count == rows_n, (writer, count)
        shutil.rmtree(path, ignore_errors=True)

    try:
        # warm up the Python workers, pyarrow/deltalake imports and delta-spark's classes
        small = df.limit(1000)
        Job(spark, "bench-delta-warmup", str(scratch / "chk")).sink(
            DeltaSink("delta", DeltaSinkConfig(str(scratch / "warm-2pc"), partition_by=("bucket",)))
        ).write(small)
        small.write.format("delta").partitionBy("bucket").save(str(scratch / "warm-spark"))
        timed, cpu = common.metered(writers, common.CpuMeter({}))
        times = common.side_by_side(timed, rounds, check)
    finally:
        df.unpersist()
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "rows": rows_n,
        "spark_partitions": PARTITIONS,
        "rounds": rounds,
        **env,
        "writers": {
            # CPU-seconds per call of this process's tree (the driver, Spark's JVM, the Python workers)
            w: {**common.summary(t, rows_n), "commits_per_run": commits[w], **common.cpu_figures(cpu[w])}
            for w, t in times.items()
        },
        "ratios_2pc_over": {
            "delta_spark": common.ratio(times, "twophase", "delta_spark"),
            "delta_spark_txn": common.ratio(times, "twophase", "delta_spark_txn"),
            "delta_spark_tuned": common.ratio(times, "twophase", "delta_spark_tuned"),
        },
        "delta_spark_tuned": {"spark.sql.maxConcurrentOutputFileWriters": CONCURRENT_WRITERS},
        "twophase_epoch_median": common.epoch_summary(epochs),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
