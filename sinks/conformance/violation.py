"""What the conformance kit raises when a sink breaks the contract."""

from __future__ import annotations

from collections.abc import Sequence


class ContractViolation(AssertionError):
    """A sink broke the two-phase-commit contract.

    The message names the check (e.g. "commit is not idempotent") and what was seen, then the
    history of the life that led there, one numbered step per line, with the driver's calls into
    the sink and their answers (hypothesis reports the shrunk life: the shortest it found).

    Attributes:
        check: the check that failed, in a few words.
        history: the steps, in plain words.
    """

    def __init__(self, check: str, detail: str, history: Sequence[str]) -> None:
        steps = "\n".join(f"  {line}" for line in history) or "  (no step)"
        super().__init__(f"{check}: {detail}\nhistory of this life:\n{steps}")
        self.check = check
        self.history = tuple(history)
