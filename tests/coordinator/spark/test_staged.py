"""A Spark-staged epoch's acknowledgements (``tasks.staged_acknowledgements``, issue #44 item 4):
one row per partition with the attempt, committable and records the sink's writer handed back.
The writes themselves run against real Spark in tests/integration/{s3,kafka}/test_staged_write_spark.py."""

from __future__ import annotations

from typing import Any

import pytest

from twophase.connectors.kafka import KafkaCommittable, KafkaSink, KafkaSinkConfig
from twophase.coordinator.run.fanout import EpochPlan
from twophase.coordinator.spark.tasks import staged_acknowledgements, staged_sink
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.payload import payload_object
from twophase.sinks.spark_staging import StagedTask


def committable(partition: int, attempt: int) -> KafkaCommittable:
    return KafkaCommittable(f"p-out-{partition}-1-{attempt}", 7, 3, (("t", 0),), 10 + partition, 5, 1, 2)


class Staged(KafkaSink):
    """A Kafka sink whose staged write hands back what the test says."""

    def __init__(self, handed: dict[int, StagedTask], write_path: str = "spark") -> None:
        super().__init__("out", KafkaSinkConfig(bootstrap_servers="b:9092", topic="t", write_path=write_path))
        self.handed = handed

    def stage_with_spark(self, df: Any, job_id: str, checkpoint_id: int) -> dict[int, StagedTask]:
        assert (df, job_id, checkpoint_id) == ("rows", "job", 5)
        return self.handed


ROWS: Any = "rows"
"""Stands for the epoch's DataFrame: the sink's staged write is the test's."""


def plan(sink: KafkaSink) -> EpochPlan:
    return EpochPlan("job", 5, 3, (sink,), {})


def test_each_partition_acknowledges_what_its_task_staged_or_nothing() -> None:
    sink = Staged({0: StagedTask(0, committable(0, 0), 10), 2: StagedTask(1, committable(2, 1), 12)})
    acks = [
        Acknowledgement.from_row(r) for r in staged_acknowledgements(sink, ROWS, plan(sink), 3).to_pylist()
    ]
    assert [(a.partition, a.attempt, a.records) for a in acks] == [(0, 0, 10), (1, 0, 0), (2, 1, 12)]
    assert acks[1].committable is None
    assert acks[2].committable is not None and sink.decode(
        payload_object(acks[2].committable)
    ) == committable(2, 1)


def test_a_partition_the_epoch_does_not_have_is_refused() -> None:
    sink = Staged({3: StagedTask(0, committable(3, 0), 13)})
    with pytest.raises(ValueError, match=r"partitions \[3\] of 3"):
        staged_acknowledgements(sink, ROWS, plan(sink), 3)


def test_only_a_job_s_one_staging_sink_stages() -> None:
    staging, python = Staged({}), Staged({}, write_path="python")
    assert staged_sink([staging]) is staging
    assert staged_sink([python]) is None and staged_sink([staging, python]) is None
