"""Benchmark: restart recovery — re-committing 1,000 pending transactions in ``JobRuntime.restore()``.

Per connector and round:

1. **Prepare** (untimed): a job with one sink runs one epoch of ``TRANSACTIONS`` partitions, each
   subtask through the real sink (``twophase.coordinator.run.fanout.write_subtasks``:
   begin_transaction → write
   ``ROWS_PER_TXN`` rows → pre_commit, in a thread pool), every acknowledgement is given, and the
   checkpoint is published; then the driver "dies" at the ``after_persist`` fault point, before
   any commit (``JobRuntime.abandon()``). That leaves ``TRANSACTIONS`` pre-committed transactions
   that only the checkpoint knows: open Kafka transactions (one transactional id each) or pending
   S3 multipart uploads (one Parquet file each).
2. **Restore** (timed, wall clock): a new ``JobRuntime`` over the same checkpoint storage with a
   fresh sink instance, ``restore()``: load the latest checkpoint, ``recover_and_commit`` every
   committable (Kafka: FindCoordinator + EndTxn(commit); S3: CompleteMultipartUpload), then
   ``abort_lingering`` (Kafka: ListTransactions by prefix; S3: ListMultipartUploads) with the
   checkpoint's committables held.
3. **Check** (untimed): ``RestoreResult.recommitted == TRANSACTIONS``; every record is readable
   (Kafka: a ``read_committed`` consumer counts ``TRANSACTIONS × ROWS_PER_TXN`` records; S3:
   ``TRANSACTIONS`` objects exist and no multipart upload is left under the prefix).

A sink whose default ``commit_concurrency`` is above 1 (S3: several driver threads commit its
committables) is restored twice per round, each time from a fresh preparation: with the default
and with ``commit_concurrency = 1`` (one after another, as before 2026-11-22); the order
alternates per round. Reported per connector and mode: restore ms median (min–max) over
``ROUNDS`` rounds, per-transaction ms, and the default's speed-up over one at a time.
``python -m benchmarks.bench_recovery``; Kafka and MinIO from the environment or started here.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import common

TRANSACTIONS = 1_000
ROWS_PER_TXN = 10
ROUNDS = 5
PREPARE_THREADS = 8
BUCKET = "twophase-bench"
TOPIC_PARTITIONS = 4


class _DriverDied(BaseException):
    """Raised at the fault point: like ``SimulatedCrash``, not caught by the runtime's clean-up."""


def _die_after_persist(point: str) -> None:
    if point == "after_persist":
        raise _DriverDied(point)


def _batch(partition: int) -> Any:
    import pyarrow as pa

    keys = [f"{partition}-{i}" for i in range(ROWS_PER_TXN)]
    return pa.record_batch({"key": keys, "value": [f"value-{k}".encode() for k in keys]})


def _prepare(make_sink: Callable[[], Any], job_id: str, chk: Path) -> None:
    from twophase.coordinator.run.epoch import run_epoch
    from twophase.coordinator.run.fanout import EpochPlan, write_subtasks
    from twophase.coordinator.run.runtime import JobRuntime
    from twophase.coordinator.storage import open_storage

    sink = make_sink()
    rt = JobRuntime(job_id, [sink], open_storage(str(chk), job_id), fault=_die_after_persist)
    rt.restore()

    def write(plan: EpochPlan) -> list[Any]:
        # every transaction pre-committed concurrently, as TRANSACTIONS tasks would
        with ThreadPoolExecutor(PREPARE_THREADS) as pool:
            return list(pool.map(lambda p: write_subtasks(plan, p, 0, [_batch(p)])[0], range(TRANSACTIONS)))

    try:
        run_epoch(rt, TRANSACTIONS, write, {"engine": "bench", "batch": 0})
        raise AssertionError("the fault point after_persist was not reached")
    except _DriverDied:
        pass
    rt.abandon()
    sink.close()


def _restore(make_sink: Callable[[], Any], job_id: str, chk: Path, concurrency: int) -> float:
    from twophase.coordinator.run.runtime import JobRuntime
    from twophase.coordinator.storage import open_storage

    sink = make_sink()
    sink.commit_concurrency = concurrency
    rt = JobRuntime(job_id, [sink], open_storage(str(chk), job_id))
    start = time.perf_counter()
    result = rt.restore()
    elapsed = (time.perf_counter() - start) * 1000.0
    assert result.recommitted == TRANSACTIONS, result
    rt.close()
    return elapsed


def _count_committed(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(TOPIC_PARTITIONS)])
        at_end: set[int] = set()
        count = 0
        deadline = time.monotonic() + 120
        while len(at_end) < TOPIC_PARTITIONS and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                err = m.error()
                if err is None:
                    count += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(m.partition() or 0))
                else:
                    raise KafkaException(err)
        return count
    finally:
        consumer.close()


