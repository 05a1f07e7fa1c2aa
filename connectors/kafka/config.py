"""The Kafka sink's configuration: a frozen, validated dataclass (secrets masked in its repr).

Security settings are given once, with librdkafka's names, in ``client_config``; they go to the
confluent-kafka producer as they are and to the kafka-python admin client translated by
:func:`admin_security_config`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from twophase.connectors.kafka import oauth
from twophase.connectors.kafka.internal import java_settings, naming
from twophase.connectors.kafka.internal.security_settings import check_security_settings
from twophase.sinks.errors import ConfigError

ConfigValue = str | int | float | bool
Format = Literal["auto", "bytes", "string", "json"]
"""How a key/value column becomes bytes: ``auto`` (binary as is, string as UTF-8), ``bytes``
(binary only), ``string`` (string only, UTF-8), ``json`` (any type, ``json.dumps`` per row)."""

MASK = "***"
WRITE_PATHS = ("python", "spark")
"""The values of :attr:`KafkaSinkConfig.write_path`."""
JAVA_PARTITIONER = "murmur2_random"
"""librdkafka's partitioner for keyed records by default: murmur2 of the key, as the Java clients'
default partitioner and so Spark's Kafka sink place them (random for a null key; KIP-480's sticky
batching is the Java client's own and does not move keys). ``client_config={"partitioner": ...}``
overrides it, e.g. ``consistent_random`` (librdkafka's CRC32 default) for a pipeline that must keep
twophase's placement before 0.2."""
RECONNECT_BACKOFF_MS = 10
"""librdkafka's ``reconnect.backoff.ms`` for the sink's producers unless ``client_config`` sets it
(librdkafka's default: 100). A producer opens every epoch, and librdkafka holds back a new
connection to a broker it has just learned from metadata for half this backoff (its "sparse
connections"), which a new producer's ``init_transactions`` waits out: measured against one
broker, with the metadata awaited first (:meth:`KafkaTransaction.open`), 62 ms to initialise at
100 against 20 ms at 10 (librdkafka 2.16, the median of 24). The backoff still grows
exponentially to ``reconnect.backoff.max.ms`` while a broker stays away."""
_SECRET_KEY = re.compile(r"password|secret|jaas|token|\.pem$|credential|oauthbearer\.config", re.IGNORECASE)

# Settings the sink owns: a user value would break the protocol (ids, statistics, callbacks).
RESERVED_PRODUCER_KEYS = frozenset(
    {
        "bootstrap.servers",
        "transactional.id",
        "transaction.timeout.ms",
        "enable.idempotence",
        "statistics.interval.ms",
        "stats_cb",
        "error_cb",
        "on_delivery",
        "delivery.report.only.error",
        "dr_cb",
        "dr_msg_cb",
    }
)

# librdkafka name -> kafka-python KafkaAdminClient keyword (security and identity only).
_ADMIN_NAME = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "client.id": "client_id",
}


def is_secret(key: str) -> bool:
    """True for settings whose value must never be logged or stored (passwords, keys, tokens)."""
    return bool(_SECRET_KEY.search(key))


