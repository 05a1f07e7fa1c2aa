"""Pinned versions of every external service, the single source of truth.

The native launcher, the Maven POMs under ``jvm/`` and ``docker-compose.yml`` must agree with these
constants; ``integration/test_compose.py`` checks that they do.
"""

from __future__ import annotations

from typing import Final

#: Apache Kafka, run as a single-node KRaft broker (``org.apache.kafka:kafka_2.13`` on Maven Central,
#: ``apache/kafka`` image in docker-compose).
KAFKA_VERSION: Final = "4.4.0"
KAFKA_SCALA_VERSION: Final = "2.13"
KAFKA_IMAGE: Final = f"apache/kafka:{KAFKA_VERSION}"

#: MinIO, built from source with ``go install``. The Go module proxy refuses the last tagged release
#: commit (RELEASE.2025-10-15T17-29-55Z = 9e49d5e7a648 answers "403 not available"), so we pin the
#: newest commit the proxy serves: the archived repository's final commit.
MINIO_MODULE: Final = "github.com/minio/minio"
MINIO_MODULE_VERSION: Final = "v0.0.0-20260212201848-7aac2a2c5b7c"
MINIO_COMMIT: Final = MINIO_MODULE_VERSION.rsplit("-", 1)[1]

#: Go toolchain image used by ``integration/docker/minio.Dockerfile`` (the native build uses the
#: machine's ``go``).
GO_IMAGE: Final = "golang:1.26-bookworm"

#: Python and Java of the ``app`` container; the same as the native toolchain requirements.
PYTHON_VERSION: Final = "3.11"
JAVA_VERSION: Final = "17"

#: Spark-side jars (resolved by ``jvm/spark/pom.xml``), kept here for docs and the compose test.
SPARK_VERSION: Final = "4.2.0"
DELTA_JAR_VERSION: Final = "4.4.0"
HADOOP_VERSION: Final = "3.5.0"
