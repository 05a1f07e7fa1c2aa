"""A writer in its own process, so commits and crashes cross process boundaries like on Spark.

Usage: ``python -m support.kafka.writer_process <mode> <bootstrap> <topic> <job> <sink>
<checkpoint> <partition> <records> [<attempt>]``

Modes:
- ``precommit``: begin, write, pre-commit through :class:`KafkaSink`; print the committable's
  JSON as ``{"committable": ...}``, then exit normally (the producer is destroyed, the
  transaction stays open).
- ``hang``: begin, write, flush; print ``{"flushed": <transactional id>}``; then sleep until
  killed (the test sends SIGKILL mid-transaction).
- ``raw``: facts 1 and 2 with bare confluent-kafka: ``init_transactions``, read producer id and
  epoch from statistics (``eos``), write, flush, print ``{"transactional_id", "producer_id",
  "producer_epoch", "eos"}``, drop the producer and exit.
"""

from __future__ import annotations

import json
import sys
import time

import tenacity
from confluent_kafka import Producer

from support.kafka.support import rows, sink_config
from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka.internal.committable import CODEC
from twophase.sinks.context import WriterContext


def emit(obj: object) -> None:
    print(json.dumps(obj), flush=True)


def raw(bootstrap: str, topic: str, txn_id: str, n: int) -> None:
    eos: dict[str, object] = {}

    def on_stats(stats_json: str) -> None:
        eos.update(json.loads(stats_json).get("eos", {}))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "statistics.interval.ms": 50,
            "stats_cb": on_stats,
            "transaction.timeout.ms": 120_000,
        }
    )
    producer.init_transactions(60)
    eos.clear()  # only statistics produced after init_transactions count
    waiting = tenacity.Retrying(
        stop=tenacity.stop_after_delay(60),
        retry=tenacity.retry_if_result(lambda assigned: not assigned),
        retry_error_callback=lambda state: False,
    )
    waiting(lambda: (producer.poll(0.05), eos.get("idemp_state") == "Assigned")[1])
    producer.begin_transaction()
    for i in range(n):
        producer.produce(topic, value=f"v-raw-{i}".encode(), key=f"raw-{i}".encode())
    assert producer.flush(60) == 0
    emit(
        {
            "transactional_id": txn_id,
            "producer_id": eos.get("producer_id"),
            "producer_epoch": eos.get("producer_epoch"),
            "eos": eos,
        }
    )
    # returning drops the last reference: the producer is destroyed without commit or abort


def main(argv: list[str]) -> None:
    mode, bootstrap, topic, job, sink_name = argv[:5]
    checkpoint, partition, n = (int(a) for a in argv[5:8])
    attempt = int(argv[8]) if len(argv) > 8 else 0
    if mode == "raw":
        raw(bootstrap, topic, sink_name, n)
        return
    sink = KafkaSink(sink_name, sink_config(bootstrap, topic, job))
    ctx = WriterContext(job, sink_name, checkpoint, partition, attempt, max(partition + 1, 1))
    txn = sink.begin_transaction(ctx)
    sink.write(txn, rows(f"c{checkpoint}-p{partition}-a{attempt}", n))
    if mode == "precommit":
        committable = sink.pre_commit(txn)
        assert committable is not None
        emit({"committable": CODEC.to_json(committable)})
        return
    if mode == "hang":
        producer = txn._live()
        assert producer.flush(60) == 0
        emit({"flushed": txn.transactional_id})
        while True:
            time.sleep(1)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
