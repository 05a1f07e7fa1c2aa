"""The Java producer's settings of the Kafka sink's Spark-staged writes, from librdkafka's."""

from __future__ import annotations

import pytest

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.internal.java_settings import check_formats, java_producer_settings
from twophase.sinks.errors import ConfigError


def settings(**client_config: object) -> dict[str, str]:
    return java_producer_settings("b:9092", 600_000, client_config)


def test_defaults_are_the_transactional_producer_s_with_librdkafka_s_batching() -> None:
    assert settings() == {
        "bootstrap.servers": "b:9092",
        "transaction.timeout.ms": "600000",
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": "5",
        "batch.size": "1000000",
        "security.protocol": "PLAINTEXT",
    }


def test_tuning_is_translated_to_the_java_names() -> None:
    out = settings(
        **{"queue.buffering.max.ms": 20.5, "compression.codec": "lz4", "message.max.bytes": 2_000_000}
    )
    assert (out["linger.ms"], out["compression.type"], out["max.request.size"]) == ("20", "lz4", "2000000")


def test_scram_over_tls_becomes_a_jaas_login_and_a_pem_trust_store() -> None:
    out = settings(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "orders",
            "sasl.password": 'p"w\\d',
            "ssl.ca.location": "/etc/kafka/ca.pem",
        }
    )
    login = "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert out["sasl.jaas.config"] == f'{login} required username="orders" password="p\\"w\\\\d";'
    assert (out["ssl.truststore.type"], out["ssl.truststore.location"]) == ("PEM", "/etc/kafka/ca.pem")
    assert out["ssl.endpoint.identification.algorithm"] == "https"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("oauth_cb", "m:f"),
        ("ssl.certificate.location", "/c.pem"),
        ("sasl.kerberos.service.name", "kafka"),
        ("queue.buffering.max.messages", 10),
        ("partitioner", "consistent_random"),
        ("acks", 1),
    ],
)
def test_what_the_java_client_cannot_take_is_refused_by_name(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"cannot take client_config {key}.*write_path='python'"):
        settings(**{key: value})


def test_a_delivery_timeout_the_java_client_would_refuse_is_refused_first() -> None:
    with pytest.raises(ConfigError, match=r"delivery\.timeout\.ms"):
        settings(**{"message.timeout.ms": 1_000})


def test_json_formats_are_refused() -> None:
    check_formats("auto", "bytes")
    with pytest.raises(ConfigError, match="value_format='json'"):
        check_formats("auto", "json")


def test_the_config_refuses_a_staged_sink_it_could_not_run() -> None:
    with pytest.raises(ConfigError, match="oauth_cb"):
        KafkaSinkConfig(
            bootstrap_servers="b:9092",
            topic="t",
            write_path="spark",
            client_config={
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": "m:f",
            },
        )
    with pytest.raises(ConfigError, match="write_path must be one of"):
        KafkaSinkConfig(bootstrap_servers="b:9092", topic="t", write_path="jvm")
    assert KafkaSinkConfig(bootstrap_servers="b:9092", topic="t", write_path="spark").write_path == "spark"
