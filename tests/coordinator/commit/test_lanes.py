"""run_lanes: lanes concurrently, order within a sequential lane, nothing new after an error."""

from __future__ import annotations

import threading

import pytest

from twophase.coordinator.commit.lanes import Lane, run_lanes


def test_one_sequential_lane_runs_in_order_in_the_calling_thread() -> None:
    seen: list[tuple[int, str]] = []
    run_lanes(
        [Lane("a", (1, 2, 3))], lambda i: seen.append((i, threading.current_thread().name)), thread_prefix="t"
    )
    assert seen == [(i, threading.current_thread().name) for i in (1, 2, 3)]
    run_lanes([], lambda i: seen.append((i, "")), thread_prefix="t")
    run_lanes([Lane("empty", ())], lambda i: seen.append((i, "")), thread_prefix="t")
    assert len(seen) == 3


def test_lanes_and_a_lanes_parallel_items_overlap() -> None:
    barrier = threading.Barrier(4, timeout=60)  # room for a loaded machine (#45 item 7)
    order: dict[str, list[int]] = {"seq1": [], "seq2": []}

    def fn(item: tuple[str, int]) -> None:
        lane, i = item
        if i == 0:
            barrier.wait()  # 4 items at once: seq1's first, seq2's first, two of par's
        if lane in order:
            order[lane].append(i)

    run_lanes(
        [
            Lane("seq1", (("seq1", 0), ("seq1", 1), ("seq1", 2))),
            Lane("seq2", (("seq2", 0), ("seq2", 1))),
            Lane("par", (("par", 0), ("par", 0)), parallelism=2),
        ],
        fn,
        thread_prefix="t",
    )
    assert order == {"seq1": [0, 1, 2], "seq2": [0, 1]}


def test_after_the_first_error_nothing_new_starts_and_it_is_raised() -> None:
    started: list[int] = []
    second_lane_may_go = threading.Event()

    def fn(i: int) -> None:
        started.append(i)
        if i == 1:
            second_lane_may_go.set()
            raise RuntimeError("boom")
        if i == 10:
            second_lane_may_go.wait(5)

    with pytest.raises(RuntimeError, match="boom"):
        run_lanes([Lane("a", (1, 2, 3)), Lane("b", (10, 11, 12))], fn, thread_prefix="t")
    assert 2 not in started and 3 not in started  # lane a stopped at its error
    ran: list[int] = []
    with pytest.raises(ValueError, match="lane 'bad': parallelism"):
        run_lanes([Lane("good", (1, 2)), Lane("bad", (3,), parallelism=0)], ran.append, thread_prefix="t")
    assert ran == []  # refused before any item starts
