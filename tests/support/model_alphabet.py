"""The alphabet of the model-based protocol test (tests/coordinator/test_protocol_model.py): the
names, fault points, task plans, publish outcomes, downtimes and rolling policies its rules draw
from, the errors a job may meet on those paths, and the step tracer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from support.engine_tasks import TASK_PLANS, TaskFailure
from support.model_payloads import ModelDecodeFailure
from twophase.connectors.s3 import RollingPolicy
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.sinks.errors import (
    CheckpointStorageError,
    CommitFailedError,
    ConcurrentAttemptError,
    ServiceUnavailableError,
)

JOB = "job"
"""The job id of every life."""
TOPIC = "events"
S3_PREFIX = "data/s"
SINKS = ("k", "s", "d", "p", "i")
"""Kafka, S3, Delta, PostgreSQL and Iceberg."""
PG_TABLE = "events"
"""The PostgreSQL sink's table (the model holds its key column)."""
ICEBERG_TABLE = "lake.events"
"""The Iceberg sink's table (``ModelWorld.iceberg_table``)."""
DRIVER_POINTS = ("before_persist", "after_persist", "mid_commit", "after_commit")
END_POINTS = (*DRIVER_POINTS, "during_finish", "during_final_checkpoint", "during_stop_with_savepoint")
TASKS = ("ok",) * 12 + tuple(plan for plan in TASK_PLANS if plan != "ok")
"""Each task plan of ``engine_tasks.TASK_PLANS``, a plain success twelve times as likely."""
PUBLISH = ("ok", "ok", "ok", "refused", "unknown_landed", "unknown_not_landed", "landed_reported_failed")
"""Each exit of a publish (published, not published, unknown), and an unknown one a backend
reports as a plain storage error (engine_tasks.publish_fault)."""
DOWN_MS = (0, 5_000, 700_000, 8 * 24 * 3600 * 1000)  # nothing, seconds, > transaction timeout, > id expiry
ARRIVALS = ("as_run", "as_run", "reversed", "gathered")
"""The order an epoch's acknowledgements reach the driver in (:func:`arrived`): as the tasks ran;
reversed, so that a later attempt's acknowledgement of a (sink, partition) comes first; or
gathered, sorted by (sink, partition) as the gather's task sorts them
(``tasks.acknowledgements_of``), which the driver records as slices of the table's buffers
(issue #42)."""


def arrived(acks: list[Acknowledgement], arrival: str) -> list[Acknowledgement]:
    """``acks`` in the order :data:`ARRIVALS`'s ``arrival`` names (a stable sort for "gathered":
    a (sink, partition)'s attempts keep their order)."""
    if arrival == "reversed":
        return acks[::-1]
    if arrival == "gathered":
        return sorted(acks, key=lambda a: (a.sink, a.partition))
    if arrival != "as_run":
        raise ValueError(f"unknown arrival {arrival!r}; known: {ARRIVALS}")
    return acks


ROLLING = {
    "spanning": ("jsonl", RollingPolicy()),
    "small": ("jsonl", RollingPolicy(max_file_bytes=60)),
    "on_checkpoint": ("jsonl", RollingPolicy(on_checkpoint=True)),
    "parquet": ("parquet", RollingPolicy()),
}
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def traced(method: F) -> F:
    """Record the step in the machine's trace (printed with any failure: replays of a failing
    life may diverge under asynchronous commit, so hypothesis's own report can be incomplete)."""

    @functools.wraps(method)
    def step(self: Any, **kwargs: Any) -> Any:
        self.trace.append(f"{method.__name__}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")
        return method(self, **kwargs)

    return step  # type: ignore[return-value]


# the errors a job may meet on these paths; anything else is a bug and fails the test
EXPECTED = (
    CheckpointStorageError,
    ConcurrentAttemptError,
    CommitFailedError,
    ServiceUnavailableError,
    TaskFailure,
    ModelDecodeFailure,
)
