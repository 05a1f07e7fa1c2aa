"""Secured-Kafka settings and refusal messages (no broker): what is refused when the configuration
is made, how a listener's refusal and a missing ACL read (one line, no secret), and that
kafka-python's request logs never carry a SASL password."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.errors import KafkaAuthenticationError, KafkaAuthorizationError
from twophase.connectors.kafka.internal.producer_callbacks import ProducerErrors
from twophase.connectors.kafka.internal.security import (
    denied,
    listener_of,
    login_of,
    preflight,
    refusal,
)
from twophase.connectors.kafka.internal.security_settings import check_security_settings
from twophase.sinks.errors import ConfigError

PASSWORD = "s3cr3t-never-shown"
SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "sink",
    "sasl.password": PASSWORD,
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def config(client_config: dict[str, Any]) -> KafkaSinkConfig:
    return KafkaSinkConfig(bootstrap_servers="broker:9093", topic="t", client_config=client_config)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"security.protocol": "SASL_TLS"}, "security.protocol 'SASL_TLS' is unknown"),
        ({**SCRAM, "sasl.mechanism": "SCRAM-SHA-1024"}, "SASL mechanism 'SCRAM-SHA-1024' is unknown"),
        ({"security.protocol": "SASL_SSL"}, "SASL_SSL needs sasl.mechanism"),
        ({"security.protocol": "SSL", "sasl.mechanism": "PLAIN"}, "needs security.protocol SASL_SSL"),
        ({k: v for k, v in SCRAM.items() if k != "sasl.password"}, "SCRAM-SHA-512 needs sasl.password"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER needs oauth_cb"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "oauth_cb": "nowhere:token"},
            "oauth_cb 'nowhere:token' cannot be loaded",
        ),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanisms": "plain"},
            "PLAIN needs sasl.username and sasl.password",
        ),
    ],
)
def test_unusable_security_settings_are_refused_when_configured(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config(settings)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"security.protocol": "ssl", "ssl.ca.location": "/ca.pem"},
        SCRAM,
        {**SCRAM, "sasl.mechanism": "PLAIN", "security.protocol": "SASL_PLAINTEXT"},
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": "twophase.connectors.kafka.oauth:unsecured_jws",
        },
    ],
)
def test_usable_security_settings_pass(settings: dict[str, Any]) -> None:
    check_security_settings(settings)


def test_a_refused_login_is_one_line_naming_listener_mechanism_and_user() -> None:
    c = config(SCRAM)
    error = KafkaError(
        KafkaError._AUTHENTICATION,
        "sasl_ssl://broker:9093/bootstrap: SASL authentication error: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
        "(after 12ms in state AUTH_REQ)",
    )
    message = str(refusal(c, "out", error))
    assert message == (
        "Kafka sink 'out': the SASL_SSL listener broker:9093 refused SCRAM-SHA-512 login of user 'sink': "
        "SASL authentication error: Authentication failed during authentication due to invalid credentials "
        "with SASL mechanism SCRAM-SHA-512; check sasl.username and sasl.password"
    )
    assert isinstance(refusal(c, "out", error), KafkaAuthenticationError)


def test_a_refused_tls_handshake_names_the_ca_setting() -> None:
    error = KafkaError(
        KafkaError._SSL, "sasl_ssl://broker:9093/bootstrap: SSL handshake failed: certificate verify failed"
    )
    message = str(refusal(config(SCRAM), None, error))
    assert message.startswith(
        "Kafka: the SASL_SSL listener broker:9093 refused the TLS handshake: SSL handshake"
    )
    assert message.endswith("set ssl.ca.location to the CA that signed the broker's certificate")
    assert "\n" not in message and PASSWORD not in message


def test_a_mechanism_the_listener_does_not_take_names_the_setting() -> None:
    error = KafkaError(
        KafkaError._AUTHENTICATION,
        "sasl_ssl://b:1/bootstrap: SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL "
        "mechanism: broker's supported mechanisms: PLAIN",
    )
    assert str(refusal(config({**SCRAM, "sasl.mechanism": "SCRAM-SHA-256"}), "out", error)).endswith(
        "set sasl.mechanism to one the listener takes"
    )


def test_a_missing_acl_names_principal_operation_and_resource() -> None:
    error = denied(config(SCRAM), "out", "Write", "TransactionalId 'p-out-0-1'", "InitProducerId")
    assert isinstance(error, KafkaAuthorizationError) and isinstance(error, ConfigError)
    assert str(error) == (
        "Kafka sink 'out': User:sink is denied Write on TransactionalId 'p-out-0-1' (InitProducerId); "
        "add the ACL (docs/secured-kafka.md)"
    )


def test_names_for_messages() -> None:
    assert listener_of(config(SCRAM)) == "SASL_SSL listener broker:9093"
    assert login_of(SCRAM) == "SCRAM-SHA-512 login of user 'sink'"
    assert login_of({"security.protocol": "SSL"}) == "the TLS handshake"


def test_preflight_is_skipped_for_plaintext() -> None:
    preflight(config({}), "out")  # no broker at broker:9093: nothing is attempted


def test_preflight_refuses_settings_librdkafka_cannot_load(tmp_path: Any) -> None:
    bad = {**SCRAM, "ssl.ca.location": str(tmp_path / "missing-ca.pem")}
    with pytest.raises(KafkaAuthenticationError, match=r"ssl\.ca\.location") as refused:
        preflight(config(bad), "out")
    assert PASSWORD not in str(refused.value) and "\n" not in str(refused.value)


def test_producer_errors_keep_the_first_security_refusal() -> None:
    errors = ProducerErrors()
    first = KafkaError(KafkaError._SSL, "handshake failed")
    errors.on_error(first)
    errors.on_error(KafkaError(KafkaError._AUTHENTICATION, "later"))
    assert errors.security is first


class SaslAuthenticateRequest:
    """Stands in for kafka-python's request class (only its name matters to the filter)."""

    def __repr__(self) -> str:
        return f"SaslAuthenticateRequest(auth_bytes=b'sink\\x00sink\\x00{PASSWORD}')"


