"""Benchmark: commit throughput per sink, a checkpoint's batch against one by one (#42 item 3).

Per sink and round, against the real service (MinIO for S3, a native PostgreSQL, a Kafka broker):

1. **Prepare** (untimed): ``TRANSACTIONS`` pre-committed transactions through the real sink
   (``begin_transaction`` → write ``ROWS_PER_TXN`` rows → ``pre_commit``, 8 at a time), grouped
   into checkpoints of ``PER_CHECKPOINT`` (PostgreSQL keeps every prepared transaction in one of
   ``max_prepared_transactions`` slots, 64 on the test server, shared with other jobs).
2. **Commit** (timed: wall clock and this process's CPU seconds), each checkpoint in turn, in one
   of three modes, side by side in the same round on fresh transactions:
   - ``one_by_one``: ``sink.commit`` per committable, one after another;
   - ``pooled_commits``: ``sink.commit`` per committable on ``commit_concurrency`` threads, the
     driver's path before #42 item 3 (and what the default ``commit_batch`` still does);
   - ``batch``: one ``sink.commit_batch`` per checkpoint (S3: CompleteMultipartUpload of every
     file from one pool over one client; PostgreSQL: COMMIT PREPARED over a few sessions; Kafka:
     one DescribeTransactions per coordinator, then EndTxn for each).
3. **Check** (untimed): every outcome is COMMITTED and a reader sees every row (S3: one object per
   transaction; PostgreSQL: the table's row count; Kafka: a ``read_committed`` consumer's count).

Reported per sink and mode: transactions per second at the median round (and its range), CPU
seconds per 1,000 transactions, and the batch's speed-up over each other mode; load average at
start and end (the machine is shared). The modes' order rotates per round. Delta and Iceberg are
checkpoint-commit sinks: their one table commit per checkpoint already is the batch, and is measured
by ``bench_delta`` / ``bench_iceberg``. Kafka's ``commit_concurrency`` is 1 (its EndTxn calls
share kafka-python's one IO thread, see ``bench_recovery``): its pooled mode is one by one.

``python -m benchmarks.bench_commit_batch``; ``TWOPHASE_BENCH_SCALE`` scales ``TRANSACTIONS``,
``TWOPHASE_BENCH_RUNS`` the rounds; services from the environment or started here.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks import common

TRANSACTIONS = 200
PER_CHECKPOINT = 40
ROWS_PER_TXN = 10
ROUNDS = 3
PREPARE_THREADS = 8
BUCKET = "twophase-bench"
MODES = ("one_by_one", "pooled_commits", "batch")

Commit = Callable[[Any, Sequence[Any]], list[Any]]


def _commit_modes() -> dict[str, Commit]:
    from twophase.sinks.api import commit_each

    return {
        "one_by_one": lambda sink, cs: [sink.commit(c) for c in cs],
        "pooled_commits": lambda sink, cs: commit_each(sink.commit, cs, sink.commit_concurrency),
        "batch": lambda sink, cs: sink.commit_batch(cs),
    }


def _batch(checkpoint: int, partition: int) -> Any:
    import pyarrow as pa

    keys = [f"c{checkpoint}p{partition}r{i}" for i in range(ROWS_PER_TXN)]
    return pa.record_batch({"key": keys, "value": [f"value-{k}" for k in keys]})


def _prepare(sink: Any, job_id: str, checkpoint: int, n: int) -> list[Any]:
    """``n`` pre-committed transactions of ``checkpoint``, ascending by partition."""
    from twophase.sinks.context import WriterContext

    def one(partition: int) -> Any:
        txn = sink.begin_transaction(WriterContext(job_id, sink.name, checkpoint, partition, 0, n))
        sink.write(txn, _batch(checkpoint, partition))
        committable = sink.pre_commit(txn)
        assert committable is not None
        return committable

    with ThreadPoolExecutor(PREPARE_THREADS) as pool:
        return list(pool.map(one, range(n)))


def _checkpoints() -> list[int]:
    """How many transactions each checkpoint of a round holds."""
    total = common.scaled(TRANSACTIONS)
    return [min(PER_CHECKPOINT, total - i) for i in range(0, total, PER_CHECKPOINT)]


def _round(make_sink: Callable[[str], Any], mode: str, commit: Commit) -> tuple[float, float, int]:
    """Prepare and commit one round's checkpoints in ``mode``; ``(wall s, CPU s, transactions)``."""
    from twophase.sinks.outcome import CommitOutcome

    run_id = uuid.uuid4().hex[:8]
    sink = make_sink(run_id)
    job = f"bench-commit-{run_id}"
    wall = cpu = 0.0
    done = 0
    try:
        for checkpoint, n in enumerate(_checkpoints(), start=1):
            committables = _prepare(sink, job, checkpoint, n)
            started, started_cpu = time.perf_counter(), time.process_time()
            outcomes = commit(sink, committables)
            wall += time.perf_counter() - started
            cpu += time.process_time() - started_cpu
            assert outcomes == [CommitOutcome.COMMITTED] * n, (mode, outcomes)
            done += n
    finally:
        sink.close()
    return wall, cpu, done


