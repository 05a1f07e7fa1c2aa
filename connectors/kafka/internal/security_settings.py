"""The Kafka sink's security settings, checked when its configuration is made: pure functions.

The settings are librdkafka's (``security.protocol``, ``sasl.*``, ``ssl.*`` in ``client_config``);
both client paths (librdkafka on the executors, kafka-python's admin client on the driver) must
log in the same way, so only protocols and mechanisms both implement are accepted.
"""

from __future__ import annotations

from collections.abc import Mapping

from twophase.sinks.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's security protocols (``security.protocol``)."""
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
"""SASL mechanisms both librdkafka and kafka-python implement (``sasl.mechanism``)."""
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""Mechanisms that log in with ``sasl.username`` and ``sasl.password``."""


def protocol_of(client_config: Mapping[str, object]) -> str:
    """The configured ``security.protocol``, upper case (``PLAINTEXT`` when unset)."""
    return str(client_config.get("security.protocol", "PLAINTEXT")).upper()


def mechanism_of(client_config: Mapping[str, object]) -> str | None:
    """The configured SASL mechanism (``sasl.mechanism`` or its alias ``sasl.mechanisms``), or ``None``."""
    value = client_config.get("sasl.mechanism", client_config.get("sasl.mechanisms"))
    return None if value is None else str(value).upper()


def check_security_settings(client_config: Mapping[str, object]) -> None:
    """Refuse security settings neither client can use (called when the configuration is made).

    Raises:
        ConfigError: an unknown ``security.protocol`` or SASL mechanism, a mechanism without a
            SASL protocol, or a PLAIN/SCRAM login without ``sasl.username`` / ``sasl.password``.
    """
    protocol = protocol_of(client_config)
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"Kafka sink: security.protocol {protocol!r} is unknown; "
            f"use one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    mechanism = mechanism_of(client_config)
    if mechanism is None:
        if protocol.startswith("SASL_"):
            raise ConfigError(f"Kafka sink: security.protocol {protocol} needs sasl.mechanism")
        return
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            f"Kafka sink: SASL mechanism {mechanism!r} is unknown; use one of {', '.join(SASL_MECHANISMS)}"
        )
    if not protocol.startswith("SASL_"):
        raise ConfigError(
            f"Kafka sink: sasl.mechanism {mechanism} needs security.protocol SASL_SSL or SASL_PLAINTEXT, "
            f"not {protocol}"
        )
    if mechanism == "OAUTHBEARER" and not client_config.get("oauth_cb"):
        raise ConfigError(
            "Kafka sink: SASL OAUTHBEARER needs oauth_cb ('module:function'), the token callback both "
            "clients use (docs/secured-kafka.md)"
        )
    if mechanism in PASSWORD_MECHANISMS:
        missing = [k for k in ("sasl.username", "sasl.password") if not client_config.get(k)]
        if missing:
            raise ConfigError(f"Kafka sink: SASL {mechanism} needs {' and '.join(missing)}")


def principal_of(client_config: Mapping[str, object]) -> str:
    """How a message names this client's principal: ``User:<sasl.username>`` when known."""
    user = client_config.get("sasl.username")
    return f"User:{user}" if user else "this client's principal"
