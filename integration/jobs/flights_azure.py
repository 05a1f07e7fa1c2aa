"""Spark reading ``--store azure`` runs back through hadoop-azure (issue #46).

The verifier reads the Azure file sink's Parquet files with Spark as a reader that shares nothing
with the writer (the Azure SDK for Python): Hadoop's ABFS driver, from ``hadoop-azure`` of the
installed pyspark's Hadoop version, resolved with Maven like the other extra jars
(``integration/services/jvm/hadoop-azure/pom.xml``, cached per POM digest).

Azurite has no ADLS Gen2 (DFS) endpoint, so ABFS runs in its FNS-over-Blob mode (Hadoop 3.5:
``fs.azure.account.hns.enabled=false``, ``fs.azure.fns.account.service.type=BLOB``), pointed at the
emulator with ``fs.azure.abfs.endpoint=<host:port>`` (with an IP address ABFS puts the account in
the path, Azurite's path style). Azurite speaks plain HTTP: ``abfss://`` locations are read as
``abfs://`` with ``fs.azure.always.use.https=false`` and the JDK's HTTP client (ABFS's default
Apache client insists on TLS).

The account key goes into the running session's Hadoop configuration only
(:func:`configure_abfs`), never into the Spark configuration, which Spark may log or show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from twophase.integration.services.maven import JVM_DIR

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.services.azurite import AzureBlobEndpoint

HADOOP_AZURE_POM = JVM_DIR / "hadoop-azure" / "pom.xml"
"""The POM that resolves hadoop-azure and its runtime dependencies for pyspark's Hadoop."""


def hadoop_azure_jars() -> list[str]:
    """Absolute paths of hadoop-azure and its dependencies for the installed pyspark's Hadoop
    (its ``hadoop-client-api`` jar's version), less the artifacts pyspark ships and those of
    :func:`~twophase.integration.spark.spark_jars`. Resolved by Maven on the first call, then cached.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve the POM.
        UnsupportedSparkError: pyspark ships no Hadoop client jar.
    """
    from twophase.integration.jobs.connector_jars import extra_jars
    from twophase.integration.spark import _shipped_version

    props = {"hadoop.version": _shipped_version("hadoop-client-api")}
    return extra_jars(HADOOP_AZURE_POM, "hadoop-azure-jars", props)


def _emulated(endpoint: AzureBlobEndpoint) -> bool:
    """An emulator (or any Blob endpoint that is not ``<account>.blob.core.windows.net``)."""
    return not urlsplit(endpoint.blob_url).netloc.endswith(".core.windows.net")


def abfs_conf(endpoint: AzureBlobEndpoint) -> dict[str, str]:
    """Hadoop settings (no ``spark.hadoop.`` prefix, no secret) that make ABFS reach ``endpoint``'s
    account with its shared key: FNS over the Blob endpoint, and for an emulator its authority,
    plain HTTP and the JDK's HTTP client."""
    conf = {
        "fs.azure.account.auth.type": "SharedKey",
        "fs.azure.account.hns.enabled": "false",
        "fs.azure.fns.account.service.type": "BLOB",
    }
    if _emulated(endpoint):
        url = urlsplit(endpoint.blob_url)
        conf |= {
            "fs.azure.abfs.endpoint": url.netloc,
            "fs.azure.always.use.https": "false" if url.scheme == "http" else "true",
            "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
        }
    return conf


def configure_abfs(spark: SparkSession, endpoint: AzureBlobEndpoint) -> None:
    """Set :func:`abfs_conf` and the account key in ``spark``'s Hadoop configuration (used by the
    next file system ABFS creates; the key never enters the Spark configuration)."""
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in abfs_conf(endpoint).items():
        hadoop_conf.set(key, value)
    hadoop_conf.set(
        f"fs.azure.account.key.{endpoint.account_name}.dfs.core.windows.net", endpoint.account_key
    )


def spark_location(uri: str, endpoint: AzureBlobEndpoint) -> str:
    """``uri`` as Spark reads it: an ``abfss://`` location as ``abfs://`` when ``endpoint`` speaks
    plain HTTP (an emulator); others unchanged."""
    if uri.startswith("abfss://") and urlsplit(endpoint.blob_url).scheme == "http":
        return "abfs://" + uri[len("abfss://") :]
    return uri
