"""Issue #43 item 1, Kafka: a restore that must find a transaction's COMMIT marker in the log
(the coordinator forgot the transactional id) searches from where the transaction's marker can
first be, so that neither the transaction's own records nor other producers' records before it
count against the search's bound (real broker).

The bound is shrunk to 1 MiB (and one Fetch to 256 KiB) so that a few MiB stand for the issue's
300 MiB against the 256 MiB of ``MARKER_SCAN_BYTES``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from support.kafka.support import create_topic, sink_config, unique, write_one

from twophase.connectors.kafka import KafkaCommittable, KafkaSink
from twophase.connectors.kafka.internal import transport
from twophase.integration.readback import key_values, read_topic, wait_until_stable
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.kafka

BOUND = 1024 * 1024
VALUE = 8 * 1024


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "MARKER_SCAN_BYTES", BOUND)
    monkeypatch.setattr(transport, "FETCH_BYTES", 256 * 1024)


def big_rows(tag: str, n: int) -> pa.RecordBatch:
    """``n`` records of :data:`VALUE` bytes each."""
    return pa.record_batch(
        {"key": [f"{tag}-{i}" for i in range(n)], "value": [bytes(VALUE) for _ in range(n)]}
    )


def other_traffic(bootstrap: str, topic: str, nbytes: int) -> None:
    """Another producer (not transactional) appends ``nbytes`` to ``topic[0]``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(nbytes // VALUE):
        producer.produce(topic, bytes(VALUE), f"other-{i}".encode(), partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def forgotten(c: KafkaCommittable) -> KafkaCommittable:
    """``c`` under an id the broker never saw: what a re-commit meets once
    ``transactional.id.expiration.ms`` passed (EndTxn rejected, DescribeTransactions: unknown)."""
    return replace(c, transactional_id=unique("forgotten"))


def committed(bootstrap: str, topic: str, tag: str) -> int:
    wait_until_stable(bootstrap, topic)
    got = key_values(read_topic(bootstrap, topic, "read_committed"))
    return sum(1 for k, _ in got if k is not None and k.startswith(tag.encode()))


@pytest.mark.parametrize(
    ("before", "records"),
    [
        (3 * BOUND, 16),  # a small checkpoint after more than the bound of other traffic
        (0, 3 * BOUND // VALUE),  # a checkpoint larger than the bound
    ],
    ids=["busy-before", "large-transaction"],
)
def test_a_forgotten_commit_is_found_past_other_traffic_and_its_own_records(
    kafka_bootstrap: str, before: int, records: int
) -> None:
    topic, job = unique("markerbound"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=1)
    other_traffic(kafka_bootstrap, topic, before)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job))
    try:
        kept = write_one(sink, job, 1, 0, big_rows("kept", records))
        assert sink.commit(kept) is CommitOutcome.COMMITTED
        wait_until_stable(kafka_bootstrap, topic)
        # the marker was refused and the driver stayed down past the id's expiry: the log decides
        assert sink.recover_and_commit(forgotten(kept)) is CommitOutcome.ALREADY_COMMITTED
        assert committed(kafka_bootstrap, topic, "kept") == records
    finally:
        sink.close()


def test_a_search_that_stops_on_its_bound_says_so(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """More than the bound between the pre-commit and the commit: LOST, and the committable's
    repr (which the TransactionLostError line shows) and the log say that the search stopped on
    its bound and where, not that retention or compaction took the marker."""
    topic, job = unique("markerbound"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=1)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job))
    try:
        kept = write_one(sink, job, 1, 0, big_rows("kept", 4))
        other_traffic(kafka_bootstrap, topic, 2 * BOUND)
        assert sink.commit(kept) is CommitOutcome.COMMITTED
        wait_until_stable(kafka_bootstrap, topic)
        lost = forgotten(kept)
        with caplog.at_level(logging.ERROR, logger="twophase.connectors.kafka"):
            assert sink.recover_and_commit(lost) is CommitOutcome.LOST
        said = repr(lost)
        assert f"stopped at its bound of {BOUND} bytes (marker_search_max_bytes) at offset" in said
        assert "retention" not in said
        assert any("stopped at its bound" in r.getMessage() for r in caplog.records)
    finally:
        sink.close()
