"""Benchmark: the flights job's three-sink fan-out against what users write today (issue #18 §7).

Same input stream, same services, same ``local[2]`` session, side by side in one run:

- ``twophase``: the flights job (:func:`twophase.integration.jobs.flights.run_flights`): one
  streaming query whose every micro-batch goes to the Kafka, S3 Parquet and Delta 2PC sinks in the
  same checkpoints, exactly once, ending with the final checkpoint;
- ``foreach_batch``: the same stream (:func:`~twophase.integration.jobs.flights.flights_stream`)
  with ``foreachBatch``: ``persist()`` the batch, then Spark's own three writers one after the
  other — ``format("kafka")`` (key/value, the same topic settings), ``partitionBy("origin",
  "month").parquet("s3a://…")`` and ``format("delta")`` (the same kind of location as the 2PC
  Delta sink: local) — then ``unpersist()``. At-least-once: a failure between the writers, or a
  retried batch, duplicates data.

Both read the same input files with the same micro-batch size (``FILES_PER_TRIGGER`` days) and
write the same columns. Rounds rotate which goes first. Reported: median wall-clock seconds per
run (min–max), rows/s, and the ratio twophase/foreach_batch (> 1: twophase is faster).

``python -m benchmarks.bench_fanout``; ``TWOPHASE_BENCH_RUNS`` sets the rounds,
``TWOPHASE_BENCH_SCALE`` the share of the year's days (see :mod:`benchmarks.common`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from benchmarks import common

DAYS = 365
FILES_PER_TRIGGER = 31
ROUNDS = 3
BUCKET = "twophase-bench-fanout"


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    from twophase.coordinator.job_lifecycle import JobState
    from twophase.integration.jobs import flights_data
    from twophase.integration.jobs.flights import (
        KEY_COLUMN,
        TYPED_COLUMNS,
        VALUE_COLUMN,
        FlightsEndpoints,
        flights_spark_session,
        flights_stream,
        run_flights,
    )
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.kafka.support import create_topic
    from twophase.integration.services import kafka_service, s3_service

    days = max(FILES_PER_TRIGGER, min(DAYS, round(DAYS * common.scaled(1_000_000) / 1_000_000)))
    rounds = common.runs(ROUNDS)
    env = common.machine()
    run_id = uuid.uuid4().hex[:8]
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-fanout-"))
    rows = flights_data.land(days).rows
    with kafka_service() as bootstrap, s3_service() as s3:
        endpoints = FlightsEndpoints(bootstrap, s3)
        s3.ensure_bucket(BUCKET)
        spark = flights_spark_session(endpoints)
        spark.sparkContext.setLogLevel("ERROR")

        def spec(tag: str, r: int) -> FlightsJobSpec:
            job = f"fanout_{tag}_{run_id}_{r + 1}"  # the warm-up is round -1
            return FlightsJobSpec(
                job_id=job,
                work_dir=str(scratch / job),
                days=days,
                files_per_trigger=FILES_PER_TRIGGER,
                bucket=BUCKET,
            )

        def twophase(r: int) -> object:
            result = run_flights(spark, spec("twophase", r), endpoints)
            assert result.state is JobState.FINISHED, result.state
            assert sum(m.records for m in result.epochs) == rows
            return None

        def foreach_batch(r: int) -> object:
            s = spec("spark", r)
            create_topic(bootstrap, s.topic, s.kafka_partitions)
            parquet = f"s3a://{BUCKET}/{s.s3_prefix}"

            def fan_out(batch: Any, _batch_id: int) -> None:
                batch.persist()
                (
                    batch.selectExpr(f"CAST({KEY_COLUMN} AS STRING) AS key", VALUE_COLUMN)
                    .write.format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("kafka.linger.ms", "20")
                    .option("kafka.compression.type", "lz4")
                    .option("topic", s.topic)
                    .save()
                )
                typed = batch.select(*TYPED_COLUMNS)
                typed.write.mode("append").partitionBy("origin", "month").parquet(parquet)
                typed.write.format("delta").mode("append").save(s.delta_uri)
                batch.unpersist()

            query = (
                flights_stream(spark, s)
                .writeStream.foreachBatch(fan_out)
                .option("checkpointLocation", s.spark_checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            return s

        def check(writer: str, r: int, result: object) -> None:
            if writer == "foreach_batch" and r == 0 and isinstance(result, FlightsJobSpec):
                count = spark.read.format("delta").load(result.delta_uri).count()
                assert count == rows, count

        try:
            # warm up both paths once (JVM, Python workers, jars, connection pools)
            twophase(-1)
            foreach_batch(-1)
            times = common.side_by_side({"twophase": twophase, "foreach_batch": foreach_batch}, rounds, check)
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "rows": rows,
        "days": days,
        "files_per_trigger": FILES_PER_TRIGGER,
        "rounds": rounds,
        **env,
        "writers": {w: common.summary(t, rows) for w, t in times.items()},
        "ratio_twophase_over_foreach_batch": common.ratio(times, "twophase", "foreach_batch"),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
