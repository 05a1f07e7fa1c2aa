"""Lingering transactions: a writer killed mid-transaction, a retried task attempt (real broker)."""

from __future__ import annotations

import signal

import pytest
from support.kafka.support import (
    create_topic,
    expected,
    ongoing_with_prefix,
    read_json_line,
    rows,
    sink_config,
    unique,
    write_one,
    writer_process,
)

from twophase.connectors.kafka import KafkaCommittable, KafkaSink
from twophase.integration.readback import end_offsets, is_stable, key_values, read_topic, wait_until_stable
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.kafka


def test_writer_killed_mid_transaction_is_aborted(kafka_bootstrap: str) -> None:
    topic, job = unique("crash"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=2)
    config = sink_config(kafka_bootstrap, topic, job)
    sink = KafkaSink("out", config)
    try:
        # a committed checkpoint 1 first, so we can see the LSO stop right after it
        held = write_one(sink, job, 1, 0, rows("ok", 30))
        assert sink.commit(held) is CommitOutcome.COMMITTED
        with writer_process("hang", kafka_bootstrap, topic, job, "out", "2", "1", "200") as proc:
            flushed = read_json_line(proc)["flushed"]
            proc.send_signal(signal.SIGKILL)  # crash mid-transaction: no abort, no commit
            assert proc.wait(timeout=60) == -signal.SIGKILL
        assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == [flushed]
        assert not is_stable(kafka_bootstrap, topic)  # the lingering transaction holds the LSO back

        scope = LingeringScope[KafkaCommittable](job, "out", held=(held,), max_partitions=2)
        assert sink.abort_lingering(scope) == 1
        assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == []
        wait_until_stable(kafka_bootstrap, topic)  # the LSO advanced to the end
        high = end_offsets(kafka_bootstrap, topic, "read_uncommitted")
        assert sum(high.values()) >= 30 + 200  # the killed writer's records are in the log...
        got = key_values(read_topic(kafka_bootstrap, topic, "read_committed"))
        assert sorted(got) == sorted(expected("ok", 30))  # ...but none of them is visible
        assert sink.abort_lingering(scope) == 0  # idempotent
        assert sink.commit(held) is CommitOutcome.ALREADY_COMMITTED  # held ids were never touched
    finally:
        sink.close()


def test_retried_attempt_leaves_no_open_transaction(kafka_bootstrap: str) -> None:
    topic, job = unique("retry"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=2)
    config = sink_config(kafka_bootstrap, topic, job)
    sink = KafkaSink("out", config)
    try:
        # partition 1, attempt 0: writes, then its process dies (the task is retried)
        with writer_process("hang", kafka_bootstrap, topic, job, "out", "1", "1", "100", "0") as proc:
            dead_id = read_json_line(proc)["flushed"]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        # partition 0 in this process; partition 1 attempt 1 has its own id (#26 item 4): it
        # leaves attempt 0's transaction open, for the lingering cleanup
        p0 = write_one(sink, job, 1, 0, rows("c1-p0-a0", 40), num_partitions=2)
        p1 = write_one(sink, job, 1, 1, rows("c1-p1-a1", 60), num_partitions=2, attempt=1)
        assert p1.transactional_id != dead_id
        # a duplicate attempt of partition 0 that started and was abandoned (speculative/zombie
        # attempt of an earlier, failed checkpoint on another slot)
        zombie = sink.begin_transaction(WriterContext(job, "out", 2, 0, 1, 2))
        sink.write(zombie, rows("zombie", 5))
        zombie._live().flush(30)
        zombie_id = zombie.transactional_id
        del zombie  # abandoned without abort
        assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == sorted(
            {dead_id, p0.transactional_id, p1.transactional_id, zombie_id}
        )
        # the checkpoint holds p0 and p1; commit them, then clean up
        for c in (p0, p1):
            assert sink.commit(c) is CommitOutcome.COMMITTED
        scope = LingeringScope[KafkaCommittable](job, "out", held=(p0, p1), max_partitions=2)
        assert sink.abort_lingering(scope) == 2  # the dead attempt's and the zombie's
        assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == []
        wait_until_stable(kafka_bootstrap, topic)
        got = key_values(read_topic(kafka_bootstrap, topic, "read_committed"))
        assert sorted(got) == sorted(expected("c1-p0-a0", 40) + expected("c1-p1-a1", 60))
    finally:
        sink.close()
