"""Helpers shared by the Kafka connector's integration tests (real broker, no mocks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import tenacity
from kafka import KafkaAdminClient

from twophase.connectors.kafka import KafkaCommittable, KafkaSink, KafkaSinkConfig
from twophase.connectors.kafka.internal.admin import KafkaAdmin, TransactionSnapshot
from twophase.connectors.kafka.internal.committable import CODEC
from twophase.sinks.context import WriterContext

REPO = Path(__file__).resolve().parents[3]


def unique(name: str) -> str:
    """A name no other test (or earlier run against the same broker) uses."""
    return f"{name}{uuid.uuid4().hex[:10]}"


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """Create ``topic`` and wait until it has leaders."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}},
            wait_for_metadata=True,
        )
    finally:
        admin.close()


def sink_config(bootstrap: str, topic: str, job: str, **kw: Any) -> KafkaSinkConfig:
    """A sink config for tests: small statistics interval, short timeouts."""
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "topic": topic,
        "transactional_id_prefix": f"it-{job}",
        "statistics_interval_ms": 50,
        "transaction_timeout_ms": 120_000,
        "max_epoch_ms": 60_000,
        "max_commit_delay_ms": 30_000,
    }
    settings.update(kw)
    return KafkaSinkConfig(**settings)


def rows(tag: str, n: int) -> pa.RecordBatch:
    """``n`` records keyed ``<tag>-<i>`` with value ``v-<tag>-<i>``."""
    return pa.record_batch(
        {"key": [f"{tag}-{i}" for i in range(n)], "value": [f"v-{tag}-{i}".encode() for i in range(n)]}
    )


def expected(tag: str, n: int) -> list[tuple[bytes, bytes]]:
    """The ``(key, value)`` pairs :func:`rows` writes."""
    return [(f"{tag}-{i}".encode(), f"v-{tag}-{i}".encode()) for i in range(n)]


def write_one(
    sink: KafkaSink,
    job: str,
    checkpoint: int,
    partition: int,
    batch: pa.RecordBatch,
    num_partitions: int = 1,
    attempt: int = 0,
) -> KafkaCommittable:
    """One subtask in this process: begin, write, pre-commit; the committable."""
    ctx = WriterContext(job, sink.name, checkpoint, partition, attempt, num_partitions)
    txn = sink.begin_transaction(ctx)
    sink.write(txn, batch)
    committable = sink.pre_commit(txn)
    assert committable is not None
    return committable


def ongoing_with_prefix(bootstrap: str, prefix: str) -> list[str]:
    """Transactional ids with ``prefix`` that the broker lists as Ongoing (ListTransactions)."""
    return sorted(t for t, _pid, _state in all_with_prefix(bootstrap, prefix, ["Ongoing"]))


def all_with_prefix(
    bootstrap: str, prefix: str, states: list[str] | None = None
) -> list[tuple[str, int, str]]:
    """Every transactional id the broker holds with ``prefix`` (any state unless ``states``)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listing = admin.list_transactions(state_filters=states or [])
    finally:
        admin.close()
    return [
        (t.transactional_id, t.producer_id, t.state.value)
        for rows_ in listing.values()
        for t in rows_
        if t.transactional_id.startswith(prefix)
    ]


def describe(config: KafkaSinkConfig, txn_id: str) -> TransactionSnapshot | None:
    """DescribeTransactions for one id."""
    admin = KafkaAdmin.connect(config)
    try:
        return admin.describe_transaction(txn_id)
    finally:
        admin.close()


def wait_for_state(
    config: KafkaSinkConfig, txn_id: str, states: set[str], timeout_s: float
) -> TransactionSnapshot:
    """Poll DescribeTransactions until ``txn_id`` is in one of ``states``."""
    waiting = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(0.5),
        retry=tenacity.retry_if_result(lambda s: s is None or s.state not in states),
    )
    snapshot = waiting(describe, config, txn_id)
    assert snapshot is not None
    return snapshot


@contextmanager
def writer_process(*args: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``tests/support/kafka/writer_process.py`` with ``args`` in a separate Python process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "support.kafka.writer_process", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),  # PYTHONPATH holds tests/ (tests/integration/conftest.py)
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def read_json_line(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> dict[str, Any]:
    """The next stdout line of ``proc``, parsed as JSON (the writer prints one per event)."""
    assert proc.stdout is not None
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout_s):
        raise TimeoutError(f"writer process printed nothing in {timeout_s} s; stderr: {_stderr(proc)}")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"writer process ended (rc={proc.wait()}); stderr: {_stderr(proc)}")
    return dict(json.loads(line))


def _stderr(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None or proc.stderr is None:
        return "(still running)"
    return proc.stderr.read()[-3000:]


def decode(payload: dict[str, Any]) -> KafkaCommittable:
    """A committable printed by the writer process."""
    return CODEC.from_json(payload)
