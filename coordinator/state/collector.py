"""Pausing Python's cyclic garbage collector around the driver's bulk passes (issues #29, #42).

The driver's bulk passes (a checkpoint's trigger over every subtask, an epoch's acknowledgement
intake, building, encoding and parsing one checkpoint's metadata, the notification's pass over
every subtask and the confirmation of what the committer landed) allocate an object or more per
subtask or committable: at 10⁵ subtasks × 3 sinks, millions at once. Each allocation burst sets
off collections that walk every object the driver holds, the coordinator's retained committables
included, and these cost more than the pass itself. The
objects such a pass makes hold no reference cycles, so a collection during it frees nothing the
next one after it would not. The pause lasts one pass of coordinator code (which calls no user
code but the sinks' codecs), and the collector runs as usual afterwards.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the ``with`` block, then enable it again.

    Left alone if it was disabled already (by the user or an enclosing pause), so pauses nest and
    a user's own ``gc.disable()`` is kept. Reference counting frees objects as ever."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
