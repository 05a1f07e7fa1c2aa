"""Benchmark: what opening a Kafka transaction costs, the fixed cost every subtask pays every epoch.

Against one native broker (or ``TWOPHASE_KAFKA_BOOTSTRAP``), each a fresh transactional id:

- ``librdkafka/<variant>``: a bare confluent-kafka ``Producer`` from creation to the end of
  ``init_transactions``, as librdkafka does it: ``default`` (nothing first, librdkafka's
  ``reconnect.backoff.ms`` of 100), ``metadata_once`` (one ``list_topics`` first),
  ``backoff_10`` (``reconnect.backoff.ms=10``), ``metadata_once_backoff_10`` and
  ``metadata_twice_backoff_10`` (what the writer does since 2026-12-05);
- ``writer``: the Kafka sink's own :class:`~twophase.connectors.kafka.internal.writer.KafkaTransaction`
  as it ships: ``open`` (producer, metadata, ``init_transactions``, the producer id from
  statistics, ``begin_transaction``), ``write`` of 100 records, ``pre_commit`` (flush, statistics
  twice, the end offset). Its transactions stay open (nothing commits them; the ids are never used again).

Reported per variant: median, mean, p90 and max in ms, and how many opens took over 300 ms
(librdkafka's coordinator timer is 500 ms). ``TWOPHASE_BENCH_RUNS`` opens per variant (default
60), interleaved round by round so that the broker's state is the same for each.

``python -m benchmarks.bench_kafka_open``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks import common

OPENS = 60
TOPIC_PREFIX = "bench-open"
"""Each run creates its own topic ``bench-open-<run id>``, so that a reused broker
(``TWOPHASE_KAFKA_BOOTSTRAP``, ``twophase services up``) takes a second run."""
SLOW_MS = 300.0

VARIANTS: dict[str, tuple[int, dict[str, Any]]] = {
    "default": (0, {}),
    "metadata_once": (1, {}),
    "backoff_10": (0, {"reconnect.backoff.ms": 10}),
    "metadata_once_backoff_10": (1, {"reconnect.backoff.ms": 10}),
    "metadata_twice_backoff_10": (2, {"reconnect.backoff.ms": 10}),
}
"""librdkafka variant → (``list_topics`` calls before ``init_transactions``, extra settings)."""


def figures(ms: list[float]) -> dict[str, float | int]:
    """Median, mean, p90, max (ms, 1 decimal) and the count above :data:`SLOW_MS`."""
    ordered = sorted(ms)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "mean_ms": round(statistics.mean(ms), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max_ms": round(ordered[-1], 1),
        "over_300_ms": sum(1 for x in ms if x > SLOW_MS),
    }


def bare_open(
    bootstrap: str, topic: str, run: str, metadata: int, extra: dict[str, Any]
) -> Callable[[int], float]:
    """One bare producer's creation and ``init_transactions`` (``metadata`` requests for ``topic``
    first), ms, for round ``i``."""
    from confluent_kafka import Producer

    def once(i: int) -> float:
        conf = {"bootstrap.servers": bootstrap, "transactional.id": f"{run}-{i}", **extra}
        start = time.perf_counter()
        producer = Producer(conf)
        for _ in range(metadata):
            producer.list_topics(topic, timeout=10)
        producer.init_transactions(30)
        took = (time.perf_counter() - start) * 1000
        del producer
        return took

    return once


def run() -> dict[str, Any]:
    """Measure every variant; see the module docstring."""
    import pyarrow as pa
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from twophase.connectors.kafka import KafkaSinkConfig
    from twophase.connectors.kafka.internal.clients import ConfluentClients
    from twophase.connectors.kafka.internal.writer import KafkaTransaction
    from twophase.integration.services import kafka_service
    from twophase.sinks.context import WriterContext

    env = common.machine()
    opens = common.runs(OPENS)
    batch = pa.record_batch({"key": [f"k{i}" for i in range(100)], "value": ["v" * 100] * 100})
    with kafka_service() as bootstrap:
        run_id = uuid.uuid4().hex[:8]
        topic = f"{TOPIC_PREFIX}-{run_id}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the topic exists
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result()
        bare = {
            name: bare_open(bootstrap, topic, f"{run_id}-{name}", m, x) for name, (m, x) in VARIANTS.items()
        }
        config = KafkaSinkConfig(bootstrap_servers=bootstrap, topic=topic)
        clients = ConfluentClients()
        times: dict[str, list[float]] = {f"librdkafka/{name}": [] for name in bare}
        times.update({"writer/open": [], "writer/write": [], "writer/pre_commit": []})
        for i in range(-1, opens):  # round -1 warms every path up, uncounted
            for name, once in bare.items():
                took = once(i)
                if i >= 0:
                    times[f"librdkafka/{name}"].append(took)
            ctx = WriterContext(
                job_id=f"{run_id}-{i + 1}",
                sink_name="kafka",
                checkpoint_id=1,
                partition=0,
                attempt=0,
                num_partitions=1,
            )
            t0 = time.perf_counter()
            txn = KafkaTransaction.open(config, ctx, None, clients.producer, clients.end_offsets)
            t1 = time.perf_counter()
            txn.write(batch)
            t2 = time.perf_counter()
            txn.pre_commit()
            t3 = time.perf_counter()
            if i >= 0:
                times["writer/open"].append((t1 - t0) * 1000)
                times["writer/write"].append((t2 - t1) * 1000)
                times["writer/pre_commit"].append((t3 - t2) * 1000)
    import confluent_kafka

    return {
        **env,
        "librdkafka": confluent_kafka.libversion()[0],
        "confluent_kafka": confluent_kafka.__version__,
        "opens_per_variant": opens,
        "load_1m_at_end": round(os.getloadavg()[0], 2),
        "results": {name: figures(ms) for name, ms in times.items()},
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
