"""Waiting on another process or service in tests: poll with a bound, never assume it is done.

A process the test did not start, or one another process kills, ends when the kernel gets to it;
on a loaded machine that is after the call that caused it returned (issue #45 item 7: a sibling
still alive the moment its worker exited, under load). :func:`eventually` polls with tenacity.
"""

from __future__ import annotations

from collections.abc import Callable

import tenacity


def eventually(condition: Callable[[], bool], timeout_s: float = 30.0, every_s: float = 0.05) -> bool:
    """Whether ``condition()`` held within ``timeout_s`` seconds, polling every ``every_s``."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda held: not held),
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(every_s),
        retry_error_callback=lambda state: False,
    )
    held: bool = retrying(condition)
    return held
