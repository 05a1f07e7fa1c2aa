"""Pinned versions of every external service, the single source of truth.

The native launcher, the Maven POMs under ``jvm/`` and ``docker-compose.yml`` must agree with these
constants; ``tests/integration/test_compose.py`` checks that they do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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

#: The development environment's Spark (constraints.txt); `make compat` runs the others.
SPARK_VERSION: Final = "4.2.0"


@dataclass(frozen=True)
class SparkJarSet:
    """The Maven artifacts a Spark minor version gets beside pyspark's own jars.

    The Scala and Hadoop versions are read from the installed pyspark's jars; hadoop-aws follows
    Hadoop's. Attributes:
        delta_artifact, delta_version: ``io.delta`` artifact to read Delta tables back with Spark;
            ``None`` where Delta publishes none for that Spark (the table is read with delta-rs).
        kafka_source: ``spark-sql-kafka-0-10`` version on Maven Central (a patch of the same minor);
            ``None`` where none is published there.
        token_provider: ``spark-token-provider-kafka-0-10`` version (not every one is on Central).
        hadoop_cloud: ``spark-hadoop-cloud`` version (its jar alone: Spark's cloud commit protocol,
            which the S3 sink's Spark-staged writes run under); ``None`` where none is served.
    """

    delta_artifact: str | None
    delta_version: str | None
    kafka_source: str | None
    token_provider: str
    hadoop_cloud: str | None = None


#: Per Spark minor version. Delta 4.4 builds for Spark 4.0, 4.1 and 4.2; Delta 3.3 for Spark 3.5;
#: none for Spark 4.3 yet. spark-hadoop-cloud 4.2.0 is not served here; 4.1.1's two classes
#: (PathOutputCommitProtocol, BindingParquetOutputCommitter) run on 4.2 unchanged.
SPARK_JARS: Final[Mapping[tuple[int, int], SparkJarSet]] = {
    (3, 5): SparkJarSet("delta-spark_2.12", "3.3.2", "3.5.7", "3.5.7", "3.5.7"),
    (4, 0): SparkJarSet("delta-spark_4.0_2.13", "4.4.0", "4.0.1", "4.0.0", "4.0.1"),
    (4, 1): SparkJarSet("delta-spark_4.1_2.13", "4.4.0", "4.1.3", "4.0.0", "4.1.1"),
    (4, 2): SparkJarSet("delta-spark_4.2_2.13", "4.4.0", "4.2.0", "4.0.0", "4.1.1"),
    (4, 3): SparkJarSet(None, None, None, "4.0.0"),
}

#: Earlier releases of a minor version that need other jars than :data:`SPARK_JARS`, keyed by the
#: first release that takes :data:`SPARK_JARS`' set: Delta 3.3 is built against Spark 3.5.3, Delta
#: 3.2.0 against 3.5.0, and 3.2.0 is what reads tables back on 3.5.0 to 3.5.2 (Databricks 15.4/16.4
#: LTS, EMR 7.0 to 7.5, Dataproc 2.2; the floor, Databricks and EMR 7.0 cells of `make compat`);
#: the Kafka source of 3.5.7 runs on every 3.5 release.
SPARK_JARS_BEFORE: Final[Mapping[tuple[int, int, int], SparkJarSet]] = {
    (3, 5, 3): SparkJarSet("delta-spark_2.12", "3.2.0", "3.5.7", "3.5.7", "3.5.7"),
}


def spark_jar_set(release: tuple[int, int, int]) -> SparkJarSet | None:
    """The jar set of Spark ``release`` (major, minor, patch); ``None`` for a minor version without one."""
    for first, jars in SPARK_JARS_BEFORE.items():
        if first[:2] == release[:2] and release < first:
            return jars
    return SPARK_JARS.get(release[:2])


#: Azurite, Microsoft's Azure Storage emulator (npm package ``azurite``), run with the machine's
#: ``node``. 3.37.0 is the first release whose List Blobs honours ``startFrom``, which delta-rs
#: (object_store) sends to list a Delta log from a version on: 3.35.0 ignores it and delta-rs's third
#: commit fails. Its ``engines`` asks for Node 22; it runs on Node 20 (npm only warns).
AZURITE_VERSION: Final = "3.37.0"
AZURITE_IMAGE: Final = f"mcr.microsoft.com/azure-storage/azurite:{AZURITE_VERSION}"

#: fake-gcs-server, a Google Cloud Storage emulator (JSON and XML APIs), built with ``go install``.
FAKE_GCS_MODULE: Final = "github.com/fsouza/fake-gcs-server"
FAKE_GCS_VERSION: Final = "v1.56.1"
FAKE_GCS_IMAGE: Final = f"fsouza/fake-gcs-server:{FAKE_GCS_VERSION.removeprefix('v')}"
