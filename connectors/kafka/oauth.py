"""SASL/OAUTHBEARER (KIP-255) on both of the sink's client paths, from one token callback.

The callback is named in ``client_config`` by ``oauth_cb`` as ``"module:function"`` (a string,
so the configuration stays picklable for executors and settable as a ``.format("twophase")``
option). It is confluent-kafka's ``oauth_cb`` contract: called with the value of
``sasl.oauthbearer.config`` (``""`` when unset), it returns ``(token, expiry)`` with ``expiry``
in seconds since the epoch. librdkafka calls it to log in and again before the token expires;
the kafka-python admin client calls it through :class:`CallbackTokenProvider` on each login.

:func:`unsecured_jws` makes the unsigned (``alg: none``) tokens that Kafka's default OAUTHBEARER
validator accepts (``OAuthBearerUnsecuredValidatorCallbackHandler``), the setup Kafka's own tests
use: for tests and development only, never against a production listener.

Tokens are secrets: nothing here logs one, and the configuration holds only the callback's name.
"""

from __future__ import annotations

import base64
import importlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from twophase.sinks.errors import ConfigError

OAUTH_CB = "oauth_cb"
"""The ``client_config`` key naming the token callback (``"module:function"``)."""
OAUTH_CONFIG = "sasl.oauthbearer.config"
"""librdkafka's setting whose value is passed to the callback."""

TokenCallback = Callable[[str], tuple[str, float]]
"""``(sasl.oauthbearer.config) -> (token, expiry in seconds since the epoch)``."""


def load_callback(spec: str) -> TokenCallback:
    """The function ``"module:function"`` names.

    Raises:
        ConfigError: not of that form, the module cannot be imported, or the name is not callable.
    """
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"Kafka sink: {OAUTH_CB} {spec!r} is not 'module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"Kafka sink: {OAUTH_CB} {spec!r} cannot be loaded: {type(e).__name__}: {e}"
        ) from None
    if not callable(obj):
        raise ConfigError(f"Kafka sink: {OAUTH_CB} {spec!r} is not callable")
    callback: TokenCallback = obj
    return callback


class CallbackTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """kafka-python's token provider (``sasl_oauth_token_provider``) over a token callback.

    Args:
        callback: see :data:`TokenCallback`.
        oauth_config: passed to ``callback`` (the ``sasl.oauthbearer.config`` value).
    """

    def __init__(self, callback: TokenCallback, oauth_config: str) -> None:
        self._callback = callback
        self._config = oauth_config

    def token(self) -> str:
        """A fresh token (kafka-python asks on each login)."""
        return self._callback(self._config)[0]

    def __repr__(self) -> str:
        return f"CallbackTokenProvider({getattr(self._callback, '__qualname__', '?')})"


def librdkafka_settings(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """``client_config`` for confluent-kafka: ``oauth_cb`` loaded into the function it names."""
    conf = dict(client_config)
    if OAUTH_CB in conf:
        conf[OAUTH_CB] = load_callback(str(conf[OAUTH_CB]))
    return conf


def kafka_python_settings(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python keywords for ``oauth_cb``: ``sasl_oauth_token_provider`` (empty without it)."""
    if OAUTH_CB not in client_config:
        return {}
    callback = load_callback(str(client_config[OAUTH_CB]))
    return {
        "sasl_oauth_token_provider": CallbackTokenProvider(callback, str(client_config.get(OAUTH_CONFIG, "")))
    }


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def unsecured_jws(oauth_config: str) -> tuple[str, float]:
    """An unsigned JWS (``alg: none``) for Kafka's unsecured OAUTHBEARER validator (tests only).

    Args:
        oauth_config: space-separated ``key=value`` pairs: ``principal`` (required; the token's
            ``sub``), ``lifetime_s`` (default 3600), ``scope`` (optional, space-free).

    Returns:
        ``(token, expiry in seconds since the epoch)``.

    Raises:
        ConfigError: no ``principal``.
    """
    settings = dict(pair.split("=", 1) for pair in oauth_config.split() if "=" in pair)
    if not settings.get("principal"):
        raise ConfigError(f"Kafka sink: {OAUTH_CONFIG} needs principal=<name> for unsecured_jws")
    now = time.time()
    expiry = now + float(settings.get("lifetime_s", 3600))
    claims: dict[str, Any] = {"sub": settings["principal"], "iat": int(now), "exp": int(expiry)}
    if "scope" in settings:
        claims["scope"] = settings["scope"]
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}.", expiry
