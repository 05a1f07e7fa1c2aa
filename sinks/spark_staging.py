"""Sinks whose epochs Spark's own writer can stage (issue #44 item 4).

A sink that implements :class:`SparkStagedSink` and says so (``stages_with_spark()``) lets a job
whose only sink it is write each epoch with a Spark writer (in the JVM, no hand-off of the rows to
Python) instead of the one Python pass: the writer leaves what it wrote uncommitted (pending
multipart uploads, open Kafka transactions) and the sink hands that back as one committable per
Spark task. Everything after it is the usual protocol: the committables are acknowledged, persisted
in the checkpoint and committed on its completion (FLIP-143's committer), so a staged sink commits
only what a completed checkpoint holds, and decides a repeated commit from its own evidence. The
JVM halves ship as jars inside the wheel (:func:`bundled_jar`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from twophase.sinks.errors import ConfigError


@dataclass(frozen=True)
class StagedTask:
    """What one Spark task of a staged write left for the sink to commit.

    Attributes:
        attempt: the task attempt whose output Spark's commit coordination let commit.
        committable: the sink's committable of it.
        records: rows it wrote, or ``None`` when the writer does not say (S3A's pending commits
            carry bytes, not rows).
    """

    attempt: int
    committable: Any
    records: int | None = None


@runtime_checkable
class SparkStagedSink(Protocol):
    """A sink that can stage an epoch's writes with Spark's own writer."""

    def stages_with_spark(self) -> bool:
        """Whether this sink, as configured, stages its epochs with Spark's writer."""
        ...

    def stage_with_spark(self, df: Any, job_id: str, checkpoint_id: int) -> Mapping[int, StagedTask]:
        """Write ``df`` (a Spark DataFrame, one epoch) with Spark's writer, leaving it uncommitted.

        Args:
            df: the epoch's rows (the job's DataFrame; the sink projects its own columns).
            job_id: the job's stable id.
            checkpoint_id: the checkpoint the epoch belongs to.

        Returns:
            Spark partition (the write's task) → what it staged; a partition that wrote nothing
            has no entry.

        Raises:
            ConfigError: the session cannot stage the write (named setting).
            Exception: whatever the write or the store raise; what was staged is left to the
                lingering cleanup.
        """
        ...


def classic_jvm(spark: Any, sink: str, handed: str) -> Any:
    """The py4j view of ``spark``'s driver JVM, through which a staged write hands back what it
    staged.

    Args:
        spark: the epoch's Spark session.
        sink: the sink, for the error (e.g. ``"Kafka sink 'orders'"``).
        handed: what the write hands back (e.g. ``"its transactions"``).

    Raises:
        ConfigError: a Spark Connect session, which has no py4j gateway.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise ConfigError(
            f"{sink}: write_path='spark' hands {handed} over through py4j, "
            "which a Spark Connect session has not; use write_path='python' there"
        )
    return jvm


def bundled_jar(package_dir: Path, jar_name: str, needed_by: str) -> str:
    """The path of a jar twophase's wheel carries in ``package_dir/jvm/`` (built by Maven when the
    wheel is built, or by ``make jars`` in a checkout; never committed), for ``spark.jars``.

    Args:
        package_dir: the connector's package folder.
        jar_name: the jar's file name.
        needed_by: what needs it, for the error (e.g. ``"the S3 sink's write_path='spark'"``).

    Raises:
        ConfigError: this install has no such jar, naming how to build it.
    """
    jar = package_dir / "jvm" / jar_name
    if not jar.is_file():
        raise ConfigError(
            f"twophase's jar {jar} is missing (needed by {needed_by}): build twophase's wheel with "
            "Maven on PATH, or run `make jars` in a checkout"
        )
    return str(jar)
