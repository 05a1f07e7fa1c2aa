"""Probes of issue #44 item 4's JVM-side write designs (benchmarks only: nothing here ships),
compiled once per source digest with ``javac`` against the session's own jars (:func:`build`).
(The S3 probe became the S3 sink's Spark-staged writes: ``connectors/s3/jvm``.)

- Kafka: a DataSource V2 writer (:data:`KAFKA_PROVIDER`) whose tasks each write in a Kafka
  transaction of their own and leave it open, handing (transactional id, producer id, epoch) to the
  job commit, which writes them to a local file for a 2PC driver to commit with EndTxn.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KAFKA_PROVIDER = "twophase.bench.kafka.TxnKafkaProvider"
"""The Kafka probe's data source (``df.write.format(KAFKA_PROVIDER)``)."""


def build() -> str:
    """The probes' jar (absolute path), compiled on first use.

    Raises:
        ServiceUnavailableError: Maven cannot resolve the session's jars (``hadoop-aws``).
        subprocess.CalledProcessError: the sources do not compile.
    """
    from twophase.integration.services.cache import cache_dir
    from twophase.integration.spark import pyspark_jars_dir, spark_jars

    sources = sorted((HERE / "java").rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    jar = cache_dir() / f"bench-probes-{digest}" / "probes.jar"
    if jar.is_file():
        return str(jar)
    class_path = os.pathsep.join([str(pyspark_jars_dir() / "*"), *spark_jars()])
    javac = shutil.which("javac") or "javac"
    jar_tool = shutil.which("jar") or "jar"
    with tempfile.TemporaryDirectory(prefix="probes-") as tmp:
        subprocess.run(
            [javac, "--release", "17", "-nowarn", "-cp", class_path, "-d", tmp, *map(str, sources)],
            check=True,
        )
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".part")
        subprocess.run([jar_tool, "cf", str(partial), "-C", tmp, "."], check=True)
        partial.replace(jar)
    return str(jar)
