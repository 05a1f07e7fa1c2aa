"""The floor of a run's checkpoint ids: a restore starts ids above every id storage holds and every
checkpoint a sink's external system records as committed (DESIGN.md §12, "Checkpoint ids never
repeat a committed one")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class IdFloor:
    """What a restore started checkpoint ids above (DESIGN.md §12, "Checkpoint ids never repeat a
    committed one"), kept so that a refused id can name its true reason.

    Attributes:
        newest_stored: the newest checkpoint id in the job's storage (or restored), 0 if none.
        sinks: sink → the checkpoint its external system records as committed for this job
            (``last_committed_checkpoint``: Delta's txn version); sinks keeping no record are absent.
    """

    newest_stored: int = 0
    sinks: Mapping[str, int] = field(default_factory=dict)

    def refusal(self, job_id: str, asked: int, next_id: int, used_by_run: int) -> str:
        """The one-line reason checkpoint ``asked`` cannot be taken when the next id is ``next_id``
        and this run already triggered ids up to ``used_by_run`` (0: none): every source at or
        above ``asked``."""
        reasons = []
        if self.newest_stored >= asked:
            reasons.append(f"storage holds checkpoint {self.newest_stored}")
        for name, committed in sorted(self.sinks.items()):
            if committed >= asked:
                reasons.append(
                    f"sink {name!r} records checkpoint {committed} of this job as committed "
                    "(last_committed_checkpoint, e.g. Delta's txn version)"
                    + ("" if self.newest_stored else "; storage is empty")
                )
        if used_by_run >= asked:
            reasons.append(f"this run already used checkpoint ids up to {used_by_run}")
        return f"job {job_id}: checkpoint {asked} asked for, but the next id is {next_id}: " + "; ".join(
            reasons or [f"ids below {next_id} are taken"]
        )
