"""The three facts the Kafka sink stands on, proved against the real broker.

1. librdkafka's statistics (``stats_cb``, ``eos`` object) give the producer id and epoch after
   ``init_transactions`` — checked against the coordinator's own DescribeTransactions.
2. A producer destroyed without commit or abort (its process exits) leaves its transaction open.
3. EndTxn(commit) sent from another process with the recorded transactional id, producer id and
   epoch commits that transaction: a read_committed consumer then sees exactly its records.
"""

from __future__ import annotations

import pytest
from support.kafka.support import (
    create_topic,
    describe,
    read_json_line,
    sink_config,
    unique,
    writer_process,
)

from twophase.connectors.kafka.internal.admin import KafkaAdmin
from twophase.connectors.kafka.internal.committer import KafkaErrorCode
from twophase.integration.readback import is_stable, key_values, read_topic, wait_until_stable

pytestmark = pytest.mark.kafka


def test_three_facts(kafka_bootstrap: str) -> None:
    topic = unique("facts")
    create_topic(kafka_bootstrap, topic, partitions=2)
    txn_id = unique("it-facts-raw-")
    config = sink_config(kafka_bootstrap, topic, "facts")

    with writer_process("raw", kafka_bootstrap, topic, "facts", txn_id, "0", "0", "20") as proc:
        written = read_json_line(proc)
        assert proc.wait(timeout=60) == 0  # the writer process is gone, its producer destroyed

    # Fact 1: the statistics carry the producer id and epoch the coordinator assigned.
    assert written["eos"]["idemp_state"] == "Assigned"
    assert isinstance(written["producer_id"], int) and written["producer_id"] >= 0
    assert isinstance(written["producer_epoch"], int) and written["producer_epoch"] >= 0
    snapshot = describe(config, txn_id)
    assert snapshot is not None
    assert (snapshot.producer_id, snapshot.producer_epoch) == (
        written["producer_id"],
        written["producer_epoch"],
    )

    # Fact 2: the destroyed producer left its transaction open; nothing is visible to
    # read_committed readers and the last stable offset is held back.
    assert snapshot.state == "Ongoing"
    assert read_topic(kafka_bootstrap, topic, "read_committed") == []
    assert len(read_topic(kafka_bootstrap, topic, "read_uncommitted")) == 20
    assert not is_stable(kafka_bootstrap, topic)  # the last stable offset is held back

    # Fact 3: EndTxn(commit) from this (another) process commits it.
    admin = KafkaAdmin.connect(config)
    try:
        code = admin.end_txn(
            txn_id, written["producer_id"], written["producer_epoch"], commit=True, refresh=True
        )
    finally:
        admin.close()
    assert code == KafkaErrorCode.NONE
    got = key_values(read_topic(kafka_bootstrap, topic, "read_committed"))
    assert sorted(got) == sorted((f"raw-{i}".encode(), f"v-raw-{i}".encode()) for i in range(20))
    wait_until_stable(kafka_bootstrap, topic)
