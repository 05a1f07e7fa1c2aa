"""Driver-side work in lanes: independent lanes run concurrently, each lane in order or with its
own parallelism; after the first error nothing new starts.

Used for commits (one lane per sink, as a batch's calls come per sink:
``commit_calls.CallsBySink``) and for finishing
in-progress state on the driver at the final checkpoint: the sinks of a job are independent, so k
sinks take about as long as the slowest one rather than the sum (FLIP-147's single final
checkpoint should not cost k times one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Lane(Generic[T]):
    """Items processed in order (``parallelism`` 1) or by up to ``parallelism`` threads (≥ 1,
    checked by :func:`run_lanes` before any item starts: the commit path's lanes are all 1, and
    a check per lane made there would check a constant)."""

    name: str
    items: tuple[T, ...]
    parallelism: int = 1


def group_lanes(
    items: Iterable[T], name_of: Callable[[T], str], parallelism_of: Callable[[str], int]
) -> list[Lane[T]]:
    """One lane per name (``name_of(item)``), in order of first appearance, each keeping its
    items' order; a lane's parallelism is ``parallelism_of(name)`` capped at its number of items."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(name_of(item), []).append(item)
    return [Lane(name, tuple(group), min(parallelism_of(name), len(group))) for name, group in groups.items()]


def run_lanes(lanes: Sequence[Lane[T]], fn: Callable[[T], object], *, thread_prefix: str) -> None:
    """Call ``fn`` on every item of every lane: lanes concurrently, within a lane in order or up to
    its parallelism at once. A single sequential lane runs in the calling thread.

    After the first exception no item starts (in any lane); items already running finish; then
    the first exception is raised. Items never started are simply not processed: callers use this
    only for work that recovery redoes (commits) or that is not acknowledged when it fails.

    Raises:
        ValueError: a lane's parallelism is < 1 (before any item starts).
        The first exception ``fn`` raised.
    """
    for ln in lanes:
        if ln.parallelism < 1:
            raise ValueError(f"lane {ln.name!r}: parallelism must be >= 1, got {ln.parallelism}")
    lanes = [ln for ln in lanes if ln.items]
    if not lanes:
        return
    if len(lanes) == 1 and lanes[0].parallelism == 1:
        for item in lanes[0].items:
            fn(item)
        return
    failed = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(item: T) -> None:
        if failed.is_set():
            return
        try:
            fn(item)
        except BaseException as e:
            with lock:
                errors.append(e)
            failed.set()

    def lane(ln: Lane[T]) -> None:
        if ln.parallelism == 1:
            for item in ln.items:
                one(item)
            return
        with ThreadPoolExecutor(
            min(ln.parallelism, len(ln.items)), thread_name_prefix=f"{thread_prefix}-{ln.name}"
        ) as pool:
            list(pool.map(one, ln.items))

    with ThreadPoolExecutor(len(lanes), thread_name_prefix=thread_prefix) as pool:
        list(pool.map(lane, lanes))
    if errors:
        raise errors[0]
