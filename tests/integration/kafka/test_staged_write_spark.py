"""The Kafka sink's Spark-staged writes on a real broker and Spark (#44 item 4): a job whose only
sink writes its epochs with twophase's JVM writer, read back under ``read_committed``, record for
record what the Python path writes for the same rows (keys, values, headers, partitions,
timestamps, lineage); a write never committed (the driver died after it) leaves open transactions
the lingering cleanup aborts, all but the one a checkpoint holds, and the held one's marker is
found in the log from its own ``marker_offset`` once the broker forgot its id."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from support.kafka.support import create_topic, ongoing_with_prefix, sink_config, unique

from twophase.connectors.kafka import KafkaSink, staging_jar
from twophase.coordinator.spark.job import Job
from twophase.integration.readback import KafkaRecord, read_topic
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.kafka


def rows(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    """``n`` rows: a string key, a binary value, a map of headers, every third row with its own
    Kafka partition, a timestamp (ms precision)."""
    return spark.range(0, n, 1, partitions).selectExpr(
        "concat('k-', id) as key",
        "cast(concat('v-', id) as binary) as value",
        "map('n', cast(cast(id as string) as binary)) as hdrs",
        "case when id % 3 = 0 then cast(id % 2 as int) end as part",
        "timestamp_millis(1700000000000 + id) as at",
    )


def number(record: KafkaRecord) -> int:
    """The row a record came from (its key is ``k-<id>``)."""
    assert record.key is not None
    return int(record.key[2:])


def seen(records: list[KafkaRecord]) -> set[tuple[Any, ...]]:
    return {(r.partition, r.key, r.value, tuple(r.headers or ()), r.timestamp_ms) for r in records}


def test_a_staged_job_writes_what_the_python_path_writes_exactly_once(
    spark: SparkSession, kafka_bootstrap: str
) -> None:
    staging_jar()  # the checkout built it (make jars): a missing one is named here, not as a class
    topics = {path: unique(f"staged-{path}") for path in ("spark", "python")}
    job = unique("staged-job")
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic, partitions=3)
    for path, topic in topics.items():
        config = sink_config(
            kafka_bootstrap,
            topic,
            f"{job}-{path}",
            headers_column="hdrs",
            partition_column="part",
            timestamp_column="at",
            lineage_headers=True,
            write_path=path,
            client_config={"linger.ms": 20, "compression.type": "lz4"},
        )
        result = (
            Job(spark, job, tempfile.mkdtemp()).sink(KafkaSink("out", config)).write(rows(spark, 9_000, 3))
        )
        assert result.state.name == "FINISHED"
        assert ongoing_with_prefix(kafka_bootstrap, f"it-{job}-{path}") == []
    staged, python = (read_topic(kafka_bootstrap, topics[p], until_stable=True) for p in ("spark", "python"))
    assert len(staged) == 9_000 and len({r.key for r in staged}) == 9_000
    assert seen(staged) == seen(python)
    assert all(r.partition == number(r) % 2 for r in staged if number(r) % 3 == 0)


def test_a_write_never_committed_is_aborted_but_the_held_transaction(
    spark: SparkSession, kafka_bootstrap: str
) -> None:
    topic, job = unique("staged-crash"), unique("staged-crash-job")
    create_topic(kafka_bootstrap, topic, partitions=3)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job, write_path="spark"))
    staged = sink.stage_with_spark(rows(spark, 3_000, 3).select("key", "value"), job, 4)
    assert sorted(staged) == [0, 1, 2] and sum(t.records or 0 for t in staged.values()) == 3_000
    ids = sorted(t.committable.transactional_id for t in staged.values())
    assert ids == [f"it-{job}-out-{p}-0-0" for p in range(3)]  # slot 4 mod 4, attempt 0
    assert sorted(ongoing_with_prefix(kafka_bootstrap, f"it-{job}")) == ids
    held = [staged[0].committable]
    aborted = sink.abort_lingering(LingeringScope(job, "out", held=held, up_to_checkpoint=4))
    assert aborted == 2 and ongoing_with_prefix(kafka_bootstrap, f"it-{job}") == ids[:1]
    assert sink.commit_batch(held) == [CommitOutcome.COMMITTED]
    visible = read_topic(kafka_bootstrap, topic, until_stable=True)
    assert sorted(number(r) for r in visible) == list(range(1_000))  # partition 0's
    # the broker forgot the id: the marker is found in the log from the committable's own
    # marker_offset (one past the first partition's last record of the transaction)
    c = held[0]
    assert c.marker_offset is not None and c.marker_offset > 0 and c.opened_ms is not None
    assert (
        sink.recover_and_commit(replace(c, transactional_id=unique("forgotten")))
        is CommitOutcome.ALREADY_COMMITTED
    )
    sink.close()
