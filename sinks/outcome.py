"""The result of one commit attempt, and what the runtime does with it (DESIGN.md §4)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CommitOutcome(enum.Enum):
    """What one ``commit``/``recover_and_commit`` call achieved.

    - ``COMMITTED``: committed now.
    - ``ALREADY_COMMITTED``: committed earlier (a re-commit after recovery); not an error.
    - ``RETRY``: a transient failure; the runtime retries with backoff (tenacity).
    - ``LOST``: the external system aborted the transaction (e.g. a timeout). Data is lost; the
      runtime fails loudly unless the user opted in.
    - ``FATAL``: an unknown failure; the job fails.
    """

    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"
    RETRY = "retry"
    LOST = "lost"
    FATAL = "fatal"

    @property
    def is_success(self) -> bool:
        """True for ``COMMITTED`` and ``ALREADY_COMMITTED``."""
        return self in (CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED)


@dataclass(frozen=True)
class CommittableSize:
    """What one committable holds, for metrics (``TwoPhaseCommitSink.measure``).

    Attributes:
        records: records in the transaction, or ``None`` if the sink does not know.
        bytes: bytes of data in the transaction, or ``None`` if the sink does not know.
    """

    records: int | None = None
    bytes: int | None = None


def checked_outcomes(answer: object, count: int) -> list[CommitOutcome]:
    """``answer``, a ``commit_batch`` call's return value, checked: one :class:`CommitOutcome` per
    committable of the batch (``count``), in input order.

    Raises:
        ValueError: not a sequence of ``count`` CommitOutcomes (names what is wrong): a batch whose
            rows cannot be matched to its committables confirms none of them.
    """
    if isinstance(answer, (str, bytes)) or not isinstance(answer, (list, tuple)):
        raise ValueError(f"commit_batch returned {type(answer).__name__}, not a list of CommitOutcome")
    if len(answer) != count:
        raise ValueError(f"commit_batch returned {len(answer)} outcomes for {count} committables")
    for i, outcome in enumerate(answer):
        if not isinstance(outcome, CommitOutcome):
            raise ValueError(f"commit_batch's outcome {i} is {outcome!r}, not a CommitOutcome")
    return list(answer)
