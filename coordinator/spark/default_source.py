"""The ``twophase`` data source: every sink through ``.format("twophase")``, registered by the wheel.

The wheel ships a top-level module ``pyspark_twophase`` whose ``DefaultSource`` is
:class:`TwophaseDataSource`; Spark's Python data source lookup imports every installed
``pyspark_*`` module and registers its ``DefaultSource`` by name, so no ``register`` call is
needed::

    (df.writeStream.format("twophase")
       .option("sink", "kafka")                         # kafka | s3 | delta | postgres | iceberg
       .option("job", "orders")
       .option("twophaseCheckpointDir", "s3://bucket/chk")
       .option("checkpointLocation", "s3a://bucket/spark-chk")
       .option("bootstrap_servers", "broker:9092").option("topic", "orders")
       .start())

Every field of the chosen sink's config is an option of the same name (see
:mod:`twophase.coordinator.spark.sink_options` for the value syntax); ``s3.*`` options reach
S3 (sink and checkpoints alike); for Kafka, ``kafka.<librdkafka key>`` adds to ``client_config``.
``sinkName`` names the sink (default: the sink kind). Unknown options are refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from twophase.coordinator.spark.datasource import TwoPhaseDataSource
from twophase.coordinator.spark.facade_options import (
    OPTION_ASYNC_PROGRESS,
    OPTION_CHECKPOINT_DIR,
    OPTION_JOB,
    OPTION_JOB_ID,
    OPTION_S3_PREFIX,
    OPTION_SPECULATION,
)
from twophase.coordinator.spark.sink_options import config_from_options, option_names, parse_value
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError

AnySink = TwoPhaseCommitSink[Any, Any]

FORMAT_NAME = "twophase"
OPTION_SINK = "sink"
OPTION_SINK_NAME = "sinkname"
KAFKA_CLIENT_PREFIX = "kafka."
"""``kafka.<key>`` options go to the Kafka sink's ``client_config`` (librdkafka names)."""
FACADE_OPTIONS = frozenset(
    {
        OPTION_SINK,
        OPTION_SINK_NAME,
        OPTION_JOB,
        OPTION_JOB_ID,
        OPTION_CHECKPOINT_DIR,
        OPTION_ASYNC_PROGRESS,
        OPTION_SPECULATION,
        "checkpointlocation",  # Spark's own
        "path",
        "queryname",
    }
)
"""Options the data source itself reads (or Spark passes along); not sink fields."""


def _kafka(name: str, options: Mapping[str, str]) -> tuple[AnySink, set[str]]:
    from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig

    prefixed = {k for k in options if k.startswith(KAFKA_CLIENT_PREFIX)}
    merged = dict(options)
    if prefixed:  # kafka.<key> options win over the same keys in a client_config JSON object
        given = parse_value("client_config", merged.get("client_config", "{}"), dict)
        client = {k[len(KAFKA_CLIENT_PREFIX) :]: options[k] for k in prefixed}
        merged["client_config"] = json.dumps({**given, **client})
    config, used = config_from_options(KafkaSinkConfig, merged)
    return KafkaSink(name, config), used | prefixed


def _s3(name: str, options: Mapping[str, str]) -> tuple[AnySink, set[str]]:
    from twophase.connectors.s3 import S3Sink, S3SinkConfig

    config, used = config_from_options(S3SinkConfig, options)
    return S3Sink(name, config), used


def _delta(name: str, options: Mapping[str, str]) -> tuple[AnySink, set[str]]:
    from twophase.connectors.delta import DeltaSink, DeltaSinkConfig

    config, used = config_from_options(DeltaSinkConfig, options)
    return DeltaSink(name, config), used


def _postgres(name: str, options: Mapping[str, str]) -> tuple[AnySink, set[str]]:
    from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig

    config, used = config_from_options(PostgresSinkConfig, options)
    return PostgresSink(name, config), used


def _iceberg(name: str, options: Mapping[str, str]) -> tuple[AnySink, set[str]]:
    from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig

    config, used = config_from_options(IcebergSinkConfig, options)
    return IcebergSink(name, config), used


SINKS: dict[str, Callable[[str, Mapping[str, str]], tuple[AnySink, set[str]]]] = {
    "kafka": _kafka,
    "s3": _s3,
    "delta": _delta,
    "postgres": _postgres,
    "iceberg": _iceberg,
}


EXTRAS = {"postgres": "postgres", "iceberg": "iceberg"}
"""Sink kind → the pip extra that brings its client library (the other sinks' are always installed)."""


def sink_from_options(options: Mapping[str, str]) -> AnySink:
    """The sink the options describe (keys lower-cased, as Spark passes them).

    Raises:
        ConfigError: no or an unknown ``sink``, an option that is neither the data source's nor a
            field of that sink's config (named, with what is accepted), or a bad value.
    """
    kind = options.get(OPTION_SINK, "").strip().lower()
    if kind not in SINKS:
        raise ConfigError(f'option "sink" must be one of {sorted(SINKS)}, got {kind or "nothing"!r}')
    name = options.get(OPTION_SINK_NAME, "").strip() or kind
    try:
        sink, used = SINKS[kind](name, options)
    except ModuleNotFoundError as e:  # an optional extra (psycopg, pyiceberg) not installed
        extra = EXTRAS.get(kind)
        if extra is None:
            raise
        raise ConfigError(
            f"sink {kind!r} needs {e.name}, which is not installed where this query runs: "
            f"pip install 'twophase[{extra}]' (on the driver and the executors, or the Connect server)"
        ) from None
    unknown = sorted(
        k for k in options if k not in used and k not in FACADE_OPTIONS and not k.startswith(OPTION_S3_PREFIX)
    )
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown} for sink {kind!r}; it takes {sink_option_names(kind)}"
        )
    return sink


def sink_option_names(kind: str) -> list[str]:
    """The config options of sink ``kind`` (kafka, s3, delta, postgres, iceberg), for messages and
    docs. Imports that sink's connector only: the others' optional libraries may be absent."""
    return option_names(_config_class(kind))


def _config_class(kind: str) -> type[Any]:
    if kind == "kafka":
        from twophase.connectors.kafka import KafkaSinkConfig

        return KafkaSinkConfig
    if kind == "s3":
        from twophase.connectors.s3 import S3SinkConfig

        return S3SinkConfig
    if kind == "delta":
        from twophase.connectors.delta import DeltaSinkConfig

        return DeltaSinkConfig
    if kind == "postgres":
        from twophase.connectors.postgres import PostgresSinkConfig

        return PostgresSinkConfig
    if kind == "iceberg":
        from twophase.connectors.iceberg import IcebergSinkConfig

        return IcebergSinkConfig
    raise ConfigError(f'option "sink" must be one of {sorted(SINKS)}, got {kind!r}')


class TwophaseDataSource(TwoPhaseDataSource):
    """``.format("twophase")``: the Kafka, S3, Delta, PostgreSQL or Iceberg sink named by ``.option("sink")``.

    Registered automatically by the wheel's ``pyspark_twophase`` module. The facade's limits
    apply (:mod:`twophase.coordinator.spark.datasource`): one sink per query, commits with every
    batch, S3 row-format files must roll on every checkpoint (``rolling.on_checkpoint=true``).
    """

    format_name = FORMAT_NAME

    def build_sink(self, options: Mapping[str, str]) -> AnySink:
        """The sink of :func:`sink_from_options`.

        Raises:
            ConfigError: see :func:`sink_from_options`.
        """
        return sink_from_options(options)
