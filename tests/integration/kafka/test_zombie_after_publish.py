"""A restore that finds a transaction LOST aborts the zombie's open transaction before it refuses
(issue #43 item 3), on a real broker.

DESIGN.md §12's remaining window: an attempt of an earlier stage attempt, numbered 0 again, reaches
``init_transactions`` only after the checkpoint was published. It fences the acknowledged
transaction (KIP-98: ``InitProducerId`` on its id aborts it) and opens its own, which holds back
every ``read_committed`` reader of the partition until the transaction timeout unless the restore
aborts it.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.harness import TwoPhaseHarness
from support.kafka.support import create_topic, ongoing_with_prefix, sink_config, unique

from twophase.connectors.kafka import KafkaSink
from twophase.coordinator.run.fanout import write_subtasks
from twophase.sinks.errors import TransactionLostError

pytestmark = pytest.mark.kafka


def test_the_restore_aborts_the_zombies_transaction_before_it_reports_lost(kafka_bootstrap: str) -> None:
    topic, job = unique("zombie"), unique("job")
    create_topic(kafka_bootstrap, topic)
    config = sink_config(kafka_bootstrap, topic, job)
    h = TwoPhaseHarness([KafkaSink("out", config)], job_id=job)
    h.restore()
    keys = [f"k{i}" for i in range(5)]
    batches = [pa.record_batch({"key": keys, "value": keys})]
    epoch = h.begin_epoch(1, {"batch_id": 1})
    [ack] = write_subtasks(epoch.plan(), 0, 0, batches)
    epoch.acknowledge(ack)
    h.complete(epoch, notify=False)  # published, not committed yet
    write_subtasks(epoch.plan(), 0, 0, batches)  # the zombie, attempt 0 of an earlier stage attempt
    prefix = config.prefix(job)
    assert len(ongoing_with_prefix(kafka_bootstrap, prefix)) == 1
    with pytest.raises(TransactionLostError, match="transactional_id="):
        h.restart_process()
    assert ongoing_with_prefix(kafka_bootstrap, prefix) == []
