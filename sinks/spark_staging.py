"""Sinks whose epochs Spark's own writer can stage (issue #44 item 4).

A sink that implements :class:`SparkStagedSink` and says so (``stages_with_spark()``) lets a job
whose only sink it is write each epoch with a Spark writer (in the JVM, no hand-off of the rows to
Python) instead of the one Python pass: the writer leaves what it wrote uncommitted (pending
multipart uploads, a staged snapshot) and the sink hands that back as one committable per Spark
task. Everything after it is the usual protocol: the committables are acknowledged, persisted in
the checkpoint and committed on its completion (FLIP-143's committer), so a staged sink commits
only what a completed checkpoint holds, and decides a repeated commit from its own evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class SparkStagedSink(Protocol):
    """A sink that can stage an epoch's writes with Spark's own writer."""

    def stages_with_spark(self) -> bool:
        """Whether this sink, as configured, stages its epochs with Spark's writer."""
        ...

    def stage_with_spark(self, df: Any, job_id: str, checkpoint_id: int) -> Mapping[int, Any]:
        """Write ``df`` (a Spark DataFrame, one epoch) with Spark's writer, leaving it uncommitted.

        Args:
            df: the epoch's rows (the job's DataFrame, projected to the sink's columns).
            job_id: the job's stable id.
            checkpoint_id: the checkpoint the epoch belongs to.

        Returns:
            Spark partition (the write's task) → its committable; a partition that wrote nothing
            has none.

        Raises:
            ConfigError: the session cannot stage the write (named setting).
            Exception: whatever the write or the store raise; what was staged is left to the
                lingering cleanup.
        """
        ...
