"""How commits are retried, timed and run (:class:`CommitPolicy`), what the committer counts
(:class:`CommitterMetrics`), and what a lost transaction's error tells the user."""

from __future__ import annotations

from dataclasses import dataclass

from twophase.sinks.errors import ConfigError

LOST_WAY_FORWARD = (
    "Its records are not in the sink (e.g. the external system's transaction timeout passed while "
    "the job was down) unless the sink logged that it cannot tell. To restart anyway, set "
    "CommitPolicy(ignore_lost_on_recovery=True): lost transactions are then logged as errors and skipped."
)
"""What a :class:`~twophase.sinks.errors.TransactionLostError` tells the user to do."""

ASYNC_COMMIT_ABOVE = 128
"""The default :attr:`CommitPolicy.async_commit_above`, transactions per checkpoint. Batched, the
slowest connector measured commits about 144 transactions a second (Kafka, one EndTxn each;
PostgreSQL 405, S3 324: BENCHMARKS.md "Batch commit"), so a synchronous commit of up to 128 holds
the next epoch at most about a second, the driver's per-epoch goal of issue #42; above it the
commit would outgrow the epoch, and it overlaps the next one instead."""


@dataclass(frozen=True)
class CommitPolicy:
    """How commits are retried, timed and run.

    Attributes:
        max_attempts: commit attempts per transaction while the sink answers ``RETRY`` (≥ 1).
        initial_backoff_ms: the first backoff, ms; doubles per attempt.
        max_backoff_ms: the backoff cap, ms.
        max_retry_time_ms: total time budget per transaction, ms (``None``: attempts only).
        ignore_lost_on_recovery: opt-in, like Flink's ``ignoreFailuresAfterTransactionTimeout``:
            a transaction found ``LOST`` while recovering (after a restore) is logged as an ERROR
            and skipped instead of failing the job. Never applies outside recovery.
        transaction_timeout_ms: the external system's transaction timeout (e.g. Kafka's
            ``transaction.timeout.ms``), for age warnings; ``None`` disables them.
        timeout_warning_ratio: warn when a pending transaction's age passes this fraction of
            ``transaction_timeout_ms`` (0 < ratio ≤ 1; default 0.8).
        async_commit: commit on an ordered committer thread instead of synchronously (``True``),
            synchronously (``False``), or ``None`` (the default): synchronously until a
            checkpoint's commit holds more than ``async_commit_above`` transactions, then on the
            committer thread for the rest of the run (once a batch is queued, every later one
            queues behind it, so that checkpoints commit in order).
        async_commit_above: the threshold of ``async_commit=None``, transactions per checkpoint
            (≥ 1; default :data:`ASYNC_COMMIT_ABOVE`).

    Raises:
        ConfigError: an out-of-range value.
    """

    max_attempts: int = 8
    initial_backoff_ms: int = 100
    max_backoff_ms: int = 10_000
    max_retry_time_ms: int | None = 120_000
    ignore_lost_on_recovery: bool = False
    transaction_timeout_ms: int | None = None
    timeout_warning_ratio: float = 0.8
    async_commit: bool | None = None
    async_commit_above: int = ASYNC_COMMIT_ABOVE

    def commits_async(self, transactions: int) -> bool:
        """Whether a checkpoint's commit of ``transactions`` goes to the committer thread, as
        ``async_commit`` says (``None``: more than ``async_commit_above``)."""
        if self.async_commit is None:
            return transactions > self.async_commit_above
        return self.async_commit

    @property
    def retry_budget_ms(self) -> int:
        """The longest one transaction's commit retries may take, ms: ``max_retry_time_ms``, or
        without it the backoffs between ``max_attempts`` attempts (the attempts' own time excluded)."""
        if self.max_retry_time_ms is not None:
            return self.max_retry_time_ms
        backoffs = (self.initial_backoff_ms * 2**i for i in range(self.max_attempts - 1))
        return sum(min(b, self.max_backoff_ms) for b in backoffs)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"commit max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff_ms < 0 or self.max_backoff_ms < self.initial_backoff_ms:
            raise ConfigError("commit backoff must satisfy 0 <= initial_backoff_ms <= max_backoff_ms")
        if self.max_retry_time_ms is not None and self.max_retry_time_ms <= 0:
            raise ConfigError(f"commit max_retry_time_ms must be > 0, got {self.max_retry_time_ms}")
        if self.transaction_timeout_ms is not None and self.transaction_timeout_ms <= 0:
            raise ConfigError(f"transaction_timeout_ms must be > 0, got {self.transaction_timeout_ms}")
        if self.async_commit_above < 1:
            raise ConfigError(f"commit async_commit_above must be >= 1, got {self.async_commit_above}")
        if not 0 < self.timeout_warning_ratio <= 1:
            raise ConfigError(f"timeout_warning_ratio must be in (0, 1], got {self.timeout_warning_ratio}")


@dataclass(frozen=True)
class CommitterMetrics:
    """Cumulative committer counters.

    Attributes:
        committed: transactions committed now (``COMMITTED``; a checkpoint commit counts each of
            its transactions).
        already_committed: re-commits that found the transaction committed (``ALREADY_COMMITTED``).
        aborted: transactions aborted (pre-committed ones, through ``abort``/``recover_and_abort``).
        lost_ignored: ``LOST`` transactions skipped on recovery because the user opted in.
        retries: commit attempts that answered ``RETRY``.
        commit_time_ms: total time spent committing, ms.
    """

    committed: int = 0
    already_committed: int = 0
    aborted: int = 0
    lost_ignored: int = 0
    retries: int = 0
    commit_time_ms: float = 0.0
