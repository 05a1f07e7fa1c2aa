"""Pure decisions of the S3 writer: when a file rolls, how a buffer becomes parts (no I/O).

S3's multipart rules (AWS "Amazon S3 multipart upload limits"): every part except the last is
≥ 5 MiB and ≤ 5 GiB, at most 10,000 parts per upload. The writer uploads full parts of
``part_size_bytes`` as data arrives; what is left at a checkpoint is uploaded as one more part if
it has ≥ 5 MiB, or else stored as a temporary *tail object*, since it may not be the last part.
"""

from __future__ import annotations

import enum

from twophase.connectors.objectstore.internal.rolling import FileStats as FileStats
from twophase.connectors.objectstore.internal.rolling import (
    piece_limit_reached,
    roll_after_write,
    roll_on_checkpoint,
)
from twophase.connectors.s3.config import MAX_PARTS, MIN_PART_BYTES, FileFormat, RollingPolicy


def part_limit_reached(parts_used: int, pending_full_parts: int = 0) -> bool:
    """Whether a file must roll to stay within 10,000 parts (one number is kept for the last part)."""
    return piece_limit_reached(parts_used, MAX_PARTS, pending_full_parts)


def should_roll_after_write(stats: FileStats, policy: RollingPolicy, now_ms: int) -> bool:
    """Whether a file rolls right after a batch was written to it (size, age, part limit)."""
    return roll_after_write(stats, policy, now_ms, MAX_PARTS)


def should_roll_on_checkpoint(stats: FileStats, policy: RollingPolicy, fmt: FileFormat, now_ms: int) -> bool:
    """Whether a file rolls at a checkpoint (Parquet always; row formats by the policy)."""
    return roll_on_checkpoint(stats, policy, fmt, now_ms, MAX_PARTS)


def full_parts(buffered: int, part_size: int) -> int:
    """How many parts of exactly ``part_size`` bytes to upload now from ``buffered`` bytes."""
    if part_size < MIN_PART_BYTES:
        raise ValueError(f"part_size {part_size} below S3's minimum {MIN_PART_BYTES}")
    return buffered // part_size


class TailAction(enum.Enum):
    """What ``snapshot_in_progress`` does with the bytes still buffered for an open file."""

    NOTHING = "nothing"
    """Nothing buffered."""
    UPLOAD_PART = "upload_part"
    """≥ 5 MiB: upload them as one more part (it may be followed by others)."""
    TAIL_OBJECT = "tail_object"
    """< 5 MiB: too small for a non-last part; store them as a temporary tail object."""


def tail_action(buffered: int) -> TailAction:
    """Decide what happens to ``buffered`` bytes of an open file at a checkpoint."""
    if buffered <= 0:
        return TailAction.NOTHING
    return TailAction.UPLOAD_PART if buffered >= MIN_PART_BYTES else TailAction.TAIL_OBJECT
