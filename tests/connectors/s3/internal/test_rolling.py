"""Part sizing and rolling decisions: pure functions."""

from __future__ import annotations

import pytest

from twophase.connectors.s3.config import MAX_PARTS, MIN_PART_BYTES, FileFormat, MiB, RollingPolicy
from twophase.connectors.s3.internal.rolling import (
    FileStats,
    TailAction,
    full_parts,
    part_limit_reached,
    should_roll_after_write,
    should_roll_on_checkpoint,
    tail_action,
)

T0 = 1_000_000
POLICY = RollingPolicy(
    max_file_bytes=100 * MiB, rollover_interval_ms=60_000, inactivity_interval_ms=10_000, on_checkpoint=False
)


def stats(byte_count: int = 1, parts: int = 0, opened: int = T0, last: int = T0) -> FileStats:
    return FileStats(byte_count=byte_count, parts_used=parts, opened_at_ms=opened, last_write_ms=last)


def test_roll_after_write_on_size_age_and_part_limit_only() -> None:
    assert not should_roll_after_write(stats(), POLICY, T0)
    assert should_roll_after_write(stats(byte_count=100 * MiB), POLICY, T0)
    assert not should_roll_after_write(stats(byte_count=100 * MiB - 1), POLICY, T0)
    assert should_roll_after_write(stats(), POLICY, T0 + 60_000)
    assert not should_roll_after_write(stats(), POLICY, T0 + 59_999)
    # inactivity is not a reason right after a write
    assert not should_roll_after_write(stats(last=T0 - 50_000, opened=T0 - 50_000), POLICY, T0)
    assert should_roll_after_write(stats(parts=MAX_PARTS - 1), POLICY, T0)
    no_age = RollingPolicy(rollover_interval_ms=None)
    assert not should_roll_after_write(stats(), no_age, T0 + 10**12)


def test_roll_on_checkpoint() -> None:
    row = FileFormat.JSON_LINES
    assert not should_roll_on_checkpoint(stats(), POLICY, row, T0 + 9_999)
    assert should_roll_on_checkpoint(stats(), POLICY, row, T0 + 10_000)  # inactive
    assert should_roll_on_checkpoint(stats(last=T0 + 50_000), POLICY, row, T0 + 60_000)  # too old
    assert should_roll_on_checkpoint(stats(byte_count=100 * MiB), POLICY, FileFormat.CSV, T0)
    on_checkpoint = RollingPolicy(on_checkpoint=True)
    assert should_roll_on_checkpoint(stats(), on_checkpoint, row, T0)
    # Parquet cannot be resumed: always rolls
    assert should_roll_on_checkpoint(stats(), POLICY, FileFormat.PARQUET, T0)
    never = RollingPolicy(max_file_bytes=10**15, rollover_interval_ms=None, inactivity_interval_ms=None)
    assert not should_roll_on_checkpoint(stats(), never, row, T0 + 10**12)


def test_full_parts() -> None:
    part = 8 * MiB
    assert full_parts(0, part) == 0
    assert full_parts(part - 1, part) == 0
    assert full_parts(part, part) == 1
    assert full_parts(3 * part + 5, part) == 3
    with pytest.raises(ValueError):
        full_parts(10, MIN_PART_BYTES - 1)


def test_tail_action_respects_s3_minimum_part_size() -> None:
    assert tail_action(0) is TailAction.NOTHING
    assert tail_action(1) is TailAction.TAIL_OBJECT
    assert tail_action(MIN_PART_BYTES - 1) is TailAction.TAIL_OBJECT
    assert tail_action(MIN_PART_BYTES) is TailAction.UPLOAD_PART


def test_part_limit() -> None:
    assert not part_limit_reached(MAX_PARTS - 2)
    assert part_limit_reached(MAX_PARTS - 1)
    assert part_limit_reached(MAX_PARTS - 3, pending_full_parts=2)


def test_the_default_rolling_policy_is_flinks() -> None:
    # DefaultRollingPolicy: 128 MiB part size, 60 s rollover, 60 s inactivity (issue #18 §3)
    policy = RollingPolicy()
    assert (policy.max_file_bytes, policy.rollover_interval_ms, policy.inactivity_interval_ms) == (
        128 * 1024 * 1024,
        60_000,
        60_000,
    )
    assert not policy.on_checkpoint
