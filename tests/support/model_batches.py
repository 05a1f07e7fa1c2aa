"""A rule of the model-based protocol test (tests/coordinator/test_protocol_model.py) for the
committer's commit calls taken as columns (issue #42): a sink's ``commit_batch`` that answers
part of its batch, raises midway, or answers the wrong number of outcomes. Whatever it did in
the service, the runtime confirms only what it answered ``COMMITTED``/``ALREADY_COMMITTED`` in a
well-formed answer: the rest is retried (within the call) or re-committed by the restore, so the
accounting (every promise kept exactly once) and the committed-marker invariant hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.model_settle import arm_once
from twophase.sinks.api import TwoPhaseCommitSink
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
