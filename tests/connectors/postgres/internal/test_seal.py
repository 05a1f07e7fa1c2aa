"""The seal (#26 item 4): a writer rolls back other attempts' prepared transactions only until the
driver sealed them for publishing; after that the writer is a zombie and does not begin. Runs the
real sink against the model of the server (``support.postgres_model``)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.postgres_model import PostgresModel

from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.connectors.postgres.internal import seal
from twophase.connectors.postgres.internal.committable import PostgresCommittable
from twophase.connectors.postgres.internal.schema import WritePlan
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.errors import ConcurrentAttemptError
from twophase.sinks.outcome import CommitOutcome

CONFIG = PostgresSinkConfig(table="events", host="model", connect_attempts=2, connect_backoff_ms=1)
JOB = "job"


def sink_on(server: PostgresModel) -> PostgresSink:
    sink = PostgresSink("pg", CONFIG, connector=server.connect)
    sink.plan = WritePlan(("key",), ("text",))  # what validate reads from a real catalog
    return sink


def prepare(sink: PostgresSink, keys: list[str], attempt: int, checkpoint: int = 1) -> PostgresCommittable:
    txn = sink.begin_transaction(WriterContext(JOB, sink.name, checkpoint, 0, attempt, num_partitions=1))
    sink.write(txn, pa.record_batch({"key": pa.array(keys, pa.string())}))
    committable = sink.pre_commit(txn)
    assert committable is not None
    return committable


def test_a_retry_before_the_seal_rolls_back_the_failed_attempt() -> None:
    server = PostgresModel()
    sink = sink_on(server)
    failed = prepare(sink, ["a"], attempt=0)  # the task died after PREPARE
    retry = prepare(sink, ["a"], attempt=1)
    assert server.prepared_gids() == [retry.gid] and failed.gid != retry.gid
    sink.verify_pre_committed([retry], [])
    assert sink.commit(retry) is CommitOutcome.COMMITTED
    assert list(server.committed_rows().elements()) == ["a"]


def test_an_attempt_after_the_seal_is_a_zombie_and_rolls_nothing_back() -> None:
    server = PostgresModel()
    sink = sink_on(server)
    acknowledged = prepare(sink, ["a", "b"], attempt=0)
    sink.verify_pre_committed([acknowledged], [])  # the driver seals, then publishes
    for attempt in (0, 1, 3):  # a zombie of an earlier stage attempt, a speculative copy…
        with pytest.raises(ConcurrentAttemptError, match="zombie"):
            prepare(sink, ["a"], attempt=attempt)
    assert server.prepared_gids() == [acknowledged.gid]
    assert sink.commit(acknowledged) is CommitOutcome.COMMITTED
    # committed: nothing of it is left to roll back; a later zombie begins, and lingering cleanup
    # rolls its transaction back
    prepare(sink, ["z"], attempt=2)
    assert sink.abort_lingering(LingeringScope(JOB, sink.name)) == 1
    assert server.prepared_gids() == []
    assert sorted(server.committed_rows().elements()) == ["a", "b"]


def test_seals_are_pruned_with_the_commit_records() -> None:
    server = PostgresModel()
    sink = sink_on(server)
    far = CONFIG.commit_record_retention + 5
    for checkpoint in (1, far):
        c = prepare(sink, [f"k{checkpoint}"], attempt=0, checkpoint=checkpoint)
        sink.verify_pre_committed([c], [])
        assert sink.commit(c) is CommitOutcome.COMMITTED
    assert [r.checkpoint_id for r in server.sealed.values()] == [far]


def test_the_seal_table_fits_an_identifier_and_the_lock_key_a_bigint() -> None:
    long = PostgresSinkConfig(table="t", host="h", commit_table="c" * 63)
    assert len(seal.seal_table_name(long)) == 63 and seal.seal_table_name(long).endswith("_sealed")
    assert seal.seal_table_name(CONFIG) == "twophase_commits_sealed"
    key = seal.advisory_key("twophase.job.pg.0123456789abcdef.")
    assert -(2**63) <= key < 2**63 and key == seal.advisory_key("twophase.job.pg.0123456789abcdef.")
    assert key != seal.advisory_key("twophase.job.pg2.0123456789abcdef.")
