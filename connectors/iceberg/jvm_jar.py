"""Where twophase's Iceberg writer jar is: the JVM half of the Iceberg sink's Spark-staged writes
(``write_path="spark"``, issue #44 item 4), built from ``connectors/iceberg/jvm``. A Spark session
that stages writes needs it on its class path (``spark.jars``), beside Iceberg's Spark runtime
(``org.apache.iceberg:iceberg-spark-runtime-<spark>_<scala>``) and an Iceberg catalog holding the
sink's table.
"""

from __future__ import annotations

from pathlib import Path

from twophase.sinks.spark_staging import bundled_jar

JAR_NAME = "twophase-iceberg-staging.jar"
"""The jar's file name, beside this module's ``jvm/`` folder's POM."""


def staging_jar() -> str:
    """The absolute path of twophase's Iceberg writer jar, for ``spark.jars``: see
    :func:`~twophase.sinks.spark_staging.bundled_jar`, which raises ``ConfigError`` naming how to
    build it when this install has none."""
    return bundled_jar(Path(__file__).resolve().parent, JAR_NAME, "the Iceberg sink's write_path='spark'")
