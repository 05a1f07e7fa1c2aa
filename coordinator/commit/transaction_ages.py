"""Warnings for pre-committed transactions that near the external system's transaction timeout.

An open Kafka transaction is aborted by the broker at ``transaction.timeout.ms`` (KIP-98); a
pre-committed one that is not committed in time is LOST. :class:`TransactionAgeMonitor` warns
once per transaction when one passes a share (80% by default) of the timeout, so that a commit
that lags shows up before it costs data.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from twophase.coordinator.state.clock import Clock, system_clock_ms
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)


class TransactionAgeMonitor:
    """Warns once per transaction when a pending one passes ``ratio`` × the transaction timeout.

    Args:
        job_id: for log fields.
        transaction_timeout_ms: the timeout set in the commit policy, ms, or ``None``.
        ratio: the warning threshold as a fraction of the timeout (0.8 = 80%).
        clock: ms clock (injectable for tests).
        sink_timeouts: sink name → the timeout the sink itself reports
            (``TwoPhaseCommitSink.transaction_timeout_ms``, e.g. Kafka's ``transaction.timeout.ms``).
            A transaction's timeout is the smaller of the two; with neither, no warning.
    """

    def __init__(
        self,
        job_id: str,
        transaction_timeout_ms: int | None,
        ratio: float = 0.8,
        clock: Clock = system_clock_ms,
        sink_timeouts: Mapping[str, int] | None = None,
    ) -> None:
        self.job_id = job_id
        self.timeout_ms = transaction_timeout_ms
        self.sink_timeouts = dict(sink_timeouts or {})
        self.ratio = ratio
        self.clock = clock
        self._warned: weakref.WeakSet[PendingTransaction[Any]] = weakref.WeakSet()

    def check(self, pending: Iterable[PendingTransaction[Any]]) -> list[PendingTransaction[Any]]:
        """Log a WARNING for each pending transaction newly past the threshold; return them."""
        now = self.clock()
        warned: list[PendingTransaction[Any]] = []
        for t in pending:
            known = [x for x in (self.timeout_ms, self.sink_timeouts.get(t.sink_name)) if x is not None]
            if not known:
                continue
            timeout = min(known)
            age = now - t.pre_committed_ms
            if age >= self.ratio * timeout and t not in self._warned:
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
                    timeout_ms=timeout,
                    committable=t.committable,
                )
        return warned
