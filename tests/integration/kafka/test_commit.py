"""Committing on the driver what a writer in another process pre-committed (real broker)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.kafka.support import (
    create_topic,
    decode,
    expected,
    read_json_line,
    rows,
    sink_config,
    unique,
    wait_for_state,
    write_one,
    writer_process,
)

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka.internal.admin import KafkaAdmin
from twophase.integration.readback import key_values, read_topic, wait_until_stable
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.kafka


def test_commit_from_another_process_then_recommit(kafka_bootstrap: str) -> None:
    topic, job = unique("commit"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=3)
    with writer_process("precommit", kafka_bootstrap, topic, job, "out", "1", "0", "500") as proc:
        payload = read_json_line(proc)
        assert proc.wait(timeout=60) == 0
    committable = decode(payload["committable"])
    assert committable.record_count == 500
    assert {tp[0] for tp in committable.topic_partitions} == {topic}
    assert read_topic(kafka_bootstrap, topic, "read_committed") == []  # pre-committed only

    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job))
    try:
        assert sink.recover_and_commit(committable) is CommitOutcome.COMMITTED
        assert sink.commit(committable) is CommitOutcome.ALREADY_COMMITTED
        got = key_values(read_topic(kafka_bootstrap, topic, "read_committed", until_stable=True))
        assert sorted(got) == sorted(expected("c1-p0-a0", 500))  # exactly once
        # a fresh driver process (new sink, new connections) re-commits idempotently too
        fresh = KafkaSink("out", sink_config(kafka_bootstrap, topic, job))
        assert fresh.recover_and_commit(committable) is CommitOutcome.ALREADY_COMMITTED
        fresh.close()
        wait_until_stable(kafka_bootstrap, topic)
        assert sorted(key_values(read_topic(kafka_bootstrap, topic, "read_committed"))) == sorted(
            expected("c1-p0-a0", 500)
        )
    finally:
        sink.close()


def test_transaction_aborted_by_timeout_is_lost(kafka_bootstrap: str) -> None:
    topic, job = unique("timeout"), unique("job")
    create_topic(kafka_bootstrap, topic)
    config = sink_config(
        kafka_bootstrap, topic, job, transaction_timeout_ms=2000, max_epoch_ms=1000, max_commit_delay_ms=1000
    )
    sink = KafkaSink("out", config)
    try:
        committable = write_one(sink, job, 1, 0, rows("late", 50))
        # the coordinator aborts it after transaction.timeout.ms and bumps the epoch
        aborted = wait_for_state(config, committable.transactional_id, {"CompleteAbort"}, timeout_s=60)
        assert aborted.producer_epoch > committable.producer_epoch
        assert sink.commit(committable) is CommitOutcome.LOST
        assert sink.commit(committable) is CommitOutcome.LOST
        wait_until_stable(kafka_bootstrap, topic)
        assert read_topic(kafka_bootstrap, topic, "read_committed") == []
    finally:
        sink.close()


def test_abort_of_a_pre_committed_transaction(kafka_bootstrap: str) -> None:
    topic, job = unique("abort"), unique("job")
    create_topic(kafka_bootstrap, topic)
    config = sink_config(kafka_bootstrap, topic, job)
    sink = KafkaSink("out", config)
    try:
        committable = write_one(sink, job, 1, 0, rows("gone", 10))
        sink.abort(committable)
        sink.abort(committable)  # idempotent
        assert (
            wait_for_state(config, committable.transactional_id, {"CompleteAbort"}, 30).state
            == "CompleteAbort"
        )
        assert sink.commit(committable) is CommitOutcome.LOST
        wait_until_stable(kafka_bootstrap, topic)
        assert read_topic(kafka_bootstrap, topic, "read_committed") == []
    finally:
        sink.close()


def test_empty_transaction_has_no_committable_and_leaves_nothing_open(kafka_bootstrap: str) -> None:
    import pyarrow as pa
    from support.kafka.support import ongoing_with_prefix

    from twophase.sinks.context import WriterContext

    topic, job = unique("empty"), unique("job")
    create_topic(kafka_bootstrap, topic)
    config = sink_config(kafka_bootstrap, topic, job)
    sink = KafkaSink("out", config)
    txn = sink.begin_transaction(WriterContext(job, "out", 1, 0, 0, 1))
    sink.write(txn, pa.record_batch({"key": pa.array([], pa.string()), "value": pa.array([], pa.binary())}))
    assert sink.pre_commit(txn) is None
    assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == []


def test_a_commit_the_coordinator_forgot_is_decided_by_its_marker_in_the_log(kafka_bootstrap: str) -> None:
    """#26 item 2 on a real broker: once the coordinator no longer knows a transactional id (it
    expired; here the committable names an id the broker never saw), the COMMIT or ABORT marker
    that EndTxn wrote into the partition decides."""
    topic, job = unique("marker"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=2)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job))
    try:
        kept = write_one(sink, job, 1, 0, rows("kept", 200), num_partitions=2)
        dropped = write_one(sink, job, 1, 1, rows("dropped", 200), num_partitions=2)
        assert sink.commit(kept) is CommitOutcome.COMMITTED
        sink.abort(dropped)
        # EndTxn answers once the coordinator logged the decision; the markers follow (KIP-98)
        wait_until_stable(kafka_bootstrap, topic)
        assert kept.opened_ms is not None and dropped.opened_ms is not None
        forgotten = replace(kept, transactional_id=unique("forgotten"))
        assert sink.recover_and_commit(forgotten) is CommitOutcome.ALREADY_COMMITTED
        assert sink.recover_and_commit(replace(dropped, transactional_id=unique("forgotten"))) is (
            CommitOutcome.LOST
        )
        # a committable of version 1 does not say where to look: LOST, as before
        assert sink.recover_and_commit(replace(forgotten, opened_ms=None, marker_offset=None)) is (
            CommitOutcome.LOST
        )
        admin = KafkaAdmin.connect(sink.config)
        try:
            (t, p) = next((t, p) for t, p in kept.topic_partitions if p >= 0)
            since, until = kept.opened_ms - 60_000, kept.opened_ms + 600_000
            pid, epoch = kept.producer_id, kept.producer_epoch
            assert admin.transaction_outcome(t, p, pid, epoch, since, until).found is True
            assert admin.transaction_outcome(t, p, pid, epoch + 1, since, until).found is None
            later = admin.transaction_outcome(t, p, pid, epoch, until + 3_600_000, until + 7_200_000)
            assert later.found is None
            # from the offset the writer read after its last record was acknowledged (#43)
            assert kept.marker_offset is not None
            (kt, kp) = next((t, p) for t, p in kept.topic_partitions if p >= 0)
            found = admin.transaction_outcome(kt, kp, pid, epoch, since, until, kept.marker_offset)
            assert found.found is True and found.start == kept.marker_offset
        finally:
            admin.close()
        wait_until_stable(kafka_bootstrap, topic)
        got = key_values(read_topic(kafka_bootstrap, topic, "read_committed"))
        assert sorted(got) == sorted(expected("kept", 200))  # committed once, nothing of the aborted one
    finally:
        sink.close()