def test_kafka_python_request_logs_never_carry_the_password(caplog: pytest.LogCaptureFixture) -> None:
    import twophase.connectors.kafka.internal.admin  # noqa: F401  (installs the filters)

    with caplog.at_level(logging.DEBUG, logger="kafka"):
        logging.getLogger("kafka.net.connection").debug(
            "%s Request %d: %s", "conn", 3, SaslAuthenticateRequest()
        )
        logging.getLogger("kafka.protocol.parser").debug(
            "%s Send: %r", "node", bytearray(b"\x00" + PASSWORD.encode())
        )
    assert PASSWORD not in caplog.text
    assert "SaslAuthenticateRequest(auth_bytes=***)" in caplog.text and "<19 bytes>" in caplog.text


def test_a_denied_add_partitions_in_librdkafkas_log_names_the_topic(caplog: pytest.LogCaptureFixture) -> None:
    from twophase.connectors.kafka.internal.producer_callbacks import ProducerLog

    errors = ProducerErrors()
    logger = ProducerLog(errors)
    with caplog.at_level(logging.INFO, logger="twophase.connectors.kafka.rdkafka"):
        logger.log(
            logging.ERROR,
            "%s [%s] %s",
            "ADDPARTS",
            "rdkafka#producer-1",
            '[thrd:main]: TxnCoordinator/1: Failed to add partition "orders" [0] to transaction: '
            "Broker: Topic authorization failed",
        )
        logger.log(logging.INFO, "%s [%s] %s", "INIT", "rdkafka#producer-1", "ready")
    assert errors.topics_denied == {"orders"}
    assert "Failed to add partition" in caplog.text and "ready" in caplog.text
