"""The outcome of a commit that spans several files: the worst of the files' outcomes."""

from __future__ import annotations

from collections.abc import Iterable

from twophase.sinks.outcome import CommitOutcome

_SEVERITY = {
    CommitOutcome.ALREADY_COMMITTED: 0,
    CommitOutcome.COMMITTED: 1,
    CommitOutcome.RETRY: 2,
    CommitOutcome.LOST: 3,
    CommitOutcome.FATAL: 4,
}


def combine_outcomes(outcomes: Iterable[CommitOutcome]) -> CommitOutcome:
    """The outcome of a multi-file commit: the most severe of its files' outcomes.

    Raises:
        ValueError: no outcomes.
    """
    items = list(outcomes)
    if not items:
        raise ValueError("no outcomes to combine")
    return max(items, key=_SEVERITY.__getitem__)
