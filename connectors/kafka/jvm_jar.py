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
    """The path of twophase's Kafka writer jar, for ``spark.jars`` (executors fetch it from there).

    Returns:
        An absolute file path.

    Raises:
        ConfigError: this install has no jar (its wheel was built without Maven, or a checkout
            has not run ``make jars``), naming how to build it.
    """
    return bundled_jar(Path(__file__).resolve().parent, JAR_NAME, "the Kafka sink's write_path='spark'")