def _modes(default_concurrency: int, round_no: int) -> list[tuple[str, int]]:
    """``(mode, commit_concurrency)`` to run in this round: the sink's default, and one at a time
    when the default differs; the order alternates per round."""
    modes = [("default", default_concurrency)]
    if default_concurrency > 1:
        modes.append(("one_at_a_time", 1))
    return modes if round_no % 2 == 0 else modes[::-1]


def _summary(connector: str, times_ms: dict[str, list[float]], concurrency: int) -> dict[str, Any]:
    """One row per mode, ``<connector> (<mode>)``."""
    out: dict[str, Any] = {}
    for mode, times in times_ms.items():
        med = statistics.median(times)
        row: dict[str, Any] = {
            "transactions": TRANSACTIONS,
            "commit_concurrency": concurrency if mode == "default" else 1,
            "restore_ms": round(med, 1),
            "restore_range_ms": f"{min(times):.1f}–{max(times):.1f}",
            "per_transaction_ms": round(med / TRANSACTIONS, 3),
            "n": len(times),
        }
        if mode == "default" and "one_at_a_time" in times_ms:
            row["speedup_vs_one_at_a_time"] = round(statistics.median(times_ms["one_at_a_time"]) / med, 2)
        out[f"{connector} ({mode})"] = row
    return out


def _kafka(rounds: int, scratch: Path) -> dict[str, Any]:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
    from twophase.integration.services import kafka_service

    times: dict[str, list[float]] = {}
    default = KafkaSink.commit_concurrency
    with kafka_service() as bootstrap:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            for mode, concurrency in (m for r in range(rounds) for m in _modes(default, r)):
                run_id = uuid.uuid4().hex[:8]
                topic = f"bench-recovery-{run_id}"
                admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1)])

                def sink(topic: str = topic, run_id: str = run_id) -> Any:
                    return KafkaSink(
                        "kafka",
                        KafkaSinkConfig(
                            bootstrap_servers=bootstrap,
                            topic=topic,
                            transactional_id_prefix=f"bench-rec-{run_id}",
                            statistics_interval_ms=20,  # preparation speed only (producer id from stats)
                        ),
                    )

                job = f"bench-recovery-kafka-{run_id}"
                _prepare(sink, job, scratch / "kafka")
                times.setdefault(mode, []).append(_restore(sink, job, scratch / "kafka", concurrency))
                committed = _count_committed(bootstrap, topic)
                assert committed == TRANSACTIONS * ROWS_PER_TXN, committed
                admin.delete_topics([topic])
        finally:
            admin.close()
    return _summary("kafka_transactions", times, default)


def _s3(rounds: int, scratch: Path) -> dict[str, Any]:
    from twophase.connectors.s3 import S3Sink
    from twophase.integration.services import s3_service

    times: dict[str, list[float]] = {}
    with s3_service() as endpoint:
        endpoint.ensure_bucket(BUCKET)
        client = endpoint.boto3_client()
        default = S3Sink("probe", endpoint.sink_config(bucket=BUCKET, prefix="probe")).commit_concurrency
        for mode, concurrency in (m for r in range(rounds) for m in _modes(default, r)):
            run_id = uuid.uuid4().hex[:8]
            prefix = f"recovery-{run_id}"

            def sink(prefix: str = prefix) -> Any:
                return S3Sink(
                    "s3",
                    endpoint.sink_config(
                        bucket=BUCKET,
                        prefix=prefix,
                        format="parquet",
                    ),
                )

            job = f"bench-recovery-s3-{run_id}"
            _prepare(sink, job, scratch / "s3")
            uploads = client.list_multipart_uploads(Bucket=BUCKET, MaxUploads=1000)
            pending = [u for u in uploads.get("Uploads", []) if u["Key"].startswith(prefix + "/")]
            assert len(pending) == TRANSACTIONS or uploads.get("IsTruncated"), len(pending)
            times.setdefault(mode, []).append(_restore(sink, job, scratch / "s3", concurrency))
            keys = [
                o["Key"]
                for page in client.get_paginator("list_objects_v2").paginate(
                    Bucket=BUCKET, Prefix=prefix + "/"
                )
                for o in page.get("Contents", [])
            ]
            assert len(keys) == TRANSACTIONS, len(keys)
            left = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
            assert not [u for u in left if u["Key"].startswith(prefix + "/")]
            for i in range(0, len(keys), 1000):
                client.delete_objects(
                    Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
                )
    return _summary("s3_multipart_uploads", times, default)


def run() -> dict[str, Any]:
    """Time ``restore()`` with 1,000 pending Kafka transactions, then 1,000 pending uploads."""
    rounds = common.runs(ROUNDS)
    env = common.machine()
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-recovery-"))
    try:
        results = {**_kafka(rounds, scratch), **_s3(rounds, scratch)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"rows_per_transaction": ROWS_PER_TXN, "rounds": rounds, **env, "restore": results}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
