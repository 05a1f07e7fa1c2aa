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
- ``foreach_batch_recompute``: the same recipe without ``persist()``: each writer recomputes the
  batch's plan (read, joins, columns). A new user's first try, and on small batches the faster one
  (issue #29 item 4).

Both read the same input files with the same micro-batch size (``FILES_PER_TRIGGER`` days) and
write the same columns. Rounds rotate which goes first. Reported: median wall-clock seconds per
run (min–max), rows/s, and the ratio of twophase to each recipe (> 1: twophase is faster), the
better recipe first.

The breakdown (untimed by ``side_by_side``, from the same runs): the one-pass job's epochs split
into the Spark job that writes and pre-commits (``write_ms``: hand-off and every sink's writes),
the checkpoint's publish and the commit (the driver's work), the rest of each epoch (planning,
Spark's own bookkeeping) and the time outside epochs (query start and stop, the final
checkpoint); each recipe's batches split per writer (``persist``, ``kafka``, ``parquet``,
``delta``). Per sink, the one-pass job also runs with each sink alone
(``twophase_kafka``, ``twophase_s3``, ``twophase_delta``), timed side by side with the rest.

``python -m benchmarks.bench_fanout``; ``TWOPHASE_BENCH_RUNS`` sets the rounds,
``TWOPHASE_BENCH_SCALE`` the share of the year's days (see :mod:`benchmarks.common`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common

DAYS = 365
FILES_PER_TRIGGER = 31
ROUNDS = 3
BUCKET = "twophase-bench-fanout"


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    from support.kafka.support import create_topic

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

        # per writer: the sums of each run's stages (ms), for the breakdown
        stages: dict[str, list[dict[str, float]]] = {}

        def one_pass(tag: str, sinks: tuple[str, ...]) -> Callable[[int], object]:
            def run_job(r: int) -> object:
                s = dataclasses.replace(spec(tag, r), sinks=sinks)
                start = time.perf_counter()
                result = run_flights(spark, s, endpoints)
                wall = (time.perf_counter() - start) * 1000
                assert result.state is JobState.FINISHED, result.state
                assert sum(m.records for m in result.epochs) == rows
                epoch = sum(m.epoch_ms for m in result.epochs)
                write = sum(m.write_ms for m in result.epochs)
                driver = sum(m.persist_ms + m.commit_ms for m in result.epochs)
                if r >= 0:
                    stages.setdefault(tag, []).append(
                        {
                            "write_ms": write,
                            "driver_ms": driver,
                            "rest_ms": epoch - write - driver,
                            # query start and stop, the final checkpoint, the job's own set-up
                            "outside_epochs_ms": wall - epoch,
                        }
                    )
                return None

            return run_job

        def recipe(tag: str, persist: bool) -> Callable[[int], object]:
            def run_recipe(r: int) -> object:
                s = spec(tag, r)
                create_topic(bootstrap, s.topic, s.kafka_partitions)
                parquet = f"s3a://{BUCKET}/{s.s3_prefix}"
                spent: dict[str, float] = {
                    "persist_ms": 0.0,
                    "kafka_ms": 0.0,
                    "parquet_ms": 0.0,
                    "delta_ms": 0.0,
                }

                def timed(stage: str, step: Callable[[], object]) -> None:
                    start = time.perf_counter()
                    step()
                    spent[stage] += (time.perf_counter() - start) * 1000

                def fan_out(batch: Any, _batch_id: int) -> None:
                    if persist:  # persist() is lazy: the first writer materializes the cache
                        timed("persist_ms", batch.persist)
                    timed(
                        "kafka_ms",
                        batch.selectExpr(f"CAST({KEY_COLUMN} AS STRING) AS key", VALUE_COLUMN)
                        .write.format("kafka")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("kafka.linger.ms", "20")
                        .option("kafka.compression.type", "lz4")
                        .option("topic", s.topic)
                        .save,
                    )
                    typed = batch.select(*TYPED_COLUMNS)
                    timed(
                        "parquet_ms",
                        lambda: typed.write.mode("append").partitionBy("origin", "month").parquet(parquet),
                    )
                    timed("delta_ms", lambda: typed.write.format("delta").mode("append").save(s.delta_uri))
                    if persist:
                        timed("persist_ms", batch.unpersist)

                query = (
                    flights_stream(spark, s)
                    .writeStream.foreachBatch(fan_out)
                    .option("checkpointLocation", s.spark_checkpoint)
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                if r >= 0:
                    stages.setdefault(tag, []).append(spent)
                return s

            return run_recipe

        writers: dict[str, Callable[[int], object]] = {
            "twophase": one_pass("twophase", ("kafka", "s3", "delta")),
            "foreach_batch": recipe("foreach_batch", persist=True),
            "foreach_batch_recompute": recipe("foreach_batch_recompute", persist=False),
            **{
                f"twophase_{sink}": one_pass(f"twophase_{sink}", (sink,)) for sink in ("kafka", "s3", "delta")
            },
        }

        def check(writer: str, r: int, result: object) -> None:
            if writer.startswith("foreach_batch") and r == 0 and isinstance(result, FlightsJobSpec):
                count = spark.read.format("delta").load(result.delta_uri).count()
                assert count == rows, count

        try:
            # warm up every path once (JVM, Python workers, jars, connection pools)
            for warm_up in writers.values():
                warm_up(-1)
            times = common.side_by_side(writers, rounds, check)
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    recipes = sorted(("foreach_batch", "foreach_batch_recompute"), key=lambda w: statistics.median(times[w]))
    return {
        "rows": rows,
        "days": days,
        "files_per_trigger": FILES_PER_TRIGGER,
        "rounds": rounds,
        **env,
        "load_1m_at_end": round(os.getloadavg()[0], 2),
        "writers": {w: common.summary(t, rows) for w, t in times.items()},
        # the better (faster) recipe first
        "ratios": {f"twophase_over_{w}": common.ratio(times, "twophase", w) for w in recipes},
        "breakdown_ms": {
            w: {k: round(statistics.median(run[k] for run in runs), 1) for k in runs[0]}
            for w, runs in stages.items()
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
