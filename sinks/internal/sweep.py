"""When a routine lingering cleanup that lists a sink's output lists it again.

The Delta and Iceberg sinks find lingering data files (written by failed or speculative attempts,
referenced by no commit, so no reader sees them) by listing every file of the job under the
table. That costs in proportion to the table: run after every epoch, it made each epoch of the
2-hour soak slower as the table grew (BENCHMARKS.md, "Soak"). So a routine cleanup
(:attr:`~twophase.sinks.context.LingeringScope.routine`) lists again only after as many epochs as
its last listing held thousands of entries. The listing's cost per epoch then stays about
constant, and a lingering file waits that many epochs at most. A cleanup that is not routine (an
end of the run, a restore, the CLI) always lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENTRIES_PER_EPOCH = 1_000
"""Listing entries a routine cleanup may cost per epoch, averaged over the epochs it skips."""


@dataclass
class SweepSchedule:
    """A driver-side sink's record of its last listing, deciding when a routine cleanup lists.

    Attributes:
        entries_per_epoch: listing entries per epoch to average down to (≥ 1).
    """

    entries_per_epoch: int = field(default_factory=lambda: ENTRIES_PER_EPOCH)
    _last_listed: int = field(default=0, init=False)
    _skipped: int = field(default=0, init=False)

    def due(self) -> bool:
        """Whether a routine cleanup lists now. A call answered ``False`` counts as one skipped
        epoch: after ``last listing's entries // entries_per_epoch`` of them, the next is due."""
        if self._skipped >= self._last_listed // self.entries_per_epoch:
            return True
        self._skipped += 1
        return False

    def listed(self, entries: int) -> None:
        """A listing of ``entries`` entries ran (routine or not): the count of skips starts again."""
        self._last_listed = entries
        self._skipped = 0
