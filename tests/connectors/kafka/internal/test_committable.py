"""KafkaCommittable and its versioned JSON codec (no broker)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.connectors.kafka.internal.committable import CODEC, KafkaCommittable
from twophase.sinks.errors import CommittableDecodeError

committables = st.builds(
    KafkaCommittable,
    transactional_id=st.text(min_size=1, max_size=40),
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    topic_partitions=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(-1, 1000))).map(
        lambda tps: tuple(sorted(set(tps)))
    ),
    record_count=st.integers(1, 2**40),
    checkpoint_id=st.integers(0, 2**40),
    opened_ms=st.none() | st.integers(0, 2**45),
    marker_offset=st.none() | st.integers(0, 2**62),
)


@given(committables)
def test_round_trip(c: KafkaCommittable) -> None:
    assert CODEC.loads(CODEC.dumps(c)) == c
    assert CODEC.from_json(json.loads(json.dumps(CODEC.to_json(c)))) == c


def test_payload_shape_is_versioned_json_without_secrets() -> None:
    c = KafkaCommittable(
        "p-s-0-1", 7, 3, (("t", 0), ("t", 2)), 10, 5, opened_ms=1_700_000_000_000, marker_offset=4_096
    )
    payload = CODEC.to_json(c)
    assert payload == {
        "kind": "kafka.transaction",
        "version": 3,
        "body": {
            "transactional_id": "p-s-0-1",
            "producer_id": 7,
            "producer_epoch": 3,
            "topic_partitions": [["t", 0], ["t", 2]],
            "record_count": 10,
            "checkpoint_id": 5,
            "opened_ms": 1_700_000_000_000,
            "marker_offset": 4_096,
        },
    }


V1_BODY = {
    "transactional_id": "p-s-0-1",
    "producer_id": 7,
    "producer_epoch": 3,
    "topic_partitions": [["t", 0]],
    "record_count": 10,
    "checkpoint_id": 5,
}


@pytest.mark.parametrize(
    ("version", "body", "opened_ms"),
    [
        (1, V1_BODY, None),  # before opened_ms: the log cannot be searched
        (2, {**V1_BODY, "opened_ms": 1_700_000_000_000}, 1_700_000_000_000),  # searched from opened_ms
    ],
)
def test_committables_of_older_versions_still_decode(
    version: int, body: dict[str, object], opened_ms: int | None
) -> None:
    """Checkpoints written by earlier releases stay readable; without ``marker_offset`` a restore
    searches the log as those releases did."""
    c = CODEC.from_json({"kind": "kafka.transaction", "version": version, "body": body})
    assert c == KafkaCommittable("p-s-0-1", 7, 3, (("t", 0),), 10, 5, opened_ms=opened_ms)
    assert c.marker_offset is None


def test_a_marker_search_shows_in_the_repr_but_is_neither_encoded_nor_compared() -> None:
    c = KafkaCommittable("p-s-0-1", 7, 3, (("t", 0),), 10, 5, opened_ms=1, marker_offset=2)
    plain = KafkaCommittable("p-s-0-1", 7, 3, (("t", 0),), 10, 5, opened_ms=1, marker_offset=2)
    c.record_marker_search("stopped at its bound")
    assert repr(c).endswith("marker_offset=2, marker search: stopped at its bound)")
    assert "marker search" not in repr(plain)
    assert c == plain and hash(c) == hash(plain)
    assert CODEC.to_json(c) == CODEC.to_json(plain)


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "s3.upload", "version": 1, "body": {}},
        {"kind": "kafka.transaction", "version": 4, "body": {}},
        {"kind": "kafka.transaction", "version": 1, "body": {"transactional_id": "x"}},
        {
            "kind": "kafka.transaction",
            "version": 1,
            "body": {
                "transactional_id": "x",
                "producer_id": "7",
                "producer_epoch": 0,
                "topic_partitions": [],
                "record_count": 1,
                "checkpoint_id": 1,
            },
        },
    ],
)
def test_bad_payloads_are_refused(payload: dict[str, object]) -> None:
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json(payload)


def test_empty_or_unassigned_transactions_have_no_committable() -> None:
    with pytest.raises(ValueError):
        KafkaCommittable("x", 1, 0, (), 0, 1)
    with pytest.raises(ValueError):
        KafkaCommittable("x", -1, 0, (), 1, 1)


def test_the_sink_measures_records_of_a_committable() -> None:
    from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
    from twophase.sinks.outcome import CommittableSize

    sink = KafkaSink("out", KafkaSinkConfig(bootstrap_servers="127.0.0.1:1", topic="t"))
    c = KafkaCommittable("twophase-j-out-0-1", 7, 0, (("t", 0),), 42, 1)
    assert sink.measure(c) == CommittableSize(records=42, bytes=None)
