"""Bad configuration and input: clear typed errors before anything is committed (real broker)."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from support.kafka.support import create_topic, ongoing_with_prefix, sink_config, unique

from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
from twophase.integration.readback import read_topic
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import ConfigError, RecordError, ServiceUnavailableError

pytestmark = pytest.mark.kafka


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once the socket is closed


def test_unreachable_broker_fails_with_one_clear_line_after_bounded_retries() -> None:
    bootstrap = closed_port()
    config = KafkaSinkConfig(
        bootstrap_servers=bootstrap,
        topic="t",
        connect_attempts=2,
        connect_backoff_ms=100,
        request_timeout_ms=1000,
        init_timeout_ms=1000,
    )
    sink = KafkaSink("out", config)
    with pytest.raises(ServiceUnavailableError) as e:
        sink.check_config()
    message = str(e.value)
    assert "\n" not in message and bootstrap in message and "2 attempts" in message
    # the executor side gives up the same way
    with pytest.raises(ServiceUnavailableError, match="unreachable"):
        sink.begin_transaction(WriterContext("job", "out", 1, 0, 0, 1))


def test_timeout_above_the_brokers_maximum_is_refused(kafka_bootstrap: str) -> None:
    topic = unique("maxto")
    create_topic(kafka_bootstrap, topic)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, "maxto", transaction_timeout_ms=900_001))
    with pytest.raises(ConfigError, match=r"transaction\.max\.timeout\.ms=900000"):
        sink.validate(pa.schema([("key", pa.string()), ("value", pa.binary())]))
    sink.close()


def test_unknown_topic_without_create_topic_is_refused(kafka_bootstrap: str) -> None:
    topic = unique("missing")
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, "missing"))
    with pytest.raises(ConfigError, match=f"topic '{topic}' does not exist"):
        sink.check_config()
    sink.close()
    creating = KafkaSink("out", sink_config(kafka_bootstrap, topic, "missing", create_topic=True))
    creating.check_config()
    creating.close()
    assert read_topic(kafka_bootstrap, topic) == []  # it exists now (and is empty)


def test_oversized_record_names_its_position_and_nothing_is_committed(kafka_bootstrap: str) -> None:
    topic, job = unique("big"), unique("job")
    create_topic(kafka_bootstrap, topic, configs={"max.message.bytes": "10000"})
    config = sink_config(kafka_bootstrap, topic, job)
    sink = KafkaSink("out", config)
    sink.validate(pa.schema([("key", pa.string()), ("value", pa.binary())]))
    assert sink.topic_max_message_bytes == 10000
    txn = sink.begin_transaction(WriterContext(job, "out", 1, 3, 0, 4))
    sink.write(txn, pa.record_batch({"key": ["a"], "value": [b"x" * 100]}))
    batch = pa.record_batch({"key": ["b", "c", "d", "e"], "value": [b"1", b"2", b"3", b"y" * 20_000]})
    with pytest.raises(RecordError, match=r"partition 3 batch 1 row 3 .*20001 bytes"):
        sink.write(txn, batch)
    sink.abort_open(txn)
    sink.close()
    assert ongoing_with_prefix(kafka_bootstrap, config.prefix(job)) == []
    assert read_topic(kafka_bootstrap, topic, "read_committed") == []


def test_oversized_record_is_refused_even_without_start_up_checks(kafka_bootstrap: str) -> None:
    topic, job = unique("big2"), unique("job")
    create_topic(kafka_bootstrap, topic)
    sink = KafkaSink("out", sink_config(kafka_bootstrap, topic, job))  # no check_config: client limit
    txn = sink.begin_transaction(WriterContext(job, "out", 1, 0, 0, 1))
    with pytest.raises(RecordError, match="batch 0 row 1"):
        sink.write(txn, pa.record_batch({"key": ["a", "b"], "value": [b"1", b"z" * 1_100_000]}))
    sink.abort_open(txn)
