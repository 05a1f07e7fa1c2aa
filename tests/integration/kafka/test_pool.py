"""The transactional id pool under asynchronous commit, and its size on the broker (real broker)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from support.kafka.support import (
    all_with_prefix,
    create_topic,
    expected,
    ongoing_with_prefix,
    rows,
    sink_config,
    unique,
    write_one,
)

from twophase.connectors.kafka import KafkaCommittable, KafkaSink
from twophase.connectors.kafka.internal import naming
from twophase.integration.readback import key_values, read_topic, wait_until_stable
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.kafka
log = logging.getLogger(__name__)


def test_async_commit_never_reuses_a_pending_id(kafka_bootstrap: str) -> None:
    """Epoch c+1 writes while checkpoint c is still pending; both commit; every record once."""
    topic, job = unique("pool"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=2)
    config = sink_config(kafka_bootstrap, topic, job, pool_size=3, max_pending_checkpoints=1)
    sink = KafkaSink("out", config)
    partitions, epochs = 2, 7
    want: list[tuple[bytes, bytes]] = []
    try:
        pending: list[KafkaCommittable] = []
        for c in range(1, epochs + 1):
            # epoch c writes while checkpoint c-1's commit has not run yet (async commit)
            written = [
                write_one(sink, job, c, p, rows(f"c{c}-p{p}", 20 + c), partitions) for p in range(partitions)
            ]
            want += [r for p in range(partitions) for r in expected(f"c{c}-p{p}", 20 + c)]
            assert not {w.transactional_id for w in written} & {q.transactional_id for q in pending}
            # pre-committing c did not disturb the pending c-1: it still commits
            for q in pending:
                assert sink.commit(q) is CommitOutcome.COMMITTED
            pending = written
        for q in pending:
            assert sink.commit(q) is CommitOutcome.COMMITTED
        wait_until_stable(kafka_bootstrap, topic)
        got = key_values(read_topic(kafka_bootstrap, topic, "read_committed"))
        assert sorted(got) == sorted(want)  # all visible, exactly once
        assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == []
    finally:
        sink.close()


@pytest.mark.slow
@pytest.mark.long  # 80 s; async commit's pool test covers the id pool in make test
def test_transactional_ids_held_after_100_epochs(
    kafka_bootstrap: str, record_property: Callable[[str, object], None]
) -> None:
    """The broker's transactional-id count stays at partitions × pool_size (reported, not timed)."""
    topic, job = unique("hundred"), unique("job")
    create_topic(kafka_bootstrap, topic, partitions=2)
    config = sink_config(kafka_bootstrap, topic, job, pool_size=3, statistics_interval_ms=20)
    sink = KafkaSink("out", config)
    partitions = 2
    try:
        for c in range(1, 101):
            for p in range(partitions):
                assert sink.commit(write_one(sink, job, c, p, rows(f"c{c}-p{p}", 3), partitions)).is_success
        held = all_with_prefix(kafka_bootstrap, config.prefix(job))
        ids = sorted({t for t, _pid, _state in held})
        print(f"transactional ids held by the broker after 100 epochs: {len(ids)}")
        record_property("transactional_ids_after_100_epochs", len(ids))
        assert ids == sorted(
            naming.transactional_id(config.prefix(job), "out", p, slot)
            for p in range(partitions)
            for slot in range(3)
        )
        assert (
            sink.abort_lingering(LingeringScope[KafkaCommittable](job, "out", max_partitions=partitions)) == 0
        )
        wait_until_stable(kafka_bootstrap, topic)
        assert len(read_topic(kafka_bootstrap, topic, "read_committed")) == 100 * partitions * 3
    finally:
        sink.close()
