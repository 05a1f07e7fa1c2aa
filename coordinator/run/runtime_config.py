"""Settings of a job runtime: checkpointing, commits, restarts, cancel cleanup."""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass, field

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.state.metrics import DEFAULT_METRICS_HISTORY
from twophase.sinks.errors import ConfigError, MissingExtraError

DEFAULT_GATHER_ABOVE = 500
"""Partitions above which a Spark epoch gathers its acknowledgements into one partition before the
driver collects them (:attr:`RuntimeConfig.gather_acknowledgements_above`): 10³ tasks are gathered
(the driver thread saves over 0.1 s), Spark's default 200 shuffle partitions and twice that are not
(at most 50 ms saved, against one more stage's latency). DESIGN.md §6, "The gather"."""


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
        metrics_port: serve the runtime's metrics for Prometheus on this TCP port while the job
            runs (``0``: any free port; ``None``: off). See
            :mod:`twophase.coordinator.run.prometheus_metrics`. Needs the ``metrics`` extra
            (prometheus-client): without it, :class:`MissingExtraError` naming
            ``pip install 'twophase[metrics]'``.
        metrics_address: the address the metrics endpoint binds to.
        metrics_history: how many of the newest checkpoints (and epochs) keep their own metrics;
            totals count every one. Bounds the driver's memory over a long streaming run.
        gather_acknowledgements_above: a Spark epoch of more partitions than this gathers its
            acknowledgement rows into one partition by a shuffle before the driver collects them,
            so the driver receives a few Arrow batches rather than one per task; ``None``: never
            (DESIGN.md §6, "The gather"; the default is justified in BENCHMARKS.md, "The
            acknowledgements gathered").
    """

    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    commit: CommitPolicy = field(default_factory=CommitPolicy)
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    cancel_cleanup: CleanupMode = CleanupMode.RETAIN
    abort_lingering_each_epoch: bool = True
    commit_drain_timeout_s: float | None = None
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    metrics_history: int = DEFAULT_METRICS_HISTORY
    gather_acknowledgements_above: int | None = DEFAULT_GATHER_ABOVE

    def __post_init__(self) -> None:
        if self.metrics_history < 1:
            raise ConfigError(f"metrics_history must be >= 1, got {self.metrics_history}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be within 0..65535 or None, got {self.metrics_port}")
        if self.metrics_port is not None:
            # prometheus-client is the metrics extra's, not the core install's: said where the
            # config is made, before a job exists
            try:
                importlib.import_module("prometheus_client")
            except ModuleNotFoundError as e:
                if (e.name or "").split(".")[0] != "prometheus_client":
                    raise
                port = "the metrics endpoint (RuntimeConfig.metrics_port)"
                raise MissingExtraError("metrics", "metrics", "prometheus-client", needed_by=port) from None
        gather = self.gather_acknowledgements_above
        if gather is not None and (isinstance(gather, bool) or not isinstance(gather, int) or gather < 0):
            raise ConfigError(
                f"gather_acknowledgements_above must be a whole number of partitions >= 0 or None (never "
                f"gather), got {gather!r}"
            )
