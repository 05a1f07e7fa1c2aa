"""Secured Kafka: checking the security settings, and turning the brokers' refusals into one line.

The sink's security settings are librdkafka's (``security.protocol``, ``sasl.*``, ``ssl.*`` in
``client_config``); :func:`~twophase.connectors.kafka.config.admin_security_config` translates
them for the kafka-python admin client. Both client paths must log in the same way, so:

- :func:`~twophase.connectors.kafka.internal.security_settings.check_security_settings` refuses, when the
  configuration is made, a security protocol or SASL mechanism neither client knows, and a
  PLAIN/SCRAM login without user or password;
- :func:`preflight` logs in once with librdkafka on the driver before the admin client connects:
  kafka-python reports a refused login or TLS handshake only as a bootstrap timeout, while
  librdkafka's ``error_cb`` says what happened (``_AUTHENTICATION``, ``_SSL``);
- :func:`denied` words a missing ACL (an ``*_AUTHORIZATION_FAILED`` answer, KIP-801's
  ``StandardAuthorizer``) as the principal, the operation and the resource.

No message here carries a password or token: librdkafka's reasons name the mechanism and the
listener only, and the user name is not a secret.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import tenacity
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from twophase.connectors.kafka import oauth
from twophase.connectors.kafka.errors import KafkaAuthenticationError, KafkaAuthorizationError
from twophase.connectors.kafka.internal.security_settings import mechanism_of, principal_of, protocol_of

if TYPE_CHECKING:
    from twophase.connectors.kafka.config import ConfigValue, KafkaSinkConfig

log = logging.getLogger(__name__)

SECURITY_ERRORS = (KafkaError._AUTHENTICATION, KafkaError._SSL)
"""librdkafka ``error_cb`` codes that mean the listener refused this client (never retried)."""
PROBE_ATTEMPT_S = 0.5
"""One Metadata attempt of :func:`preflight` (s); attempts go on until ``request_timeout_ms``."""

_BROKER_PREFIX = re.compile(r"^\S+://\S+?: ")
_AFTER_SUFFIX = re.compile(r"\s*\(after \d+ms in state \w+\)\s*$")


def listener_of(config: KafkaSinkConfig) -> str:
    """How a message names the listener: ``SASL_SSL listener 127.0.0.1:9093``."""
    return f"{protocol_of(config.client_config)} listener {config.bootstrap_servers}"


def login_of(client_config: Mapping[str, ConfigValue]) -> str:
    """How a message names the login: ``SCRAM-SHA-512 login of user 'sink'``, or the TLS handshake."""
    mechanism = mechanism_of(client_config)
    if mechanism is None:
        return "the TLS handshake"
    user = client_config.get("sasl.username")
    return f"{mechanism} login" + (f" of user {user!r}" if user else "")


def refusal(config: KafkaSinkConfig, sink: str | None, error: KafkaError) -> KafkaAuthenticationError:
    """The one-line error for a librdkafka ``_AUTHENTICATION`` / ``_SSL`` / invalid-setting error.

    The reason is librdkafka's (the broker prefix and timing removed); the hint names the
    setting to change.
    """
    reason = _AFTER_SUFFIX.sub("", _BROKER_PREFIX.sub("", error.str()))
    tls = error.code() == KafkaError._SSL
    if tls or "ssl." in reason:
        hint = "set ssl.ca.location to the CA that signed the broker's certificate"
    elif "mechanism" in reason.lower() and "unsupported" in reason.lower():
        hint = "set sasl.mechanism to one the listener takes"
    elif mechanism_of(config.client_config) == "OAUTHBEARER":
        hint = "check the OAUTHBEARER token (its lifetime, subject and the listener's validator)"
    else:
        hint = "check sasl.username and sasl.password"
    what = "the TLS handshake" if tls else login_of(config.client_config)
    return KafkaAuthenticationError(
        f"{_who(sink)}: the {listener_of(config)} refused {what}: {reason}; {hint}"
    )


def denied(
    config: KafkaSinkConfig, sink: str | None, operation: str, resource: str, call: str
) -> KafkaAuthorizationError:
    """The one-line error for an ACL the brokers found missing.

    Args:
        operation: Kafka's ACL operation, e.g. ``Write``.
        resource: the resource, e.g. ``Topic 'orders'`` or ``TransactionalId 'job-out-0-1'``.
        call: the request that was denied and the ACL that grants it, for the message.
    """
    return KafkaAuthorizationError(
        f"{_who(sink)}: {principal_of(config.client_config)} is denied {operation} on {resource} "
        f"({call}); add the ACL (docs/secured-kafka.md)"
    )


def _who(sink: str | None) -> str:
    return "Kafka" if sink is None else f"Kafka sink {sink!r}"


class _Errors:
    def __init__(self) -> None:
        self.security: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() in SECURITY_ERRORS and self.security is None:
            self.security = error


class _DebugLog:
    def log(self, level: int, msg: str, *args: object) -> None:
        log.debug("rdkafka: " + msg, *args)


def preflight(config: KafkaSinkConfig, sink: str | None = None) -> None:
    """Log in once with librdkafka and the sink's own security settings (driver side).

    Runs only for ``SSL`` and ``SASL_*`` protocols: a Metadata request every
    :data:`PROBE_ATTEMPT_S` seconds until one is answered, the listener refuses this client, or
    ``request_timeout_ms`` has passed. Unreachable brokers are left for the caller to report (the
    admin client's retries and ServiceUnavailableError).

    Raises:
        KafkaAuthenticationError: the listener refused the login or the TLS handshake, or the
            settings cannot make a client (an unreadable ``ssl.ca.location``, say); one line.
    """
    if protocol_of(config.client_config) == "PLAINTEXT":
        return
    errors = _Errors()
    conf: dict[str, Any] = oauth.librdkafka_settings(
        {
            k: v
            for k, v in config.client_config.items()
            if k.startswith(("security.", "sasl.", "ssl.")) or k in ("client.id", oauth.OAUTH_CB)
        }
    )
    conf.update({"bootstrap.servers": config.bootstrap_servers, "error_cb": errors, "logger": _DebugLog()})
    try:
        client = AdminClient(conf)
    except KafkaException as e:
        raise refusal(config, sink, e.args[0]) from None

    await_login(client, lambda: errors.security, config, sink)


def await_login(
    client: Any, security_error: Callable[[], KafkaError | None], config: KafkaSinkConfig, sink: str | None
) -> None:
    """Ask ``client`` (a confluent-kafka Producer or AdminClient) for metadata every
    :data:`PROBE_ATTEMPT_S` seconds, serving its callbacks in between, until it is answered,
    ``security_error()`` reports a refusal, or ``request_timeout_ms`` has passed (then return:
    unreachable brokers are the caller's to report).

    Raises:
        KafkaAuthenticationError: ``security_error()`` gave the listener's refusal.
    """

    def answered() -> bool:
        try:  # the sink's own topic only: all topics' metadata can be large
            client.list_topics(config.topic, timeout=PROBE_ATTEMPT_S)
            return True
        except KafkaException:
            client.poll(0)  # serves error_cb
            error = security_error()
            if error is not None:
                raise refusal(config, sink, error) from None
            return False

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(config.request_timeout_ms / 1000.0),
        retry=tenacity.retry_if_result(lambda ok: not ok),
        retry_error_callback=lambda state: False,
    )
    retrying(answered)
