"""OAUTHBEARER settings (no broker): one ``oauth_cb`` callback reaches both clients, the unsecured
JWS tokens are what Kafka's unsecured validator reads, and the configuration keeps only the
callback's name (picklable, settable as a ``.format("twophase")`` option, no token in a repr)."""

from __future__ import annotations

import base64
import json
import pickle
import time
from typing import Any

import pytest

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.oauth import CallbackTokenProvider, load_callback, unsecured_jws
from twophase.coordinator.spark.default_source import sink_from_options
from twophase.sinks.errors import ConfigError

CALLBACK = "twophase.connectors.kafka.oauth:unsecured_jws"
OAUTH = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "OAUTHBEARER",
    "oauth_cb": CALLBACK,
    "sasl.oauthbearer.config": "principal=orders-sink lifetime_s=60",
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def _claims(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, claims, signature = token.split(".")

    def decode(part: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        return data

    return decode(header), decode(claims), signature


def test_unsecured_jws_is_an_unsigned_token_for_the_principal() -> None:
    token, expiry = unsecured_jws("principal=orders-sink lifetime_s=60 scope=write")
    header, claims, signature = _claims(token)
    assert header == {"alg": "none"} and signature == ""
    assert claims["sub"] == "orders-sink" and claims["scope"] == "write"
    assert claims["exp"] == int(expiry) and 55 < expiry - time.time() <= 60


def test_unsecured_jws_needs_a_principal() -> None:
    with pytest.raises(ConfigError, match="principal"):
        unsecured_jws("")


def test_the_callback_reaches_both_clients() -> None:
    config = KafkaSinkConfig(bootstrap_servers="broker:9093", topic="t", client_config=OAUTH)
    producer = config.producer_config("p-t-0-1")
    assert producer["oauth_cb"] is unsecured_jws
    assert producer["sasl.oauthbearer.config"] == OAUTH["sasl.oauthbearer.config"]
    admin = config.admin_config()
    provider = admin["sasl_oauth_token_provider"]
    assert isinstance(provider, CallbackTokenProvider)
    assert _claims(provider.token())[1]["sub"] == "orders-sink"
    assert admin["sasl_mechanism"] == "OAUTHBEARER" and "sasl.oauthbearer.config" not in admin


def test_the_configuration_keeps_the_name_only() -> None:
    config = KafkaSinkConfig(bootstrap_servers="broker:9093", topic="t", client_config=OAUTH)
    assert pickle.loads(pickle.dumps(config)) == config
    assert "principal=orders-sink" not in repr(config)  # sasl.oauthbearer.config is masked
    assert CALLBACK in repr(config)


def test_format_twophase_takes_the_callback_as_an_option() -> None:
    options = {
        "sink": "kafka",
        "bootstrap_servers": "broker:9093",
        "topic": "t",
        **{f"kafka.{k}": v for k, v in OAUTH.items()},
    }
    sink: Any = sink_from_options(options)
    assert sink.config.client_config["oauth_cb"] == CALLBACK


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no-colon", "is not 'module:function'"),
        ("json:nothing_here", "cannot be loaded"),
        ("json:__doc__", "not callable"),
    ],
)
def test_bad_callbacks_are_refused(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_callback(spec)
