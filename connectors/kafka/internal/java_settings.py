"""The Java producer's settings for the Kafka sink's Spark-staged writes (issue #44 item 4): pure
functions.

The sink's ``client_config`` holds librdkafka's settings; the JVM writer's producer is the Java
client (``connectors/kafka/jvm``). Both clients share the transactional protocol, the tuning that
matters (batching, compression, timeouts) and the PLAIN and SCRAM logins over TLS; those are
translated here. What one client has and the other has not (OAUTHBEARER's Python callback,
GSSAPI, client certificates in librdkafka's two PEM files, librdkafka's own knobs) is refused by
name when the configuration is made, so a staged job never starts with settings it would drop.
"""

from __future__ import annotations

from collections.abc import Mapping

from twophase.connectors.kafka.internal import security_settings
from twophase.sinks.errors import ConfigError

# librdkafka's name -> the Java client's, for the producer settings both clients have
_TUNING = {
    "linger.ms": "linger.ms",
    "queue.buffering.max.ms": "linger.ms",
    "batch.size": "batch.size",
    "compression.type": "compression.type",
    "compression.codec": "compression.type",
    "acks": "acks",
    "request.required.acks": "acks",
    "message.max.bytes": "max.request.size",
    "request.timeout.ms": "request.timeout.ms",
    "message.timeout.ms": "delivery.timeout.ms",
    "delivery.timeout.ms": "delivery.timeout.ms",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "max.in.flight.requests.per.connection": "max.in.flight.requests.per.connection",
    "retry.backoff.ms": "retry.backoff.ms",
    "reconnect.backoff.ms": "reconnect.backoff.ms",
    "reconnect.backoff.max.ms": "reconnect.backoff.max.ms",
    "client.id": "client.id",
    "security.protocol": "security.protocol",
}
_SAME_PLACEMENT = ("murmur2_random",)
"""librdkafka partitioners that place keyed records as the Java client does (murmur2)."""
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_HANDLED = frozenset(
    {
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.endpoint.identification.algorithm",
        "partitioner",
    }
)
"""librdkafka settings translated by hand below (security, placement), not by :data:`_TUNING`."""
LIBRDKAFKA_DEFAULTS = {"linger.ms": "5", "batch.size": "1000000"}
"""librdkafka's batching defaults (``linger.ms`` 5, ``batch.size`` 1,000,000 bytes), given to the
Java producer unless ``client_config`` sets them (the Java client's are 0 before Kafka 4.0 and
16 KiB): both paths then batch alike."""
JAVA_REQUEST_TIMEOUT_MS = 30_000
JAVA_DELIVERY_TIMEOUT_MS = 120_000
"""The Java client's defaults, which its ``delivery.timeout.ms`` check reads."""


_MILLISECONDS = frozenset(
    {
        "linger.ms",
        "request.timeout.ms",
        "delivery.timeout.ms",
        "retry.backoff.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
    }
)
"""Java settings in whole milliseconds (librdkafka's may have fractions)."""


def _whole_ms(key: str, value: object) -> int:
    try:
        return int(float(str(value)))
    except ValueError:
        raise ConfigError(f"Kafka sink: client_config {key} must be a number of ms, got {value!r}") from None


def _jaas_quoted(value: object) -> str:
    """A JAAS option value in double quotes (Kafka's ``JaasConfig`` reads backslash escapes)."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_producer_settings(
    bootstrap_servers: str, transaction_timeout_ms: int, settings: Mapping[str, object]
) -> dict[str, str]:
    """The Java producer's settings for a Kafka sink's: its brokers, transaction timeout (ms) and
    idempotence, librdkafka's batching defaults (:data:`LIBRDKAFKA_DEFAULTS`), and its
    ``client_config`` (``settings``) translated: tuning by :data:`_TUNING`, ``ssl.ca.location`` as
    a PEM trust store (KIP-651), PLAIN and SCRAM logins as ``sasl.jaas.config``. Holds secrets:
    never log it.

    Raises:
        ConfigError: a setting the staged path cannot take (OAUTHBEARER and GSSAPI logins, client
            certificates, a partitioner that places keys otherwise, any librdkafka-only setting),
            naming it and ``write_path='python'``, which takes it; a number that is not one; a
            ``delivery.timeout.ms`` the Java client would refuse.
    """
    out = {
        "bootstrap.servers": bootstrap_servers,
        "transaction.timeout.ms": str(transaction_timeout_ms),
        "enable.idempotence": "true",
        "acks": "all",
        **LIBRDKAFKA_DEFAULTS,
    }
    for key, value in settings.items():
        if key in _TUNING:
            out[_TUNING[key]] = str(value).lower() if isinstance(value, bool) else str(value)
            if _TUNING[key] in _MILLISECONDS:  # librdkafka takes fractions of a ms, Java whole ones
                out[_TUNING[key]] = str(_whole_ms(key, value))
        elif key not in _HANDLED:
            raise _refused(key)
    if out["acks"] not in ("all", "-1"):
        raise _refused("acks", f"{out['acks']} (transactions need all)")
    delivery = int(out.get("delivery.timeout.ms", JAVA_DELIVERY_TIMEOUT_MS))
    if delivery < int(out["linger.ms"]) + int(out.get("request.timeout.ms", JAVA_REQUEST_TIMEOUT_MS)):
        raise ConfigError(
            f"Kafka sink: write_path='spark': the Java client needs delivery.timeout.ms ({delivery}; "
            "librdkafka's message.timeout.ms) at least linger.ms + request.timeout.ms; raise it"
        )
    partitioner = settings.get("partitioner")
    if partitioner is not None and partitioner not in _SAME_PLACEMENT:
        raise _refused("partitioner", str(partitioner))
    protocol = security_settings.protocol_of(settings)
    out["security.protocol"] = protocol
    if protocol in ("SSL", "SASL_SSL"):
        if settings.get("ssl.ca.location"):
            out["ssl.truststore.type"] = "PEM"
            out["ssl.truststore.location"] = str(settings["ssl.ca.location"])
        verify = str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower()
        out["ssl.endpoint.identification.algorithm"] = "https" if verify == "https" else ""
    mechanism = security_settings.mechanism_of(settings)
    if mechanism is not None:
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise _refused("sasl.mechanism", mechanism)
        out["sasl.mechanism"] = mechanism
        user, password = settings.get("sasl.username"), settings.get("sasl.password")
        out["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quoted(user)} password={_jaas_quoted(password)};"
        )
    return out


def _refused(key: str, value: str | None = None) -> ConfigError:
    shown = key if value is None else f"{key}={value}"
    return ConfigError(
        f"Kafka sink: write_path='spark' (the JVM writer) cannot take client_config {shown}; "
        "remove it, or use write_path='python'"
    )


def check_formats(key_format: str, value_format: str) -> None:
    """Refuse the formats the JVM writer cannot reproduce: ``json`` (the Python path's
    :mod:`~twophase.sinks.json_codec` encoding).

    Raises:
        ConfigError: ``key_format`` or ``value_format`` is ``json``.
    """
    for name, value in (("key_format", key_format), ("value_format", value_format)):
        if value == "json":
            raise ConfigError(
                f"Kafka sink: write_path='spark' writes binary or string columns; {name}='json' "
                "needs write_path='python' (or a to_json column upstream)"
            )
