"""Warnings for pre-committed transactions that near the external system's transaction timeout.

An open Kafka transaction is aborted by the broker at ``transaction.timeout.ms`` (KIP-98); a
pre-committed one that is not committed in time is LOST. :class:`TransactionAgeMonitor` warns
once per transaction when one passes a share (80% by default) of the timeout, so that a commit
that lags shows up before it costs data.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable
from typing import Any

from twophase.coordinator.clock import Clock, system_clock_ms
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.sinks.structured_log import log_event

log = logging.getLogger(__name__)


class TransactionAgeMonitor:
    """Warns once per transaction when a pending one passes ``ratio`` × the transaction timeout.

    Args:
        job_id: for log fields.
        transaction_timeout_ms: the external system's timeout, ms; ``None`` disables warnings.
        ratio: the warning threshold as a fraction of the timeout (0.8 = 80%).
        clock: ms clock (injectable for tests).
    """

    def __init__(
        self,
        job_id: str,
        transaction_timeout_ms: int | None,
        ratio: float = 0.8,
        clock: Clock = system_clock_ms,
    ) -> None:
        self.job_id = job_id
        self.timeout_ms = transaction_timeout_ms
        self.ratio = ratio
        self.clock = clock
        self._warned: weakref.WeakSet[PendingTransaction[Any]] = weakref.WeakSet()

    def check(self, pending: Iterable[PendingTransaction[Any]]) -> list[PendingTransaction[Any]]:
        """Log a WARNING for each pending transaction newly past the threshold; return them."""
        if self.timeout_ms is None:
            return []
        now = self.clock()
        threshold = self.ratio * self.timeout_ms
        warned: list[PendingTransaction[Any]] = []
        for t in pending:
            age = now - t.pre_committed_ms
            if age >= threshold and t not in self._warned:
                self._warned.add(t)
                warned.append(t)
                log_event(
                    log,
                    logging.WARNING,
                    "pending transaction near its timeout",
                    job=self.job_id,
                    sink=t.sink_name,
                    checkpoint=t.checkpoint_id,
                    partition=t.partition,
                    attempt=t.attempt,
                    age_ms=age,
                    timeout_ms=self.timeout_ms,
                    committable=t.committable,
                )
        return warned