class FrozenSettings(Mapping[str, ConfigValue]):
    """An immutable, hashable, picklable ``str -> value`` mapping whose repr masks secrets."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, ConfigValue] | None = None) -> None:
        self._items: tuple[tuple[str, ConfigValue], ...] = tuple(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> ConfigValue:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {MASK if is_secret(k) else repr(v)}" for k, v in self._items) + "}"

    def __getstate__(self) -> tuple[tuple[str, ConfigValue], ...]:
        return self._items

    def __setstate__(self, state: tuple[tuple[str, ConfigValue], ...]) -> None:
        self._items = state


@dataclass(frozen=True, repr=False)
class KafkaSinkConfig:
    """Configuration of :class:`~twophase.connectors.kafka.sink.KafkaSink`.

    Attributes:
        bootstrap_servers: ``host:port[,host:port]``.
        topic: the topic records go to, unless ``topic_column`` names a per-row topic. Required
            when ``topic_column`` is ``None``; checked (or created) at start.
        transactional_id_prefix: the first part of every transactional id; ``None`` means
            ``twophase-<job_id>``. Must be unique per job: lingering-transaction clean-up aborts
            every open transaction under ``<prefix>-<sink>-``.
        pool_size: transactional ids per partition (slot = checkpoint id mod pool_size).
        max_pending_checkpoints: the fewest checkpoints the pool must let await commit while the
            next epoch writes (1 with asynchronous commit). ``pool_size`` must be at least this
            plus 2; the runtime then holds an epoch back only as the pool needs, with
            ``pool_size - 2`` pending (see :mod:`twophase.connectors.kafka.internal.naming`).
        transaction_timeout_ms: librdkafka ``transaction.timeout.ms`` (ms). Must be at least
            ``max_epoch_ms + max_commit_delay_ms`` and at most the broker's
            ``transaction.max.timeout.ms`` (checked at start). The coordinator warns when a
            pending transaction passes 80% of it.
        max_epoch_ms: the longest an epoch is expected to run, from its first record to the
            completed checkpoint (ms).
        max_commit_delay_ms: the longest from a completed checkpoint to its commit, including
            commit retries (ms).
        key_column / value_column: Arrow columns of the record key (``None``: no key) and
            value; binary or string (or anything with ``json`` format).
        key_format / value_format: see :data:`Format`.
        headers_column: optional ``list<struct<key: string, value: binary|string>>`` or
            ``map<string, binary|string>`` column (Spark's Kafka ``headers`` shape).
        partition_column: optional int column with the Kafka partition (null: the partitioner).
        topic_column: optional string column with a per-row topic (null: ``topic``).
        timestamp_column: optional timestamp column (any unit and time zone) with each record's
            timestamp, sent as its CreateTime in ms since the epoch (null: the time of producing;
            a topic with ``message.timestamp.type=LogAppendTime`` replaces it with the broker's).
        lineage_headers: add ``twophase.job`` and ``twophase.checkpoint`` headers to every record.
        create_topic: create ``topic`` at start when it does not exist (otherwise ConfigError).
        new_topic_partitions / new_topic_replication_factor: for ``create_topic`` (-1: broker
            default).
        client_config: extra librdkafka settings for the producer (e.g. ``linger.ms``,
            ``compression.type``) and security settings (``security.protocol``, ``sasl.*``,
            ``ssl.*``), which are also given to the admin client. Secret values are masked in
            the repr and never logged.
        statistics_interval_ms: librdkafka ``statistics.interval.ms`` (ms); statistics are how
            the writer learns its producer id and epoch. It waits for one after opening a
            transaction and for two after the final flush, so this interval is most of a
            transaction's fixed cost; the writer parses statistics only when it reads them.
        stats_wait_ms: how long the writer waits for statistics that carry them (ms).
        init_timeout_ms: timeout of one ``init_transactions`` call (ms).
        connect_attempts: attempts to reach the brokers before ServiceUnavailableError.
        connect_backoff_ms: first backoff between attempts, doubled each time (ms).
        request_timeout_ms: timeout of one admin request and of one bootstrap attempt (ms).
        marker_search_max_bytes: how much of a partition's log a restore reads, at most, looking
            for the COMMIT marker of a transaction the broker forgot whose checkpoint has no
            committed marker (``None``: 4 GiB). It must cover what is appended to one partition
            between a task's pre-commit and its commit: the same epoch's other tasks' records and
            other producers'. A search that stops on it reports LOST, naming it.

    Raises:
        ConfigError: a value is out of range or inconsistent (raised on construction).
    """

    bootstrap_servers: str
    topic: str | None = None
    transactional_id_prefix: str | None = None
    pool_size: int = 4
    max_pending_checkpoints: int = 1
    transaction_timeout_ms: int = 600_000
    max_epoch_ms: int = 300_000
    max_commit_delay_ms: int = 120_000
    key_column: str | None = "key"
    value_column: str = "value"
    key_format: Format = "auto"
    value_format: Format = "auto"
    headers_column: str | None = None
    partition_column: str | None = None
    topic_column: str | None = None
    timestamp_column: str | None = None
    lineage_headers: bool = False
    create_topic: bool = False
    new_topic_partitions: int = -1
    new_topic_replication_factor: int = -1
    client_config: Mapping[str, ConfigValue] = field(default_factory=FrozenSettings)
    statistics_interval_ms: int = 25
    stats_wait_ms: int = 10_000
    init_timeout_ms: int = 60_000
    connect_attempts: int = 4
    connect_backoff_ms: int = 500
    request_timeout_ms: int = 10_000
    marker_search_max_bytes: int | None = None
    write_path: str = "python"

    def __post_init__(self) -> None:
        object.__setattr__(self, "client_config", FrozenSettings(dict(self.client_config)))
        try:
            self._check()
        except ValueError as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"Kafka sink: {e}") from None

    def _check(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("Kafka sink: bootstrap_servers is empty")
        if self.topic is None and self.topic_column is None:
            raise ConfigError("Kafka sink: set topic, or topic_column for a per-row topic")
        if self.topic is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", self.topic):
            raise ConfigError(f"Kafka sink: invalid topic name {self.topic!r}")
        if self.transactional_id_prefix is not None and not self.transactional_id_prefix.strip():
            raise ConfigError("Kafka sink: transactional_id_prefix must not be blank")
        naming.check_pool_size(self.pool_size, self.max_pending_checkpoints)
        for name in (
            "transaction_timeout_ms",
            "max_epoch_ms",
            "max_commit_delay_ms",
            "statistics_interval_ms",
            "stats_wait_ms",
            "init_timeout_ms",
            "connect_attempts",
            "connect_backoff_ms",
            "request_timeout_ms",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"Kafka sink: {name} must be a positive int, got {value!r}")
        if self.marker_search_max_bytes is not None and (
            isinstance(self.marker_search_max_bytes, bool)
            or not isinstance(self.marker_search_max_bytes, int)
            or self.marker_search_max_bytes < 1024 * 1024
        ):
            raise ConfigError(
                f"Kafka sink: marker_search_max_bytes must be an int of at least 1 MiB, "
                f"got {self.marker_search_max_bytes!r}"
            )
        if self.transaction_timeout_ms > 2**31 - 1:
            raise ConfigError("Kafka sink: transaction_timeout_ms exceeds a 32-bit int")
        needed = self.max_epoch_ms + self.max_commit_delay_ms
        if self.transaction_timeout_ms < needed:
            raise ConfigError(
                f"Kafka sink: transaction_timeout_ms={self.transaction_timeout_ms} is below "
                f"max_epoch_ms + max_commit_delay_ms = {needed}; a pending transaction would time "
                "out (and be lost) before it is committed"
            )
        if self.statistics_interval_ms > self.stats_wait_ms:
            raise ConfigError("Kafka sink: stats_wait_ms must be at least statistics_interval_ms")
        formats = get_args(Format)
        for name in ("key_format", "value_format"):
            if getattr(self, name) not in formats:
                raise ConfigError(f"Kafka sink: {name} must be one of {formats}, got {getattr(self, name)!r}")
        columns = self.mapped_columns
        if len(set(columns)) != len(columns):
            raise ConfigError(f"Kafka sink: a column is mapped twice: {columns}")
        for name in ("new_topic_partitions", "new_topic_replication_factor"):
            value = getattr(self, name)
            if value == 0 or value < -1:
                raise ConfigError(f"Kafka sink: {name} must be -1 or positive, got {value}")
        reserved = sorted(RESERVED_PRODUCER_KEYS.intersection(self.client_config))
        if reserved:
            raise ConfigError(f"Kafka sink: client_config may not set {reserved}; the sink owns them")
        check_security_settings(self.client_config)
        admin_security_config(self.client_config)  # raises ConfigError on untranslatable settings
        if self.write_path not in WRITE_PATHS:
            raise ConfigError(
                f"Kafka sink: write_path must be one of {list(WRITE_PATHS)}, got {self.write_path!r}"
            )
        if self.write_path == "spark":
            java_settings.check_formats(self.key_format, self.value_format)
            # raises ConfigError on what the Java client cannot take
            java_settings.java_producer_settings(
                self.bootstrap_servers, self.transaction_timeout_ms, self.client_config
            )

    @property
    def mapped_columns(self) -> tuple[str, ...]:
        """The columns mapped to a record's parts, those set: key, value, headers, partition,
        topic, timestamp."""
        mapped = (
            self.key_column,
            self.value_column,
            self.headers_column,
            self.partition_column,
            self.topic_column,
            self.timestamp_column,
        )
        return tuple(c for c in mapped if c is not None)

    def prefix(self, job_id: str) -> str:
        """The transactional id prefix for ``job_id``."""
        return self.transactional_id_prefix or naming.default_prefix(job_id)

    def producer_config(self, transactional_id: str | None) -> dict[str, Any]:
        """librdkafka settings of a transactional producer (no callbacks but ``oauth_cb``, loaded
        from its name: :mod:`~twophase.connectors.kafka.oauth`). Holds secrets: never log it."""
        # keyed records go where the Java clients (and so Spark's Kafka sink) put them: murmur2,
        # not librdkafka's CRC32 default; a partitioner (or reconnect backoff) in client_config is kept
        conf: dict[str, Any] = {
            "partitioner": JAVA_PARTITIONER,
            "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
            **oauth.librdkafka_settings(self.client_config),
        }
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf["transaction.timeout.ms"] = self.transaction_timeout_ms
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
        return conf

    def admin_config(self) -> dict[str, Any]:
        """kafka-python ``KafkaAdminClient`` keywords (security translated). Holds secrets: never log it."""
        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "request_timeout_ms": self.request_timeout_ms,
            "bootstrap_timeout_ms": self.request_timeout_ms,
        }
        conf.update(admin_security_config(self.client_config))
        return conf

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            parts.append(f"{f.name}={value!r}")
        return f"KafkaSinkConfig({', '.join(parts)})"


def admin_security_config(client_config: Mapping[str, ConfigValue]) -> dict[str, Any]:
    """Translate librdkafka security/identity settings to kafka-python ``KafkaAdminClient`` keywords.

    Non-security settings (``linger.ms``, …) are producer-only and skipped.

    ``oauth_cb`` (with ``sasl.oauthbearer.config``) becomes ``sasl_oauth_token_provider``.

    Raises:
        ConfigError: a ``sasl.*``/``ssl.*`` setting kafka-python cannot take (e.g. keystores),
            since the driver-side commit must authenticate exactly like the producer; an
            ``oauth_cb`` that cannot be loaded.
    """
    out: dict[str, Any] = oauth.kafka_python_settings(client_config)
    for key, value in client_config.items():
        if key in (oauth.OAUTH_CB, oauth.OAUTH_CONFIG):
            continue  # both go to the token provider above
        target = _ADMIN_NAME.get(key)
        if target is None:
            if key.startswith(("sasl.", "ssl.")):
                raise ConfigError(
                    f"Kafka sink: {key!r} has no kafka-python equivalent for the driver-side admin "
                    f"client; supported security settings: {sorted(_ADMIN_NAME)}"
                )
            continue
        if target == "ssl_check_hostname":
            out[target] = str(value).lower() == "https"
        elif target in ("security_protocol", "sasl_mechanism"):
            out[target] = str(value).upper()
        else:
            out[target] = value
    return out
