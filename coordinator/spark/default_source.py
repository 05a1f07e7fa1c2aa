"""The ``twophase`` data source: every sink through ``.format("twophase")``, registered by the wheel.

The wheel ships a top-level module ``pyspark_twophase`` whose ``DefaultSource`` is
:class:`TwophaseDataSource`; Spark's Python data source lookup imports every installed
``pyspark_*`` module and registers its ``DefaultSource`` by name, so no ``register`` call is
needed::

    (df.writeStream.format("twophase")
       .option("sink", "kafka")                         # a declared connector's kind
       .option("job", "orders")
       .option("twophaseCheckpointDir", "s3://bucket/chk")
       .option("checkpointLocation", "s3a://bucket/spark-chk")
       .option("bootstrap_servers", "broker:9092").option("topic", "orders")
       .start())

``sink`` is the kind of a declared connector, and every field of its config an option of the same
name (:mod:`twophase.coordinator.spark.option_sinks` builds the sink). Unknown options are refused
by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twophase.coordinator.spark.datasource import TwoPhaseDataSource
from twophase.coordinator.spark.option_sinks import sink_from_options, sink_option_names
from twophase.sinks.api import TwoPhaseCommitSink

__all__ = ["FORMAT_NAME", "TwophaseDataSource", "sink_from_options", "sink_option_names"]

AnySink = TwoPhaseCommitSink[Any, Any]

FORMAT_NAME = "twophase"


class TwophaseDataSource(TwoPhaseDataSource):
    """``.format("twophase")``: the sink of the declared connector named by ``.option("sink")``.

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
