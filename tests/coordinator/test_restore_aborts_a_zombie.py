"""A restore that finds a transaction LOST aborts what is still open before it refuses (issue #43
item 3): the zombie window DESIGN.md §12 documents (an attempt with the acknowledged attempt's
number reaching ``init_transactions`` only after the publish) is reported by name, and the zombie's
own open transaction must not hold back every ``read_committed`` reader until its timeout.

The real Kafka sink on the transaction-coordinator model (``support.kafka_model``)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.clock import ManualClock
from support.harness import TwoPhaseHarness
from support.kafka_model import KafkaModel

from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
from twophase.coordinator.run.fanout import write_subtasks
from twophase.sinks.errors import TransactionLostError


def rows(n: int) -> list[pa.RecordBatch]:
    keys = [f"e{n}r{r}" for r in range(3)]
    return [pa.record_batch({"key": keys, "value": keys})]


def test_the_zombies_open_transaction_is_aborted_when_the_restore_reports_lost() -> None:
    clock = ManualClock()
    model = KafkaModel(clock=clock)
    config = KafkaSinkConfig(bootstrap_servers="model:9092", topic="events", stats_wait_ms=10_000)
    h = TwoPhaseHarness([KafkaSink("out", config, clients=model)], job_id="job", clock=clock)
    h.restore()
    epoch = h.begin_epoch(1, {"batch_id": 1})
    [ack] = write_subtasks(epoch.plan(), 0, 0, rows(1))
    epoch.acknowledge(ack)
    h.complete(epoch, notify=False)  # published, not yet committed
    # an attempt of an earlier stage attempt, numbered 0 again, starts only now: its
    # init_transactions on the acknowledged transaction's id fences it, and it stays open
    write_subtasks(epoch.plan(), 0, 0, rows(1))
    assert len(model.ongoing()) == 1
    with pytest.raises(TransactionLostError, match="transactional_id="):
        h.restart_process()
    assert model.ongoing() == []
