"""Spark reading ``--store gcs`` runs back through Google's Cloud Storage connector (issue #46).

The verifier reads the GCS file sink's Parquet files with Spark as a reader that shares nothing with
the writer (google-resumable-media and google-cloud-storage for Python): the Hadoop file system
``gs://`` of ``com.google.cloud.bigdataoss:gcs-connector`` (its shaded jar, resolved with Maven like
the other extra jars: ``integration/services/jvm/gcs-connector/pom.xml``, cached per POM digest).

The connector reaches an emulator through its JSON API root (``fs.gs.storage.root.url``, the
emulator's ``http://host:port/``) without credentials (``fs.gs.auth.type=UNAUTHENTICATED``).
Nothing secret is set: an emulator takes no credentials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.integration.services.gcs_server import PROJECT
from twophase.integration.services.maven import JVM_DIR

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.services.gcs_server import GcsEndpoint

GCS_CONNECTOR_POM = JVM_DIR / "gcs-connector" / "pom.xml"
"""The POM that resolves the GCS connector's shaded jar."""


def gcs_connector_jars() -> list[str]:
    """Absolute paths of the GCS connector's shaded jar (less what the session has already).
    Resolved by Maven on the first call, then cached.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve the POM.
    """
    from twophase.integration.jobs.connector_jars import extra_jars

    return extra_jars(GCS_CONNECTOR_POM, "gcs-connector-jars", {})


def gcs_conf(endpoint: GcsEndpoint) -> dict[str, str]:
    """Hadoop settings (no ``spark.hadoop.`` prefix, nothing secret) that make ``gs://`` the GCS
    connector's, reaching ``endpoint``'s emulator without credentials."""
    return {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        "fs.gs.storage.root.url": endpoint.url.rstrip("/") + "/",
        "fs.gs.auth.type": "UNAUTHENTICATED",
        "fs.gs.project.id": PROJECT,
    }


SIZE_KEYS = (
    "fs.gs.block.size",
    "fs.gs.rewrite.max.chunk.size",
    "fs.gs.outputstream.buffer.size",
    "fs.gs.inputstream.inplace.seek.limit",
    "fs.gs.inputstream.min.range.request.size",
)
"""Sizes Hadoop 3.5's ``core-default.xml`` gives with a suffix (``fs.gs.block.size=64m``, for its
own ``hadoop-gcp`` file system), which Google's connector reads as plain numbers
(``Configuration.getLong``: ``NumberFormatException: For input string: "64m"`` when the file
system starts)."""


def configure_gcs(spark: SparkSession, endpoint: GcsEndpoint) -> None:
    """Set :func:`gcs_conf` in ``spark``'s Hadoop configuration (used by the next ``gs://`` file
    system the session creates), and :data:`SIZE_KEYS` as plain numbers of bytes (the same values)."""
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in gcs_conf(endpoint).items():
        hadoop_conf.set(key, value)
    for key in SIZE_KEYS:
        if hadoop_conf.get(key) is not None:
            hadoop_conf.setLong(key, hadoop_conf.getLongBytes(key, 0))
