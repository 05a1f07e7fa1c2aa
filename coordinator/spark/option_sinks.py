"""Sinks from the options of a ``.format("twophase")`` query: the declared connector ``sink`` names.

``sink`` is the kind of a declared connector (:data:`twophase.sinks.registry.CONNECTORS`: those of
this distribution, of installed distributions' entry points, and registered ones). Every field of
its config is an option of the same name (see :mod:`twophase.coordinator.spark.sink_options` for
the value syntax); ``s3.*`` options reach S3 (sink and checkpoints alike); the prefixes a connector
declares fill a mapping field (for Kafka, ``kafka.<librdkafka key>`` adds to ``client_config``).
``sinkName`` names the sink (default: the sink kind). Unknown options are refused by name.

The data source (:mod:`twophase.coordinator.spark.default_source`) and ``twophase lingering -o``
build sinks here; nothing in this module needs pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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
from twophase.sinks.registry import CONNECTORS, ConnectorDeclaration
from twophase.sinks.spark_staging import SparkStagedSink

AnySink = TwoPhaseCommitSink[Any, Any]

OPTION_SINK = "sink"
OPTION_SINK_NAME = "sinkname"
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


def _declaration(kind: str) -> ConnectorDeclaration:
    declared = CONNECTORS.all()
    if kind not in declared:
        raise ConfigError(f'option "sink" must be one of {sorted(declared)}, got {kind or "nothing"!r}')
    return declared[kind]


def _with_mapping_options(
    declaration: ConnectorDeclaration, options: Mapping[str, str]
) -> tuple[dict[str, str], set[str]]:
    """``options`` with each declared ``<prefix><key>`` option merged into its mapping field's
    JSON object (they win over the same keys there), and the prefixed option keys used."""
    merged = dict(options)
    used: set[str] = set()
    for prefix, field_name in declaration.mapping_options.items():
        prefixed = {k for k in options if k.startswith(prefix)}
        if prefixed:
            given = parse_value(field_name, merged.get(field_name, "{}"), dict)
            extra = {k[len(prefix) :]: options[k] for k in prefixed}
            merged[field_name] = json.dumps({**given, **extra})
            used |= prefixed
    return merged, used


def sink_from_options(options: Mapping[str, str]) -> AnySink:
    """The sink the options describe (keys lower-cased, as Spark passes them).

    Raises:
        ConfigError: no or an unknown ``sink``, an option that is neither the data source's nor a
            field of that sink's config (named, with what is accepted), a bad value, or
            ``write_path=spark`` (the data source hands every row to Python).
        MissingExtraError: the connector's extra is not installed where this runs (a
            ``ConfigError`` naming the ``pip install`` to run).
    """
    kind = options.get(OPTION_SINK, "").strip().lower()
    declaration = _declaration(kind)
    name = options.get(OPTION_SINK_NAME, "").strip() or kind
    declaration.sink_class()  # a missing extra is named before any option is read
    merged, prefixed = _with_mapping_options(declaration, options)
    config_class = declaration.config_class()
    config, used = config_from_options(config_class, merged)
    sink = declaration.build_sink(name, config)
    used |= prefixed
    unknown = sorted(
        k for k in options if k not in used and k not in FACADE_OPTIONS and not k.startswith(OPTION_S3_PREFIX)
    )
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown} for sink {kind!r}; it takes {option_names(config_class)}"
        )
    if isinstance(sink, SparkStagedSink) and sink.stages_with_spark():
        raise ConfigError(
            f"sink {kind!r}: write_path=spark stages the epoch with a JVM writer through twophase's Job and "
            '.stream() APIs; .format("twophase") writes through Spark\'s Python data source: leave '
            "write_path unset (python) here"
        )
    return sink


def sink_option_names(kind: str) -> list[str]:
    """The config options of the connector ``kind``, for messages and docs. Imports that
    connector only: the others' optional libraries may be absent.

    Raises:
        ConfigError: no connector has that kind.
        MissingExtraError: its extra is not installed.
    """
    return option_names(_declaration(kind).config_class())
