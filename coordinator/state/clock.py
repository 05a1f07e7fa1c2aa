"""Millisecond clocks: the system clock (a manual one for tests is in ``tests/support/clock.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""A clock: returns the current time in ms since the Unix epoch."""


def system_clock_ms() -> int:
    """The wall clock in ms since the Unix epoch."""
    return time.time_ns() // 1_000_000
