"""The one Kafka read-back helper: what does a ``read_committed`` (or ``read_uncommitted``) consumer see?

Every verifier in the project reads Kafka through :func:`read_topic`: the flights job's
verification, the CLI, the connector's and the services' integration tests. It reads each partition
from its beginning up to the end offset taken when the call starts (for ``read_committed`` the last
stable offset, LSO, which the broker holds back at the first open transaction, KIP-98), so it
returns once caught up and never waits for records of open transactions. Every wait is bounded.

Against a secured broker every function takes ``security``: librdkafka settings that log the
consumer in (SASL_SSL, SCRAM, a CA); its consumer groups are named ``GROUP_PREFIX<random>`` (a
reader needs Read on the topic and on that group prefix, nothing else).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

import tenacity
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, TopicPartition

from twophase.sinks.errors import ServiceUnavailableError

Isolation = Literal["read_committed", "read_uncommitted"]

BATCH = 10_000
"""Records fetched per ``consume`` call."""
GROUP_PREFIX = "twophase-readback-"
"""Prefix of the read-back consumers' group ids (never committed to: offsets are assigned)."""
NO_SECURITY: Mapping[str, str] = {}


class KafkaRecord(NamedTuple):
    """One record read back.

    Attributes:
        partition: the partition it was read from.
        offset: its offset there.
        key / value: raw bytes, ``None`` for a null key or value.
        headers: ``[(name, value bytes), ...]`` or ``None`` without headers.
        timestamp_ms: the record's timestamp (ms since the epoch), ``None`` if it has none.
    """

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp_ms: int | None = None


def _timestamp_ms(message: Any) -> int | None:
    """A consumed record's timestamp, ``None`` when the record has none (``TIMESTAMP_NOT_AVAILABLE``)."""
    kind, ms = message.timestamp()
    return None if kind == TIMESTAMP_NOT_AVAILABLE else int(ms)


def _consumer(bootstrap: str, isolation: Isolation, security: Mapping[str, str]) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{GROUP_PREFIX}{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **security,
        }
    )


def _partitions(consumer: Consumer, bootstrap: str, topic: str, timeout_s: float) -> list[int]:
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
    except KafkaException as e:
        raise ServiceUnavailableError(f"Kafka {bootstrap}: cannot read metadata of {topic!r}: {e}") from None
    if metadata.error is not None:
        raise ServiceUnavailableError(f"topic {topic!r} on {bootstrap}: {metadata.error.str()}")
    return sorted(metadata.partitions)


def _watermarks(
    consumer: Consumer, topic: str, partitions: Iterable[int], timeout_s: float
) -> dict[int, tuple[int, int]]:
    # cached=False: ask the broker (ListOffsets with the consumer's isolation level)
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
        for p in partitions
    }


def end_offsets(
    bootstrap: str,
    topic: str,
    isolation: Isolation = "read_committed",
    timeout_s: float = 30.0,
    security: Mapping[str, str] = NO_SECURITY,
) -> dict[int, int]:
    """Per partition, the offset a consumer of ``isolation`` may read up to (ListOffsets latest).

    ``read_uncommitted`` gives the high watermark; ``read_committed`` the last stable offset, which
    an open transaction holds back (KIP-98).

    Raises:
        ServiceUnavailableError: the topic's metadata cannot be read within ``timeout_s`` seconds.
    """
    consumer = _consumer(bootstrap, isolation, security)
    try:
        partitions = _partitions(consumer, bootstrap, topic, timeout_s)
        return {p: high for p, (_low, high) in _watermarks(consumer, topic, partitions, timeout_s).items()}
    finally:
        consumer.close()


def is_stable(bootstrap: str, topic: str, security: Mapping[str, str] = NO_SECURITY) -> bool:
    """True when no open transaction holds ``topic`` back: the LSO equals the high watermark everywhere."""
    return end_offsets(bootstrap, topic, "read_committed", security=security) == end_offsets(
        bootstrap, topic, "read_uncommitted", security=security
    )


