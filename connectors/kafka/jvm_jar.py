"""Where twophase's Kafka writer jar is: the JVM half of the Kafka sink's Spark-staged writes
(``write_path="spark"``, issue #44 item 4), built from ``connectors/kafka/jvm``. A Spark session
that stages writes needs it on its class path (``spark.jars``), beside ``kafka-clients`` (which
``spark-sql-kafka-0-10`` brings).
"""

from __future__ import annotations

from pathlib import Path

from twophase.sinks.spark_staging import bundled_jar

JAR_NAME = "twophase-kafka-staging.jar"
"""The jar's file name, beside this module's ``jvm/`` folder's POM."""


def staging_jar() -> str:
    """The absolute path of twophase's Kafka writer jar (``kafka-clients`` comes with
    ``spark-sql-kafka-0-10``), for ``spark.jars``: see :func:`~twophase.sinks.spark_staging.bundled_jar`,
    which raises ``ConfigError`` naming how to build it when this install has none."""
    return bundled_jar(Path(__file__).resolve().parent, JAR_NAME, "the Kafka sink's write_path='spark'")
