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
