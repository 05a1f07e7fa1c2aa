"""The schedule of routine lingering cleanups that list a sink's output (#29's soak)."""

from __future__ import annotations

from twophase.sinks.internal.sweep import SweepSchedule


def pattern(schedule: SweepSchedule, calls: int, listing: int) -> str:
    """``L`` where a routine cleanup lists (finding ``listing`` entries), ``-`` where it is put off."""
    out = ""
    for _ in range(calls):
        if schedule.due():
            schedule.listed(listing)
            out += "L"
        else:
            out += "-"
    return out


def test_a_small_listing_runs_after_every_epoch() -> None:
    assert pattern(SweepSchedule(), 5, 999) == "LLLLL"


def test_a_listing_of_n_thousand_entries_runs_every_n_plus_one_epochs() -> None:
    assert pattern(SweepSchedule(), 7, 2_000) == "L--L--L"
    assert pattern(SweepSchedule(entries_per_epoch=10), 8, 35) == "L---L---"


def test_the_amortized_cost_per_epoch_stays_flat_as_the_listing_grows() -> None:
    schedule = SweepSchedule()
    listed = []
    for epoch in range(20_000):
        if schedule.due():
            entries = 2 * epoch  # two files an epoch, as in the soak
            schedule.listed(entries)
            listed.append(entries)
    first, last = sum(e for e in listed if e < 20_000), sum(e for e in listed if e >= 20_000)
    # both halves cost about entries_per_epoch per epoch, however large the listing got
    assert 0.5 * 1_000 * 10_000 < last < 1.5 * 1_000 * 10_000 and first < last


def test_a_listing_that_is_not_routine_starts_the_count_again() -> None:
    schedule = SweepSchedule(entries_per_epoch=10)
    schedule.listed(30)
    assert [schedule.due() for _ in range(2)] == [False, False]
    schedule.listed(30)  # e.g. the final checkpoint's cleanup
    assert [schedule.due() for _ in range(4)] == [False, False, False, True]
