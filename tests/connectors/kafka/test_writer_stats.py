"""Reading the producer id/epoch and partitions from librdkafka statistics; delivery errors kept."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import KafkaError

from twophase.connectors.kafka.internal.producer_callbacks import ProducerErrors, ProducerStatistics


def stats(eos: dict[str, Any], topics: dict[str, Any] | None = None) -> str:
    return json.dumps({"name": "rdkafka#producer-1", "type": "producer", "eos": eos, "topics": topics or {}})


def test_producer_id_only_once_assigned() -> None:
    s = ProducerStatistics()
    s(stats({"idemp_state": "WaitPID", "producer_id": -1, "producer_epoch": -1}))
    assert s.producer_id_and_epoch() is None
    s(stats({"idemp_state": "Assigned", "txn_state": "Ready", "producer_id": 42, "producer_epoch": 3}))
    assert s.producer_id_and_epoch() == (42, 3) and s.emitted == 2


def test_partitions_with_transmitted_messages() -> None:
    s = ProducerStatistics()
    topics = {
        "t": {
            "partitions": {"0": {"txmsgs": 5}, "1": {"txmsgs": 0}, "-1": {"txmsgs": 0}, "2": {"txmsgs": 1}}
        },
        "u": {"partitions": {"0": {"txmsgs": 3}}},
    }
    s(stats({"idemp_state": "Assigned", "producer_id": 1, "producer_epoch": 0}, topics))
    assert s.partitions == {("t", 0), ("t", 2), ("u", 0)}


def test_statistics_are_parsed_only_when_read() -> None:
    s = ProducerStatistics()
    for _ in range(3):
        s("not json: never parsed, only kept until the next one")
    s(stats({"idemp_state": "Assigned", "producer_id": 7, "producer_epoch": 1}))
    assert s.emitted == 4 and s.producer_id_and_epoch() == (7, 1)


class Msg:
    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 1


def test_delivery_errors_are_counted_never_dropped() -> None:
    e = ProducerErrors()
    e.on_delivery(None, Msg())
    assert e.count == 0
    for _ in range(25):
        e.on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), Msg())
    assert e.count == 25 and len(e.messages) == 10 and not e.size_too_large
    e.on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Msg())
    assert e.size_too_large
    e.on_error(KafkaError(KafkaError._TRANSPORT))  # transient: logged only
    assert e.count == 26
    e.on_error(KafkaError(KafkaError._FENCED, fatal=True))
    assert e.count == 27 and e.messages[-1].startswith("fatal")
