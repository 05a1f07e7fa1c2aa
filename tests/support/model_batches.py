"""A rule of the model-based protocol test (tests/coordinator/test_protocol_model.py) for the
committer's commit calls taken as columns (issue #42): a sink's ``commit_batch`` that answers
part of its batch, raises midway, or answers the wrong number of outcomes. Whatever it did in
the service, the runtime confirms only what it answered ``COMMITTED``/``ALREADY_COMMITTED`` in a
well-formed answer: the rest is retried (within the call) or re-committed by the restore, so the
accounting (every promise kept exactly once) and the committed-marker invariant hold. And a sink's
``abort_batch`` that fails midway: what it left pre-committed is in no checkpoint, and the lingering
cleanup aborts it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.model_settle import arm_once
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.outcome import CommitOutcome

BATCH_SINKS = ("k", "s", "p")
"""The model's per-committable sinks (``commit_batch``); Delta ("d") and Iceberg ("i") commit a
checkpoint whole (``commit_checkpoint``)."""

MISBEHAVIOURS = ("part_retry", "raises_midway", "too_many_outcomes", "too_few_outcomes")
"""What the sink's next ``commit_batch`` does: commits the first half and answers ``RETRY`` for
the rest; commits the first half (at least one) and raises; commits the first half and answers
``COMMITTED`` for every committable and one more; commits all but the last and answers for
those only."""


FIRED: list[str] = []
"""``"<sink> <how>"`` for every misbehaviour that fired (a restore that met one is started again)."""


class ModelBatchFailure(RuntimeError):
    """A ``commit_batch`` that raised midway (the model's): some committables were committed."""


def misbehaving_batch_once(sink: TwoPhaseCommitSink[Any, Any], how: str) -> None:
    """Make ``sink``'s next ``commit_batch`` misbehave as ``how`` (:data:`MISBEHAVIOURS`) around
    the sink's own; later calls are the sink's own again."""
    if how not in MISBEHAVIOURS:
        raise ValueError(f"unknown misbehaviour {how!r}; one of {MISBEHAVIOURS}")

    def commit_batch(committables: Sequence[Any]) -> list[CommitOutcome]:
        # the class's again (arm_once), for the retries and every later call
        FIRED.append(f"{sink.name} {how}")
        n = len(committables)
        half = n // 2
        if how == "part_retry":
            done = sink.commit_batch(list(committables[:half])) if half else []
            return [*done, *[CommitOutcome.RETRY] * (n - half)]
        if how == "raises_midway":
            sink.commit_batch(list(committables[: max(1, half)]))
            raise ModelBatchFailure(f"model: sink {sink.name!r}'s commit_batch raised midway")
        if how == "too_many_outcomes":
            if half:
                sink.commit_batch(list(committables[:half]))
            return [CommitOutcome.COMMITTED] * (n + 1)
        if n > 1:
            return sink.commit_batch(list(committables[:-1]))
        return []

    arm_once(sink, "commit_batch", commit_batch)


ABORT_SINKS = ("k", "s", "d", "p", "i")
"""Every sink of the model aborts an aborted checkpoint's transactions with one ``abort_batch``."""


def failing_abort_batch_once(sink: TwoPhaseCommitSink[Any, Any]) -> None:
    """Make ``sink``'s next ``abort_batch`` abort the first half of its committables (at least one)
    with the sink's own, then raise ``ServiceUnavailableError`` (the service went away midway);
    later calls are the sink's own again. The rest stays pre-committed in no checkpoint: the
    lingering cleanup must abort it, and none of it may ever commit."""

    def abort_batch(committables: Sequence[Any]) -> None:
        FIRED.append(f"{sink.name} abort_batch fails midway")
        sink.abort_batch(list(committables[: max(1, len(committables) // 2)]))
        raise ServiceUnavailableError(
            f"model: sink {sink.name!r} became unreachable midway through abort_batch"
        )

    arm_once(sink, "abort_batch", abort_batch)
