"""Hadoop connector jars a store's Spark readers need (hadoop-azure, Google's GCS connector),
resolved by Maven from a POM of ours into the cache once per POM and its properties (issue #46):
what the Azure and GCS modules share, below the module that chooses between them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from twophase.integration.services.cache import cache_dir
from twophase.integration.services.maven import pom_digest, resolve_jars


def extra_jars(pom: Path, stem: str, properties: Mapping[str, str]) -> list[str]:
    """Absolute paths of ``pom``'s runtime jars resolved with ``properties`` into
    ``<cache>/<stem>-<digest>``, less the artifacts pyspark ships and those of
    :func:`~twophase.integration.spark.spark_jars` (Spark refuses a jar name registered twice from
    two paths). Resolved by Maven on the first call, then cached.

    Raises:
        ServiceUnavailableError: Maven is missing or cannot resolve the POM.
    """
    from twophase.integration.spark import _artifact, pyspark_jars_dir, spark_jars

    out_dir = cache_dir() / f"{stem}-{pom_digest(pom, properties)[:12]}"
    present = {_artifact(jar) for jar in pyspark_jars_dir().glob("*.jar")}
    present |= {_artifact(Path(jar)) for jar in spark_jars()}
    return [str(jar) for jar in resolve_jars(pom, out_dir, properties) if _artifact(jar) not in present]
