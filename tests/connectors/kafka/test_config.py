"""KafkaSinkConfig validation, secret masking and client settings (no broker)."""

from __future__ import annotations

import logging
import pickle

import pytest

from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
from twophase.connectors.kafka.config import admin_security_config, is_secret
from twophase.sinks.errors import ConfigError

SECURE = {
    "security.protocol": "sasl_ssl",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": "hunter2-very-secret",
    "ssl.ca.location": "/etc/ca.pem",
    "ssl.key.password": "key-secret-42",
    "ssl.endpoint.identification.algorithm": "https",
    "linger.ms": 5,
}


def config(**kw: object) -> KafkaSinkConfig:
    base: dict[str, object] = {"bootstrap_servers": "127.0.0.1:9092", "topic": "t"}
    base.update(kw)
    return KafkaSinkConfig(**base)  # type: ignore[arg-type]


def test_defaults_are_valid_and_derive_the_prefix_from_the_job() -> None:
    c = config()
    assert c.pool_size >= c.max_pending_checkpoints + 2
    assert c.prefix("job7") == "twophase-job7"
    assert config(transactional_id_prefix="mine").prefix("job7") == "mine"


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"bootstrap_servers": " "}, "bootstrap_servers"),
        ({"topic": None}, "topic_column"),
        ({"topic": "bad topic!"}, "invalid topic"),
        ({"pool_size": 2, "max_pending_checkpoints": 1}, "pool_size"),
        ({"max_pending_checkpoints": 0}, "max_pending_checkpoints"),
        ({"transaction_timeout_ms": 0}, "transaction_timeout_ms"),
        ({"transaction_timeout_ms": 2**31}, "32-bit"),
        ({"transaction_timeout_ms": 60_000, "max_epoch_ms": 50_000, "max_commit_delay_ms": 20_000}, "below"),
        ({"value_format": "avro"}, "value_format"),
        ({"key_column": "value"}, "mapped twice"),
        ({"new_topic_partitions": 0}, "new_topic_partitions"),
        ({"client_config": {"transactional.id": "x"}}, "sink owns"),
        ({"client_config": {"enable.idempotence": False}}, "sink owns"),
        ({"client_config": {"ssl.keystore.location": "/k.p12"}}, "no kafka-python equivalent"),
        ({"transactional_id_prefix": " "}, "blank"),
        ({"connect_attempts": True}, "connect_attempts"),
        ({"statistics_interval_ms": 5000, "stats_wait_ms": 1000}, "stats_wait_ms"),
    ],
)
def test_bad_values_raise_config_error(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config(**kw)


def test_timeout_must_cover_epoch_plus_commit() -> None:
    config(transaction_timeout_ms=70_000, max_epoch_ms=50_000, max_commit_delay_ms=20_000)
    with pytest.raises(ConfigError, match="max_epoch_ms"):
        config(transaction_timeout_ms=69_999, max_epoch_ms=50_000, max_commit_delay_ms=20_000)


def test_sink_name_must_be_one_token() -> None:
    with pytest.raises(ConfigError, match="sink name"):
        KafkaSink("my-sink", config())
    assert KafkaSink("my_sink.v2", config()).name == "my_sink.v2"


def test_secrets_are_masked_in_reprs_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    c = config(client_config=SECURE)
    sink = KafkaSink("out", c)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("config %s sink %r", c, sink)
    for text in (repr(c), str(c), repr(sink), caplog.text):
        assert "hunter2" not in text
        assert "key-secret" not in text
        assert "alice" in text  # a user name is not a secret
        assert "***" in text


def test_secret_keys() -> None:
    assert is_secret("sasl.password")
    assert is_secret("ssl.key.password")
    assert is_secret("sasl.oauthbearer.client.secret")
    assert is_secret("ssl.certificate.pem")
    assert not is_secret("sasl.username")
    assert not is_secret("linger.ms")


def test_producer_reconnect_backoff_defaults_short_and_yields_to_the_user() -> None:
    # half of it is how long librdkafka holds back a new producer's first connection to a broker
    assert config().producer_config("tid-0")["reconnect.backoff.ms"] == 10
    mine = config(client_config={"reconnect.backoff.ms": 250})
    assert mine.producer_config("tid-0")["reconnect.backoff.ms"] == 250


def test_security_settings_reach_both_clients() -> None:
    c = config(client_config=SECURE)
    producer = c.producer_config("tid-0")
    assert producer["sasl.password"] == "hunter2-very-secret"
    assert producer["transactional.id"] == "tid-0"
    assert producer["transaction.timeout.ms"] == c.transaction_timeout_ms
    assert producer["linger.ms"] == 5
    admin = c.admin_config()
    assert admin["security_protocol"] == "SASL_SSL"
    assert admin["sasl_mechanism"] == "SCRAM-SHA-512"
    assert admin["sasl_plain_username"] == "alice"
    assert admin["sasl_plain_password"] == "hunter2-very-secret"
    assert admin["ssl_cafile"] == "/etc/ca.pem"
    assert admin["ssl_password"] == "key-secret-42"
    assert admin["ssl_check_hostname"] is True
    assert "linger.ms" not in admin and "linger_ms" not in admin
    assert admin_security_config({"ssl.endpoint.identification.algorithm": "none"}) == {
        "ssl_check_hostname": False
    }


def test_config_and_sink_pickle_without_driver_clients() -> None:
    c = config(client_config=SECURE)
    again = pickle.loads(pickle.dumps(c))
    assert again == c and hash(again) == hash(c)
    sink = KafkaSink("out", c)
    sink._admin = object()  # type: ignore[assignment]  # a live client must never travel
    copy = pickle.loads(pickle.dumps(sink))
    assert copy._admin is None and copy.config == c and copy.name == "out"


def test_client_config_is_immutable() -> None:
    c = config(client_config={"linger.ms": 5})
    with pytest.raises(TypeError):
        c.client_config["linger.ms"] = 6  # type: ignore[index]


def test_kafka_python_debug_config_log_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    from twophase.connectors.kafka.internal.admin import (
        RedactSecrets,  # installs the filter on kafka-python's loggers
    )

    assert issubclass(RedactSecrets, logging.Filter)
    with caplog.at_level(logging.DEBUG, logger="kafka.admin.client"):
        logging.getLogger("kafka.admin.client").debug(
            "Starting KafkaAdminClient with configuration: %s",
            config(client_config=SECURE).admin_config(),
        )
    assert "hunter2" not in caplog.text and "key-secret" not in caplog.text
    assert "sasl_plain_password" in caplog.text
