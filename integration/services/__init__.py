"""Real services for integration tests, the demo and development: Kafka (KRaft), S3 (MinIO), a
Spark standalone cluster and a Spark Connect server.

Public API:

- :class:`S3Endpoint` — frozen endpoint + credentials; ``boto3_client()``, ``s3_options()``, ``aws_env()``.
- :func:`kafka_service` — context manager yielding a bootstrap string ``"127.0.0.1:port"``.
- :func:`s3_service` — context manager yielding an :class:`S3Endpoint`.
- :func:`kafka_cluster_service` — context manager yielding a :class:`KafkaCluster`: a native
  three-broker KRaft cluster whose brokers can be killed, paused and restarted (fault tests only;
  the single broker stays the default).
- :func:`minio_server` — context manager yielding a :class:`MinioServer`: a native MinIO that can be
  killed, restarted on the same data directory and port, paused, and restricted by IAM policies.
- :func:`spark_cluster_service` — context manager yielding a standalone master URL
  ``"spark://127.0.0.1:port"`` (``TWOPHASE_SPARK_MASTER``, ``services up --spark-cluster``, or a
  temporary :class:`SparkCluster` of two workers).
- :func:`services_up`, :func:`services_down`, :func:`services_status` — the ``twophase services``
  commands (``services_up(spark_cluster=True)`` adds the Spark cluster, ``spark_connect=True`` a
  Connect server: :mod:`twophase.integration.services.connect_service`).
- Version pins (``KAFKA_VERSION``, ``MINIO_MODULE_VERSION``, ...) shared with docker-compose.yml.

Environment: ``TWOPHASE_KAFKA_BOOTSTRAP``, ``TWOPHASE_S3_ENDPOINT``, ``TWOPHASE_S3_ACCESS_KEY``,
``TWOPHASE_S3_SECRET_KEY``, ``TWOPHASE_S3_REGION``, ``TWOPHASE_SPARK_MASTER``,
``TWOPHASE_SPARK_CONNECT`` select external services; ``TWOPHASE_KAFKA_PORT``, ``TWOPHASE_S3_PORT``
fix the native services' ports;
``TWOPHASE_CONNECT_TIMEOUT_S`` and ``TWOPHASE_START_TIMEOUT_S`` bound the waits; ``TWOPHASE_CACHE``
moves the cache.
"""

from twophase.integration.services.cache import cache_dir
from twophase.integration.services.kafka_cluster import KafkaCluster, kafka_cluster_service
from twophase.integration.services.launcher import (
    ServiceStatus,
    kafka_service,
    s3_service,
    services_down,
    services_status,
    services_up,
)
from twophase.integration.services.minio_server import MinioServer, minio_server
from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.services.spark_cluster import SparkCluster
from twophase.integration.services.spark_service import spark_cluster_service
from twophase.integration.services.versions import (
    KAFKA_IMAGE,
    KAFKA_VERSION,
    MINIO_COMMIT,
    MINIO_MODULE,
    MINIO_MODULE_VERSION,
    SPARK_VERSION,
)

__all__ = [
    "KAFKA_IMAGE",
    "KAFKA_VERSION",
    "MINIO_COMMIT",
    "MINIO_MODULE",
    "MINIO_MODULE_VERSION",
    "SPARK_VERSION",
    "KafkaCluster",
    "MinioServer",
    "S3Endpoint",
    "ServiceStatus",
    "SparkCluster",
    "cache_dir",
    "kafka_cluster_service",
    "kafka_service",
    "minio_server",
    "s3_service",
    "services_down",
    "services_status",
    "services_up",
    "spark_cluster_service",
]
