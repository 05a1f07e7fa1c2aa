"""A manual millisecond clock for deterministic tests and the harness."""

from __future__ import annotations

import threading


class ManualClock:
    """A clock that moves only when told to (tests, the harness). Thread-safe.

    Args:
        start_ms: the initial time, ms since the epoch.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` (≥ 0) forward; return the new time.

        Raises:
            ValueError: ``ms`` < 0 (time never goes back).
        """
        if ms < 0:
            raise ValueError(f"a clock never goes back, got {ms} ms")
        with self._lock:
            self._now += ms
            return self._now

    def sleep(self, seconds: float) -> None:
        """A ``time.sleep`` replacement that advances this clock instead of waiting."""
        self.advance(round(seconds * 1000))
