"""Pure decisions of the S3 writer: when a file rolls, how a buffer becomes parts (no I/O).

S3's multipart rules (AWS "Amazon S3 multipart upload limits"): every part except the last is
≥ 5 MiB and ≤ 5 GiB, at most 10,000 parts per upload. The writer uploads full parts of
``part_size_bytes`` as data arrives; what is left at a checkpoint is uploaded as one more part if
it has ≥ 5 MiB, or else stored as a temporary *tail object*, since it may not be the last part.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from twophase.connectors.s3.config import MAX_PARTS, MIN_PART_BYTES, FileFormat, RollingPolicy


@dataclass(frozen=True)
class FileStats:
    """What the rolling policy looks at for one open file.

    Attributes:
        byte_count: bytes written to the file so far (uploaded plus buffered).
        parts_used: the highest part number uploaded so far (0 if none).
        opened_at_ms: when the file was opened, ms since the epoch.
        last_write_ms: when the file was last written, ms since the epoch.
    """

    byte_count: int
    parts_used: int
    opened_at_ms: int
    last_write_ms: int


def part_limit_reached(parts_used: int, pending_full_parts: int = 0) -> bool:
    """Whether a file must roll to stay within 10,000 parts (one number is kept for the last part)."""
    return parts_used + pending_full_parts >= MAX_PARTS - 1


def should_roll_after_write(stats: FileStats, policy: RollingPolicy, now_ms: int) -> bool:
    """Whether a file rolls right after a batch was written to it (size, age, part limit).

    Inactivity is not checked here: the file was just written.
    """
    if stats.byte_count >= policy.max_file_bytes or part_limit_reached(stats.parts_used):
        return True
    return (
        policy.rollover_interval_ms is not None and now_ms - stats.opened_at_ms >= policy.rollover_interval_ms
    )


def should_roll_on_checkpoint(stats: FileStats, policy: RollingPolicy, fmt: FileFormat, now_ms: int) -> bool:
    """Whether a file rolls at a checkpoint (``pre_commit``).

    Parquet always rolls (its footer comes last, so it cannot be resumed); row formats roll when
    ``policy.on_checkpoint`` is set or the size, age or inactivity limit is reached.
    """
    if not fmt.spans_checkpoints or policy.on_checkpoint:
        return True
    if should_roll_after_write(stats, policy, now_ms):
        return True
    return (
        policy.inactivity_interval_ms is not None
        and now_ms - stats.last_write_ms >= policy.inactivity_interval_ms
    )


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
