"""Restart strategies: fixed delay and exponential backoff (tenacity), at most N within a window."""

from __future__ import annotations

import pytest
from support.clock import ManualClock

from twophase.coordinator.run.restart import RestartKind, RestartStrategy, RestartTracker
from twophase.sinks.errors import ConfigError


def test_fixed_delay_at_most_n_in_all() -> None:
    t = RestartTracker(RestartStrategy.fixed_delay(max_restarts=2, delay_ms=1500), ManualClock())
    assert [t.try_restart(), t.try_restart(), t.try_restart()] == [1.5, 1.5, None]


def test_exponential_backoff_is_capped() -> None:
    clock = ManualClock()
    t = RestartTracker(RestartStrategy.exponential_backoff(5, initial_delay_ms=100, max_delay_ms=500), clock)
    assert [t.try_restart() for _ in range(6)] == [0.1, 0.2, 0.4, 0.5, 0.5, None]


def test_window_counts_only_recent_restarts_and_resets_the_backoff() -> None:
    clock = ManualClock()
    t = RestartTracker(
        RestartStrategy.exponential_backoff(2, initial_delay_ms=100, max_delay_ms=10_000, window_ms=1000),
        clock,
    )
    assert t.try_restart() == 0.1
    clock.advance(500)
    assert t.try_restart() == 0.2
    assert t.try_restart() is None  # 2 within the last second
    clock.advance(501)  # the first left the window
    assert t.try_restart() == 0.2
    clock.advance(10_000)
    assert t.try_restart() == 0.1


def test_none_never_restarts() -> None:
    strategy = RestartStrategy.none()
    assert strategy.kind is RestartKind.NONE
    assert RestartTracker(strategy, ManualClock()).try_restart() is None


def test_bad_strategies_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        RestartStrategy(max_restarts=-1)
    with pytest.raises(ConfigError):
        RestartStrategy(window_ms=0)
    with pytest.raises(ConfigError):
        RestartStrategy(multiplier=1.0)
    with pytest.raises(ConfigError):
        RestartStrategy(delay_ms=10, max_delay_ms=5)


def _asked(t: RestartTracker, attempt: int, stop_first: bool) -> float | None:
    """One failed attempt as tenacity asks about it: ``stop`` then ``wait`` (tenacity 8.2), or
    ``wait`` then ``stop`` (8.3 and later); the delay, or ``None`` once stopped."""
    from tenacity import RetryCallState, Retrying

    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = attempt
    stop, wait = t.as_stop(), t.as_wait()
    if stop_first:
        return None if stop(state) else wait(state)
    delay = wait(state)
    return None if stop(state) else delay


@pytest.mark.parametrize("stop_first", [True, False], ids=["tenacity-8.2", "tenacity-8.3+"])
def test_the_delays_do_not_depend_on_the_order_tenacity_asks_in(stop_first: bool) -> None:
    t = RestartTracker(
        RestartStrategy.exponential_backoff(3, initial_delay_ms=100, max_delay_ms=10_000), ManualClock()
    )
    assert [_asked(t, n, stop_first) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, None]
