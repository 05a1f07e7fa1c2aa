"""Transactional id naming and the pool invariant (pure functions, no broker)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase.connectors.kafka.internal import naming

prefixes = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True)
sinks = st.from_regex(r"[A-Za-z0-9_.]{1,20}", fullmatch=True)


@given(prefixes, sinks, st.integers(0, 10_000), st.integers(0, 10_000), st.integers(1, 64), st.integers(0, 9))
def test_id_round_trips_and_matches_its_pattern(
    prefix: str, sink: str, partition: int, checkpoint: int, pool: int, attempt: int
) -> None:
    txn_id = naming.transactional_id_for(prefix, sink, partition, checkpoint, pool, attempt)
    assert txn_id == f"{prefix}-{sink}-{partition}-{checkpoint % pool}-{attempt}"
    assert naming.parse_transactional_id(txn_id, prefix, sink) == naming.ParsedTransactionalId(
        prefix, sink, partition, checkpoint % pool, attempt
    )
    assert re.fullmatch(naming.id_pattern(prefix, sink), txn_id)


@given(prefixes, sinks, st.integers(0, 10_000), st.integers(0, 63))
def test_ids_of_the_earlier_shared_scheme_still_parse(
    prefix: str, sink: str, partition: int, slot: int
) -> None:
    # lingering cleanup must find what a version before #26 left open
    legacy = f"{prefix}-{sink}-{partition}-{slot}"
    assert naming.parse_transactional_id(legacy, prefix, sink) == naming.ParsedTransactionalId(
        prefix, sink, partition, slot, None
    )
    assert re.fullmatch(naming.id_pattern(prefix, sink), legacy)


@given(st.integers(0, 99), st.integers(1, 8), st.integers(0, 9), st.integers(0, 9))
def test_attempts_of_one_subtask_never_share_an_id(partition: int, pool: int, a: int, b: int) -> None:
    # #26 item 4: an attempt that runs beside the acknowledged one cannot fence its transaction
    for checkpoint in range(1, 3 * pool):
        ours = naming.transactional_id_for("p", "s", partition, checkpoint, pool, a)
        theirs = naming.transactional_id_for("p", "s", partition, checkpoint, pool, b)
        assert (ours == theirs) == (a == b)


@given(prefixes, sinks, sinks, st.integers(0, 99), st.integers(0, 9))
def test_ids_of_other_sinks_never_parse_as_ours(
    prefix: str, ours: str, other: str, partition: int, slot: int
) -> None:
    theirs = naming.transactional_id(prefix, other, partition, slot)
    parsed = naming.parse_transactional_id(theirs, prefix, ours)
    assert (parsed is not None) == (other == ours)
    assert (re.fullmatch(naming.id_pattern(prefix, ours), theirs) is not None) == (other == ours)


def test_prefix_containing_dashes_does_not_capture_other_jobs() -> None:
    # job "a" with sink "x" vs job "a-x" with sink "s": different ids, no cross-parsing.
    ours = naming.transactional_id("twophase-a", "x", 0, 1)
    theirs = naming.transactional_id("twophase-a-x", "s", 0, 1)
    assert naming.parse_transactional_id(theirs, "twophase-a", "x") is None
    assert naming.parse_transactional_id(ours, "twophase-a-x", "s") is None
    assert not re.fullmatch(naming.id_pattern("twophase-a", "x"), theirs)


@pytest.mark.parametrize("name", ["", "a-b", "a b", "ü", "x/y"])
def test_sink_names_with_separators_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        naming.transactional_id("p", name, 0, 0)


def test_pool_ids_cover_every_partition_slot_and_first_attempts() -> None:
    ids = naming.pool_ids("p", "s", 3, 4)
    per_slot = naming.PROBED_ATTEMPTS + 1  # and the earlier scheme's shared id
    assert len(ids) == len(set(ids)) == 12 * per_slot
    assert {naming.parse_transactional_id(i, "p", "s") for i in ids} == {
        naming.ParsedTransactionalId("p", "s", part, slot, attempt)
        for part in range(3)
        for slot in range(4)
        for attempt in (None, *range(naming.PROBED_ATTEMPTS))
    }


@pytest.mark.parametrize(
    ("pool", "pending", "ok"), [(3, 1, True), (2, 1, False), (4, 2, True), (3, 2, False)]
)
def test_pool_size_needs_two_slots_of_headroom(pool: int, pending: int, ok: bool) -> None:
    if ok:
        naming.check_pool_size(pool, pending)
    else:
        with pytest.raises(ValueError, match="max_pending_checkpoints"):
            naming.check_pool_size(pool, pending)


def run_schedule(pool_size: int, max_pending: int, commit_steps: list[int]) -> list[tuple[int, list[int]]]:
    """Simulate the runtime: epoch w writes while checkpoints are pending; commits finish in order.

    ``commit_steps[i]`` is how many of the oldest pending commits finish before epoch i+1 starts
    (async commit: they may finish late). The runtime blocks (commits the oldest) whenever a
    checkpoint older than ``w - max_pending`` is still pending. Returns, per epoch, the pending
    checkpoints while it wrote.
    """
    pending: list[int] = []
    seen = []
    for w, done in enumerate(commit_steps, start=1):
        del pending[: min(done, len(pending))]
        while pending and pending[0] < w - max_pending:
            pending.pop(0)  # the runtime waits for this commit before starting epoch w
        seen.append((w, list(pending)))
        pending.append(w)  # checkpoint w completes; its commit runs asynchronously
    return seen


@settings(max_examples=300)
@given(st.integers(1, 4), st.integers(0, 3), st.lists(st.integers(0, 3), min_size=1, max_size=60))
def test_pool_invariant_no_writer_reuses_a_pending_id(max_pending: int, extra: int, steps: list[int]) -> None:
    pool_size = max_pending + naming.MIN_POOL_HEADROOM + extra
    naming.check_pool_size(pool_size, max_pending)
    for w, pending in run_schedule(pool_size, max_pending, steps):
        assert all(w - max_pending <= p < w for p in pending)
        assert not naming.reuses_pending_slot(w, pending, pool_size), (w, pending)


def test_async_commit_overlap_uses_distinct_ids() -> None:
    # checkpoint c's commit overlaps epoch c+1 (max_pending = 1, pool_size = 3), 50 epochs.
    for w, pending in run_schedule(3, 1, [0] * 50):
        assert pending == ([w - 1] if w > 1 else [])
        assert naming.transactional_id_for("p", "s", 0, w, 3) not in {
            naming.transactional_id_for("p", "s", 0, p, 3) for p in pending
        }


def test_a_pool_without_headroom_would_collide() -> None:
    # pool_size == max_pending: the writer of epoch w reuses the slot of pending w - pool_size.
    collisions = [
        w for w, pending in run_schedule(2, 2, [0] * 10) if naming.reuses_pending_slot(w, pending, 2)
    ]
    assert collisions


def test_ids_stay_bounded_over_many_checkpoints() -> None:
    ids = {naming.transactional_id_for("p", "s", part, c, 4) for c in range(1, 1001) for part in range(5)}
    assert len(ids) == 5 * 4
