"""Session-scoped fixtures for real services; each starts only when a test asks for it.

- ``kafka_bootstrap`` (str, ``"127.0.0.1:port"``): a broker that can run transactions.
- ``s3_endpoint`` (:class:`twophase.integration.services.S3Endpoint`): a working S3 server (MinIO).
- ``spark`` (SparkSession): ``local[2]`` with Delta, the Kafka source and s3a jars.
- ``spark_s3`` (SparkSession): the same session, with s3a pointed at ``s3_endpoint``.
- ``kafka_cluster`` (:class:`~twophase.integration.services.kafka_cluster.KafkaCluster`): a native
  three-broker KRaft cluster (one controller; replication 3, min ISR 2) whose brokers tests may
  kill, pause and restart. Session scope: it starts once (~20 s); tests that break it call
  ``kafka_cluster.heal()`` first (``tests/integration/faults`` does so before every test).
- ``minio_controls`` (:class:`~twophase.integration.services.minio_server.MinioServer`): a native
  MinIO, separate from ``s3_endpoint``, that tests may kill, restart, pause and restrict with IAM
  policies. Session scope, healed the same way.
- ``azure_endpoint`` (:class:`~twophase.integration.services.azurite.AzureBlobEndpoint`): Azurite's
  blob service (or ``TWOPHASE_AZURE_CONNECTION_STRING``'s), one account with a random key.
- ``gcs_endpoint`` (:class:`~twophase.integration.services.gcs_server.GcsEndpoint`): fake-gcs-server
  (or ``TWOPHASE_GCS_ENDPOINT``'s emulator).

Endpoints in ``TWOPHASE_*`` environment variables are used instead of native services (not for
``kafka_cluster`` and ``minio_controls``: faults need the processes, so those are always native). A service
that cannot start makes the requesting tests error with the reason; nothing is skipped silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from twophase.integration.services import S3Endpoint, kafka_service, s3_service
from twophase.integration.services.azurite import AzureBlobEndpoint, azure_service
from twophase.integration.services.gcs_server import GcsEndpoint, gcs_service
from twophase.integration.services.kafka_cluster import KafkaCluster, kafka_cluster_service
from twophase.integration.services.minio_server import MinioServer, minio_server
from twophase.integration.spark import build_spark_session, configure_s3a

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# The test support is the package ``support`` in tests/ (pytest's ``pythonpath``). The job
# scripts, writer processes, Spark's Python workers and Connect servers these tests start are
# other processes: they find it through PYTHONPATH, set before the first of them starts.
TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a Kafka broker ready for transactions, for the whole test session."""
    with kafka_service() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """An S3 endpoint (MinIO unless ``TWOPHASE_S3_ENDPOINT`` is set), for the whole test session."""
    with s3_service() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test session's one local[2] SparkSession (Delta, Kafka source, s3a jars)."""
    session = build_spark_session("twophase-integration")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_s3(spark: SparkSession, s3_endpoint: S3Endpoint) -> SparkSession:
    """The same SparkSession as ``spark``, with s3a configured for ``s3_endpoint``."""
    configure_s3a(spark, s3_endpoint)
    return spark


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """A native three-broker Kafka cluster (always native), for the whole test session."""
    with kafka_cluster_service() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def minio_controls() -> Iterator[MinioServer]:
    """A native MinIO that tests may kill, restart, pause and restrict, for the whole session."""
    with minio_server() as server:
        yield server


@pytest.fixture(scope="session")
def azure_endpoint() -> Iterator[AzureBlobEndpoint]:
    """Azurite's blob service (unless ``TWOPHASE_AZURE_CONNECTION_STRING`` is set), for the session."""
    with azure_service() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[GcsEndpoint]:
    """fake-gcs-server (unless ``TWOPHASE_GCS_ENDPOINT`` is set), for the session."""
    with gcs_service() as endpoint:
        yield endpoint
