"""Lets a model-based test look at a job only once its asynchronous commits are done.

Hypothesis replays a rule-based test from its drawn choices, so the rules that are enabled after
each step must follow from those choices alone. A commit still running on a runtime's committer
thread when a rule ends makes the next preconditions depend on timing: whether that commit (or
its failure) landed before the next rule looked. Hypothesis then stops with
``FlakyStrategyDefinition`` (``make model-check``, seed 2, 2026-11-25). Waiting at the end of every
action keeps each step's outcome a function of the drawn choices; stalls armed inside a step
still overlap that step's own work. For the same reason the models run the committer's lanes (one
per sink, on threads at once, nothing started after the first failure) in one fixed schedule,
:func:`lanes_in_order`: which lanes had started when another failed was timing too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from twophase.coordinator.commit.lanes import Lane
from twophase.coordinator.run.runtime import JobRuntime

T = TypeVar("T")


def settle(*runtimes: JobRuntime, timeout_s: float = 30.0) -> None:
    """Wait until no asynchronous commit of ``runtimes`` is queued or running (their errors stay
    recorded for the runtime to raise at its next step).

    Raises:
        TimeoutError: a commit still ran after ``timeout_s`` seconds (a hung model).
    """
    deadline = time.monotonic() + timeout_s
    for rt in dict.fromkeys(runtimes):  # the same runtime twice is waited for once
        run = rt.run
        while run is not None and run.committer.busy:
            if time.monotonic() > deadline:
                raise TimeoutError(f"asynchronous commits of {rt.job_id} still running after {timeout_s} s")
            time.sleep(0.001)


def lanes_in_order(lanes: Sequence[Lane[T]], fn: Callable[[T], object], *, thread_prefix: str) -> None:
    """:func:`~twophase.coordinator.commit.lanes.run_lanes` in one of its schedules, the same every
    time: the lanes one after another in their order, each lane's items in order, on the calling
    thread; the first exception is raised at once, so nothing starts after it (as ``run_lanes``
    promises). Lanes on threads at once made a drawn life's outcome depend on whether a lane had
    started when another failed: an armed fault of its sink fired, or stayed armed for a later
    commit (``make model-check`` seed 8 under load, 2026-12-04:
    ``test_a_commit_of_several_sinks_goes_one_way_whatever_the_lanes_timing``).

    Raises:
        The first exception ``fn`` raised.
    """
    del thread_prefix  # no threads
    for lane in lanes:
        for item in lane.items:
            fn(item)


def arm_once(obj: Any, name: str, fire: Callable[..., Any]) -> None:
    """Make ``obj``'s next call of method ``name`` run ``fire`` (with the call's arguments) in its
    place; every later call is the class's own method again. Once means once, whichever thread
    calls first: a second thread that took the armed method before the first ran it gets the
    class's own (``test_a_fault_armed_once_fires_once_when_two_threads_took_it_at_once``)."""
    lock = threading.Lock()
    armed = [True]

    def once(*args: Any, **kwargs: Any) -> Any:
        with lock:
            first, armed[0] = armed[0], False
            if first:
                vars(obj).pop(name, None)  # the class's again, for every later call
        if first:
            return fire(*args, **kwargs)
        return getattr(type(obj), name)(obj, *args, **kwargs)

    setattr(obj, name, once)
