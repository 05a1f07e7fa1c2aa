"""A probe of issue #44 item 4's S3 design: Spark's own Parquet writer staged by the S3A magic
committer, its job commit left to a two-phase-commit driver (``java/``: a ``PathOutputCommitter``
that delegates every task step to Hadoop's ``MagicS3GuardCommitter`` and makes the job commit,
cleanup and abort do nothing, so each written file stays a pending multipart upload listed in its
task's ``.pendingset``). :func:`build` compiles it with ``javac`` against the session's own jars,
once per source digest, into the per-user cache. Benchmarks only: nothing here ships."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FACTORY = "twophase.bench.StagingCommitterFactory"
"""The committer factory a write names in ``mapreduce.outputcommitter.factory.scheme.s3a``."""


def build() -> str:
    """The probe's jar (absolute path), compiled on first use.

    Raises:
        ServiceUnavailableError: Maven cannot resolve the session's jars (``hadoop-aws``).
        subprocess.CalledProcessError: the sources do not compile.
    """
    from twophase.integration.services.cache import cache_dir
    from twophase.integration.spark import pyspark_jars_dir, spark_jars

    sources = sorted((HERE / "java").rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    jar = cache_dir() / f"bench-s3-staging-{digest}" / "s3-staging.jar"
    if jar.is_file():
        return str(jar)
    class_path = os.pathsep.join([str(pyspark_jars_dir() / "*"), *spark_jars()])
    javac = shutil.which("javac") or "javac"
    jar_tool = shutil.which("jar") or "jar"
    with tempfile.TemporaryDirectory(prefix="s3-staging-") as tmp:
        subprocess.run(
            [javac, "--release", "17", "-nowarn", "-cp", class_path, "-d", tmp, *map(str, sources)],
            check=True,
        )
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".part")
        subprocess.run([jar_tool, "cf", str(partial), "-C", tmp, "."], check=True)
        partial.replace(jar)
    return str(jar)
