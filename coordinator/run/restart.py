"""Restart strategies for failover (DESIGN.md §5): fixed delay or exponential backoff, at most N
restarts within a time window, through tenacity.

:class:`RestartStrategy` is configuration; :class:`RestartTracker` remembers the restarts of one
job and gives tenacity a ``stop`` (exhausted: at most ``max_restarts`` within ``window_ms``, like
Flink's failure-rate strategy; without a window, at most ``max_restarts`` in all, like Flink's
fixed-delay strategy) and a ``wait`` (``wait_fixed`` or ``wait_exponential``, by the number of
restarts within the window).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

from tenacity import RetryCallState, Retrying, wait_exponential, wait_fixed
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from twophase.coordinator.state.clock import Clock, system_clock_ms
from twophase.sinks.errors import ConfigError

log = logging.getLogger(__name__)


class RestartKind(enum.Enum):
    """How the delay between restarts grows."""

    NONE = "none"
    FIXED_DELAY = "fixed_delay"
    EXPONENTIAL_BACKOFF = "exponential_backoff"


@dataclass(frozen=True)
class RestartStrategy:
    """When and how fast a failed job restarts.

    Attributes:
        kind: no restarts, a fixed delay, or exponential backoff.
        max_restarts: restarts allowed (within ``window_ms`` if set), ≥ 0.
        window_ms: the sliding window, ms, in which ``max_restarts`` applies; ``None``: in all.
        delay_ms: the fixed delay, or the first backoff, ms.
        max_delay_ms: the backoff cap, ms.
        multiplier: the backoff growth factor (> 1).

    Raises:
        ConfigError: an out-of-range value.
    """

    kind: RestartKind = RestartKind.FIXED_DELAY
    max_restarts: int = 3
    window_ms: int | None = None
    delay_ms: int = 1_000
    max_delay_ms: int = 60_000
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.window_ms is not None and self.window_ms <= 0:
            raise ConfigError(f"restart window_ms must be > 0, got {self.window_ms}")
        if self.delay_ms < 0 or self.max_delay_ms < self.delay_ms:
            raise ConfigError("restart delays must satisfy 0 <= delay_ms <= max_delay_ms")
        if self.multiplier <= 1:
            raise ConfigError(f"restart multiplier must be > 1, got {self.multiplier}")

    @classmethod
    def none(cls) -> RestartStrategy:
        """Never restart: the first failure fails the job."""
        return cls(kind=RestartKind.NONE, max_restarts=0)

    @classmethod
    def fixed_delay(cls, max_restarts: int, delay_ms: int, window_ms: int | None = None) -> RestartStrategy:
        """Restart after ``delay_ms``, at most ``max_restarts`` times (within ``window_ms``)."""
        return cls(RestartKind.FIXED_DELAY, max_restarts, window_ms, delay_ms, max(delay_ms, 1))

    @classmethod
    def exponential_backoff(
        cls,
        max_restarts: int,
        initial_delay_ms: int,
        max_delay_ms: int,
        multiplier: float = 2.0,
        window_ms: int | None = None,
    ) -> RestartStrategy:
        """Restart after ``initial_delay_ms`` × ``multiplier``^k (capped), at most ``max_restarts`` times."""
        return cls(
            RestartKind.EXPONENTIAL_BACKOFF,
            max_restarts,
            window_ms,
            initial_delay_ms,
            max_delay_ms,
            multiplier,
        )

    def tenacity_wait(self) -> wait_base:
        """The tenacity wait for this strategy (seconds by attempt number)."""
        if self.kind is RestartKind.EXPONENTIAL_BACKOFF:
            return wait_exponential(
                multiplier=self.delay_ms / 1000.0, max=self.max_delay_ms / 1000.0, exp_base=self.multiplier
            )
        return wait_fixed(self.delay_ms / 1000.0)


@dataclass
class RestartTracker:
    """The restarts of one job under a :class:`RestartStrategy`.

    Args:
        strategy: the configuration.
        clock: ms clock (injectable for tests).
    """

    strategy: RestartStrategy
    clock: Clock = system_clock_ms
    restarts: list[int] = field(default_factory=list)
    """When each restart was granted, ms since the epoch."""
    granted: tuple[RetryCallState, int, float] | None = None
    """The tenacity call and attempt number the last restart was granted for, and its delay (s)."""

    def _in_window(self, now: int) -> list[int]:
        w = self.strategy.window_ms
        return list(self.restarts) if w is None else [t for t in self.restarts if now - t < w]

    def next_delay_s(self) -> float:
        """The delay, in seconds, the next granted restart waits (tenacity's wait by restart number)."""
        state = RetryCallState(Retrying(), None, (), {})
        state.attempt_number = len(self._in_window(self.clock())) + 1
        return float(self.strategy.tenacity_wait()(state))

    def try_restart(self) -> float | None:
        """A failure happened: grant a restart and return its delay in seconds, or ``None`` when
        the strategy is exhausted (the job must fail)."""
        if self.strategy.kind is RestartKind.NONE:
            return None
        if len(self._in_window(self.clock())) >= self.strategy.max_restarts:
            return None
        delay = self.next_delay_s()
        self.restarts.append(self.clock())
        return delay

    def grant_for(self, retry_state: RetryCallState) -> float | None:
        """:meth:`try_restart` for a failed attempt of a tenacity call, remembered for
        :meth:`delay_for`."""
        delay = self.try_restart()
        if delay is not None:
            self.granted = (retry_state, retry_state.attempt_number, delay)
        return delay

    def delay_for(self, retry_state: RetryCallState) -> float:
        """The delay after a failed attempt of a tenacity call: the one granted to it when tenacity
        asked ``stop`` first (8.2), else the next restart's (8.3 and later ask ``wait`` first)."""
        granted = self.granted
        if granted is not None and granted[0] is retry_state and granted[1] == retry_state.attempt_number:
            return granted[2]
        return self.next_delay_s()

    def as_stop(self) -> stop_base:
        """A tenacity ``stop``: true once the strategy is exhausted; otherwise it grants a restart."""
        return _TrackerStop(self)

    def as_wait(self) -> wait_base:
        """A tenacity ``wait``: the delay of the restart after a failed attempt (:meth:`delay_for`)."""
        return _TrackerWait(self)


class _TrackerStop(stop_base):
    def __init__(self, tracker: RestartTracker) -> None:
        self.tracker = tracker

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.tracker.grant_for(retry_state) is None


class _TrackerWait(wait_base):
    def __init__(self, tracker: RestartTracker) -> None:
        self.tracker = tracker

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.tracker.delay_for(retry_state)
