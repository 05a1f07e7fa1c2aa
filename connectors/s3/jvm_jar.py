"""Where twophase's committer jar is: the JVM half of the S3 sink's Spark-staged writes
(``write_path="spark"``, issue #44 item 4), built from ``connectors/s3/jvm`` by Maven when the
wheel is built (``setup.py``) or by ``make jars`` in a checkout, never committed. A Spark session
that stages writes needs it on its class path (``spark.jars``), beside ``hadoop-aws`` and
``spark-hadoop-cloud``.
"""

from __future__ import annotations

from pathlib import Path

from twophase.sinks.errors import ConfigError

JAR_NAME = "twophase-s3-staging.jar"
"""The jar's file name, beside this module's ``jvm/`` folder's POM."""


def staging_jar() -> str:
    """The path of twophase's committer jar, for ``spark.jars`` (executors fetch it from there).

    Returns:
        An absolute file path.

    Raises:
        ConfigError: this install has no jar (its wheel was built without Maven, or a checkout
            has not run ``make jars``), naming how to build it.
    """
    jar = Path(__file__).resolve().parent / "jvm" / JAR_NAME
    if not jar.is_file():
        raise ConfigError(
            f"twophase's committer jar {jar} is missing (needed by write_path='spark'): build twophase's "
            "wheel with Maven on PATH, or run `make jars` in a checkout"
        )
    return str(jar)
