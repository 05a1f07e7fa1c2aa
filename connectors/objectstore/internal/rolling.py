"""When an open file rolls, as pure decisions (no I/O): size, age, inactivity, checkpoints, and
the store's limit on the pieces (S3 parts, Azure blocks) one object may be made of."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from twophase.connectors.objectstore.internal.layout import FileFormat, RollingPolicy

Clock = Callable[[], int]
"""Wall clock in ms since the epoch (injectable for tests)."""


def wall_clock_ms() -> int:
    """The current time in ms since the epoch."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class FileStats:
    """What the rolling policy looks at for one open file.

    Attributes:
        byte_count: bytes written to the file so far (uploaded plus buffered).
        parts_used: the highest part (S3) or block (Azure) number uploaded so far (0 if none).
        opened_at_ms: when the file was opened, ms since the epoch.
        last_write_ms: when the file was last written, ms since the epoch.
    """

    byte_count: int
    parts_used: int
    opened_at_ms: int
    last_write_ms: int


def piece_limit_reached(parts_used: int, max_parts: int, pending_full_parts: int = 0) -> bool:
    """Whether a file must roll to stay within ``max_parts`` pieces (one is kept for the last)."""
    return parts_used + pending_full_parts >= max_parts - 1


def roll_after_write(stats: FileStats, policy: RollingPolicy, now_ms: int, max_parts: int) -> bool:
    """Whether a file rolls right after a batch was written to it (size, age, piece limit).

    Inactivity is not checked here: the file was just written.
    """
    if stats.byte_count >= policy.max_file_bytes or piece_limit_reached(stats.parts_used, max_parts):
        return True
    return (
        policy.rollover_interval_ms is not None and now_ms - stats.opened_at_ms >= policy.rollover_interval_ms
    )


def roll_on_checkpoint(
    stats: FileStats, policy: RollingPolicy, fmt: FileFormat, now_ms: int, max_parts: int
) -> bool:
    """Whether a file rolls at a checkpoint (``pre_commit``).

    Parquet always rolls (its footer comes last, so it cannot be resumed); row formats roll when
    ``policy.on_checkpoint`` is set or the size, age or inactivity limit is reached.
    """
    if not fmt.spans_checkpoints or policy.on_checkpoint:
        return True
    if roll_after_write(stats, policy, now_ms, max_parts):
        return True
    return (
        policy.inactivity_interval_ms is not None
        and now_ms - stats.last_write_ms >= policy.inactivity_interval_ms
    )