def _measure(
    name: str, make_sink: Callable[[str], Any], visible: Callable[[], int], rounds: int
) -> dict[str, Any]:
    """Every mode in every round (the order rotating); one row per mode, ``<name> (<mode>)``."""
    commits = _commit_modes()
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    cpus: dict[str, list[float]] = {m: [] for m in MODES}
    total = 0
    for r in range(rounds):
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
            before = visible()
            wall, cpu, total = _round(make_sink, mode, commits[mode])
            assert visible() - before == total * ROWS_PER_TXN, (name, mode, visible() - before)
            walls[mode].append(wall)
            cpus[mode].append(cpu)
    out: dict[str, Any] = {}
    batch = statistics.median(walls["batch"])
    for mode in MODES:
        med = statistics.median(walls[mode])
        out[f"{name} ({mode})"] = {
            "transactions": total,
            "per_checkpoint": PER_CHECKPOINT,
            "transactions_per_s": round(total / med, 1),
            "range_per_s": f"{total / max(walls[mode]):.0f}–{total / min(walls[mode]):.0f}",
            "best_per_s": round(total / min(walls[mode]), 1),  # load only slows a round down
            "cpu_s_per_1000": round(statistics.median(cpus[mode]) / total * 1000, 3),
            "batch_speedup": round(med / batch, 2),
            "n": len(walls[mode]),
        }
    return out


def _s3(rounds: int) -> dict[str, Any]:
    from twophase.connectors.s3 import S3Sink
    from twophase.integration.services import s3_service

    with s3_service() as endpoint:
        endpoint.ensure_bucket(BUCKET)
        client = endpoint.boto3_client()
        root = f"commit-batch-{uuid.uuid4().hex[:8]}"

        def sink(run_id: str) -> Any:
            s = S3Sink("s3", endpoint.sink_config(bucket=BUCKET, prefix=f"{root}/{run_id}", format="parquet"))
            s.validate(_batch(0, 0).schema)
            return s

        def objects() -> int:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{root}/")
            return sum(len(p.get("Contents", [])) for p in pages) * ROWS_PER_TXN  # one file per txn

        try:
            return _measure("s3_multipart_uploads", sink, objects, rounds)
        finally:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{root}/"):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys, "Quiet": True})


def _postgres(rounds: int) -> dict[str, Any]:
    import psycopg

    from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
    from twophase.integration.services.postgres_service import postgres_service

    with postgres_service() as pg:
        table = f"bench_commit_{uuid.uuid4().hex[:8]}"
        conn = psycopg.connect(**pg.connect_kwargs(), autocommit=True)
        conn.execute(f'CREATE TABLE "{table}" (key text, value text)')

        def sink(run_id: str) -> Any:
            s = PostgresSink("postgres", PostgresSinkConfig(table=table, **pg.sink_fields()))
            s.validate(_batch(0, 0).schema)
            return s

        def rows() -> int:
            row = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()
            return int(row[0]) if row else 0

        try:
            return _measure("postgres_prepared_transactions", sink, rows, rounds)
        finally:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.close()


def _kafka(rounds: int) -> dict[str, Any]:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    from benchmarks.bench_recovery import TOPIC_PARTITIONS, _count_committed
    from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
    from twophase.integration.services import kafka_service

    with kafka_service() as bootstrap:
        topic = f"bench-commit-batch-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1)])

        def sink(run_id: str) -> Any:
            config = KafkaSinkConfig(
                bootstrap_servers=bootstrap,
                topic=topic,
                transactional_id_prefix=f"bench-commit-{run_id}",
                statistics_interval_ms=20,  # preparation speed only (producer id from stats)
            )
            s = KafkaSink("kafka", config)
            s.validate(_batch(0, 0).schema)
            return s

        try:
            return _measure("kafka_transactions", sink, lambda: _count_committed(bootstrap, topic), rounds)
        finally:
            admin.delete_topics([topic])
            admin.close()


def run() -> dict[str, Any]:
    """Commit throughput of S3, PostgreSQL and Kafka, one by one, pooled and batched, side by side."""
    rounds = common.runs(ROUNDS)
    start = common.machine()
    cpu_start = time.process_time()
    results = {**_s3(rounds), **_postgres(rounds), **_kafka(rounds)}
    return {
        "rows_per_transaction": ROWS_PER_TXN,
        "rounds": rounds,
        **common.load_at_end(start),
        "process_cpu_s": round(time.process_time() - cpu_start, 2),
        "commit": results,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
