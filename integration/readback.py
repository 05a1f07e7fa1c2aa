"""Read a Kafka topic back completely, as a verifier: what does a read_committed consumer see?"""

from __future__ import annotations

import uuid
from typing import Literal

import tenacity
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from twophase.sinks.errors import ServiceUnavailableError

Isolation = Literal["read_committed", "read_uncommitted"]


def _consumer(bootstrap: str, isolation: Isolation) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"twophase-readback-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )


def wait_until_stable(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until no partition of ``topic`` has an open transaction or unwritten commit marker.

    ``commit_transaction()`` returns once the coordinator logged the decision; the markers reach
    the partitions a moment later (KIP-98), and until then the last stable offset (LSO) lags the
    high watermark. Stable = LSO equals the high watermark on every partition.

    Raises:
        ServiceUnavailableError: not stable within ``timeout_s`` seconds (e.g. an open transaction).
    """
    committed, uncommitted = _consumer(bootstrap, "read_committed"), _consumer(bootstrap, "read_uncommitted")
    try:
        partitions = sorted(committed.list_topics(topic, timeout=timeout_s).topics[topic].partitions)

        def stable() -> bool:
            for p in partitions:
                tp = TopicPartition(topic, p)
                lso = committed.get_watermark_offsets(tp, timeout=timeout_s)[1]
                if lso != uncommitted.get_watermark_offsets(tp, timeout=timeout_s)[1]:
                    return False
            return True

        waiting = tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout_s),
            wait=tenacity.wait_fixed(0.2),
            retry=tenacity.retry_if_result(lambda done: not done),
            retry_error_callback=lambda state: False,
        )
        if not waiting(stable):
            raise ServiceUnavailableError(f"{topic!r} still has open transactions after {timeout_s:g} s")
    finally:
        committed.close()
        uncommitted.close()


def read_topic(
    bootstrap: str,
    topic: str,
    isolation: Isolation = "read_committed",
    timeout_s: float = 60.0,
    until_stable: bool = False,
) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` visible under ``isolation``, as ``(key, value)`` in partition order.

    Reads each partition from the beginning up to its end offset taken at call time (for
    read_committed the broker stops at the last stable offset, KIP-98), so it returns once caught up:
    records of open transactions are not waited for. Right after ``commit_transaction()`` the commit
    markers may not be written yet; pass ``until_stable=True`` to :func:`wait_until_stable` first.

    Raises:
        ServiceUnavailableError: the end is not reached (or, with ``until_stable``, the topic does not
            become stable) within ``timeout_s`` seconds.
    """
    if until_stable:
        wait_until_stable(bootstrap, topic, timeout_s)
    consumer = _consumer(bootstrap, isolation)
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            raise ServiceUnavailableError(f"topic {topic!r} on {bootstrap}: {metadata.error.str()}")
        partitions = sorted(metadata.partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in partitions}

        def caught_up() -> bool:
            message = consumer.poll(0.5)
            if message is not None:
                error = message.error()
                if error is None:
                    records[int(message.partition() or 0)].append((message.key(), message.value()))
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            return all(tp.offset >= ends[tp.partition] or ends[tp.partition] == 0 for tp in positions)

        waiting = tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout_s),
            retry=tenacity.retry_if_result(lambda done: not done),
            retry_error_callback=lambda state: False,
        )
        if not waiting(caught_up):
            raise ServiceUnavailableError(f"reading {topic!r} did not reach its end within {timeout_s:g} s")
        return [record for p in partitions for record in records[p]]
    finally:
        consumer.close()