def wait_until_stable(
    bootstrap: str, topic: str, timeout_s: float = 60.0, security: Mapping[str, str] = NO_SECURITY
) -> None:
    """Wait until no partition of ``topic`` has an open transaction or an unwritten commit marker.

    ``commit_transaction()`` returns once the coordinator logged the decision; the markers reach
    the partitions a moment later (KIP-98), and until then the LSO lags the high watermark
    (:func:`is_stable`).

    Raises:
        ServiceUnavailableError: not stable within ``timeout_s`` seconds (e.g. an open transaction).
    """
    waiting = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(0.2),
        retry=tenacity.retry_if_result(lambda done: not done),
        retry_error_callback=lambda state: False,
    )
    if not waiting(is_stable, bootstrap, topic, security):
        raise ServiceUnavailableError(
            f"{topic!r} still has open transactions after {timeout_s:g} s: last stable offsets "
            f"{end_offsets(bootstrap, topic, 'read_committed', security=security)}, high watermarks "
            f"{end_offsets(bootstrap, topic, 'read_uncommitted', security=security)}"
        )


def read_topic(
    bootstrap: str,
    topic: str,
    isolation: Isolation = "read_committed",
    timeout_s: float = 60.0,
    until_stable: bool = False,
    security: Mapping[str, str] = NO_SECURITY,
) -> list[KafkaRecord]:
    """Every record of ``topic`` visible under ``isolation``, in partition and offset order.

    Reads each partition from its beginning up to its end offset taken at call time (for
    ``read_committed`` the LSO), in batches of :data:`BATCH` records. Right after
    ``commit_transaction()`` the commit markers may not be written yet; ``until_stable=True``
    first waits for them (:func:`wait_until_stable`). ``security``: the consumer's login
    settings (librdkafka names; hold a password, never logged).

    Raises:
        ServiceUnavailableError: the end is not reached (or, with ``until_stable``, the topic does
            not become stable) within ``timeout_s`` seconds; the message names the offsets.
        KafkaException: a consumer error other than end of partition.
    """
    if until_stable:
        wait_until_stable(bootstrap, topic, timeout_s, security)
    consumer = _consumer(bootstrap, isolation, security)
    try:
        partitions = _partitions(consumer, bootstrap, topic, timeout_s)
        marks = _watermarks(consumer, topic, partitions, timeout_s)
        # a partition whose records all expired (low >= end) has nothing to read
        pending = {p for p, (low, high) in marks.items() if high > max(low, 0)}
        ends = {p: high for p, (_low, high) in marks.items()}
        records: dict[int, list[KafkaRecord]] = {p: [] for p in partitions}
        consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in sorted(pending)])

        def caught_up() -> bool:
            for message in consumer.consume(BATCH, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(error)
                p = int(message.partition() or 0)
                records[p].append(
                    KafkaRecord(
                        p,
                        int(message.offset() or 0),
                        message.key(),
                        message.value(),
                        _headers(message),
                        _timestamp_ms(message),
                    )
                )
            if pending:
                positions = consumer.position([TopicPartition(topic, p) for p in pending])
                pending.difference_update(tp.partition for tp in positions if tp.offset >= ends[tp.partition])
            return not pending

        waiting = tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout_s),
            retry=tenacity.retry_if_result(lambda done: not done),
            retry_error_callback=lambda state: False,
        )
        if not waiting(caught_up):
            raise ServiceUnavailableError(
                f"reading {topic!r} ({isolation}) did not reach the end offsets {ends} within "
                f"{timeout_s:g} s; partitions not caught up: {sorted(pending)}"
            )
        return [record for p in partitions for record in records[p]]
    finally:
        consumer.close()


def key_values(records: Iterable[KafkaRecord]) -> list[tuple[bytes | None, bytes | None]]:
    """``(key, value)`` of each record, in the given order."""
    return [(r.key, r.value) for r in records]


def _headers(message: Any) -> list[tuple[str, bytes]] | None:
    headers = message.headers()
    return None if headers is None else [(str(k), bytes(v or b"")) for k, v in headers]
