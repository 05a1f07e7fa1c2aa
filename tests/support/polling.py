"""Waiting on another process or service in tests: poll with a bound, never assume it is done.

A process the test did not start, or one another process kills, ends when the kernel gets to it;
on a loaded machine that is after the call that caused it returned (issue #45 item 7: a sibling
still alive the moment its worker exited, under load). :func:`eventually` polls with tenacity.

Bounds are generous (60 s by default, for a machine at load 10 and more): a wait that passes costs
only the time it really takes, so a bound is what a failing test pays, never a passing one. A delay
never stands for an ordering: a test that needs one thread to finish after another makes it so (an
event, a condition, a barrier) instead of sleeping and hoping.
"""

from __future__ import annotations

from collections.abc import Callable

import tenacity


def eventually(condition: Callable[[], bool], timeout_s: float = 60.0, every_s: float = 0.05) -> bool:
    """Whether ``condition()`` held within ``timeout_s`` seconds, polling every ``every_s``."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda held: not held),
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(every_s),
        retry_error_callback=lambda state: False,
    )
    held: bool = retrying(condition)
    return held
