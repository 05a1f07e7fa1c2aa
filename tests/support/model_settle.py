"""Lets a model-based test look at a job only once its asynchronous commits are done.

Hypothesis replays a rule-based test from its drawn choices, so the rules that are enabled after
each step must follow from those choices alone. A commit still running on a runtime's committer
thread when a rule ends makes the next preconditions depend on timing: whether that commit (or
its failure) landed before the next rule looked. Hypothesis then stops with
``FlakyStrategyDefinition`` (``make model-check``, seed 2, 2026-11-25). Waiting at the end of every
action keeps each step's outcome a function of the drawn choices; stalls armed inside a step
still overlap that step's own work.
"""

from __future__ import annotations

import time

from twophase.coordinator.run.runtime import JobRuntime


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
