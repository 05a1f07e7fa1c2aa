"""Settings of a job runtime: checkpointing, commits, restarts, cancel cleanup."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from twophase.coordinator.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit_policy import CommitPolicy
from twophase.coordinator.restart import RestartStrategy


class CleanupMode(enum.Enum):
    """What a cancel does with completed checkpoints (savepoints are always kept)."""

    RETAIN = "retain"
    DELETE = "delete"


@dataclass(frozen=True)
class RuntimeConfig:
    """Settings of a job runtime.

    Attributes:
        checkpoint: concurrency, timeout, retention.
        commit: commit retries, transaction-timeout warnings, async commit, LOST on recovery.
        restart: the restart strategy for :meth:`JobRuntime.failover`.
        cancel_cleanup: keep or delete completed checkpoints on cancel.
        abort_lingering_each_epoch: after each completed epoch, ``abort_lingering`` for what failed
            and speculative attempts left (DESIGN.md §6 step 7); skipped while another checkpoint
            is pending.
        commit_drain_timeout_s: how long finish/stop wait for asynchronous commits (``None``: forever).
    """

    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    commit: CommitPolicy = field(default_factory=CommitPolicy)
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    cancel_cleanup: CleanupMode = CleanupMode.RETAIN
    abort_lingering_each_epoch: bool = True
    commit_drain_timeout_s: float | None = None
