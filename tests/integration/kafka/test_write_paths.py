"""Column mappings end to end: headers, explicit partitions, per-row topics, JSON values, lineage."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from support.kafka.support import create_topic, sink_config, unique, write_one

from twophase.connectors.kafka import KafkaSink
from twophase.integration.readback import read_topic
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.kafka

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_headers_partitions_topics_json_and_lineage(kafka_bootstrap: str) -> None:
    main, other, job = unique("paths"), unique("paths-other"), unique("job")
    create_topic(kafka_bootstrap, main, partitions=3)
    create_topic(kafka_bootstrap, other, partitions=1)
    config = sink_config(
        kafka_bootstrap,
        main,
        job,
        value_format="json",
        headers_column="headers",
        partition_column="part",
        topic_column="dest",
        lineage_headers=True,
    )
    sink = KafkaSink("out", config)
    sink.validate(
        pa.schema(
            [
                ("key", pa.string()),
                ("value", pa.struct([("n", pa.int64())])),
                ("headers", HEADERS),
                ("part", pa.int32()),
                ("dest", pa.string()),
            ]
        )
    )
    batch = pa.record_batch(
        {
            "key": ["a", "b", None, "d"],
            "value": pa.array([{"n": 1}, {"n": 2}, None, {"n": 4}]),
            "headers": pa.array([[{"key": "h", "value": b"1"}], None, [], None], type=HEADERS),
            "part": pa.array([2, 0, None, None], type=pa.int32()),
            "dest": [None, None, other, main],
        }
    )
    committable = write_one(sink, job, 5, 0, batch)
    assert committable.record_count == 4
    assert {t for t, _ in committable.topic_partitions} == {main, other}
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    sink.close()

    lineage = [("twophase.job", job.encode()), ("twophase.checkpoint", b"5")]
    got = {
        r.key: (r.partition, r.value, r.headers) for r in read_topic(kafka_bootstrap, main, until_stable=True)
    }
    assert got[b"a"] == (2, json.dumps({"n": 1}, separators=(",", ":")).encode(), [("h", b"1"), *lineage])
    assert got[b"b"][0] == 0 and got[b"b"][2] == lineage
    assert got[b"d"][1] == b'{"n":4}'
    [record] = read_topic(kafka_bootstrap, other, until_stable=True)
    key, value, headers = record.key, record.value, record.headers
    assert key is None and value is None and headers == lineage  # a null value is a Kafka null
