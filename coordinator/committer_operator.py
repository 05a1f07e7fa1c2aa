"""The committer operator: commits and aborts pre-committed transactions through their sink
(driver side; Flink's ``CommitterOperator``, which drives a sink's ``Committer`` such as
``KafkaCommitter``).

Outcomes (``twophase.sinks.outcome.CommitOutcome``, DESIGN.md §4) drive what happens:

- ``COMMITTED`` / ``ALREADY_COMMITTED``: done.
- ``RETRY``: retried with exponential backoff (tenacity) within a budget of attempts and time
  (:class:`CommitPolicy`); past it :class:`~twophase.sinks.errors.CommitFailedError`. A sink raising
  :class:`~twophase.sinks.errors.ServiceUnavailableError` counts as ``RETRY``.
- ``FATAL`` (or any other exception from the sink): :class:`~twophase.sinks.errors.CommitFailedError`.
- ``LOST``: :class:`~twophase.sinks.errors.TransactionLostError` naming the sink and the transaction. Only
  during recovery (``recover_and_commit`` after a restore), and only if the user opted in with
  ``CommitPolicy.ignore_lost_on_recovery``, is it logged as an ERROR and skipped. This mirrors
  Flink's ``ignoreFailuresAfterTransactionTimeout``, which applies to recovery only: a transaction
  lost while the job runs normally means the timeout is too short for the checkpoint interval,
  which must never pass silently; one lost after a long outage is the case the flag exists for.

Pre-committed transactions hold resources in the external system until committed (an open Kafka
transaction holds back ``read_committed`` consumers and is aborted by the broker at
``transaction.timeout.ms``). :class:`TransactionAgeMonitor` warns once per transaction when one
passes 80% (configurable) of the configured timeout.

Work comes as the coordinator's pending transactions, unchanged. A commit call
(:data:`~twophase.coordinator.commit_calls.CommitCall`) is one transaction, or every transaction of
one checkpoint of a checkpoint-commit sink such as Delta. Retries, ``LOST`` handling, ordering,
asynchronous commit and confirmation work on whole calls; metrics count transactions.

Commits run synchronously by default. With ``CommitPolicy.async_commit`` they run on one ordered
committer thread: the commits of checkpoint c may overlap the next epoch, batches stay in
submission order, and an error surfaces on the next :meth:`CommitterOperator.raise_if_failed`
or :meth:`CommitterOperator.drain`; after an error the queued commits are skipped (the job fails and
recovery re-commits from checkpoint storage).

Within a batch (a checkpoint's notification, a restore, a cancel) the sinks commit concurrently,
one lane per sink (``commit_lanes``): the sinks of a job are independent, so k sinks finish in
about the time of the slowest rather than the sum. A sink's own calls stay in order, except
that a sink declaring ``commit_concurrency`` > 1 (its committables are independent, e.g. S3
multipart uploads) commits that many at once: recovering 1,000 pending uploads is not 1,000 round
trips in a row. A checkpoint-commit sink (Delta) is always committed checkpoint after checkpoint.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    stop_when_event_set,
    wait_exponential,
)

from twophase.coordinator.clock import Clock, system_clock_ms
from twophase.coordinator.commit_calls import CommitCall, check_call, commit_calls, commit_lanes
from twophase.coordinator.commit_policy import LOST_WAY_FORWARD, CommitPolicy, CommitterMetrics
from twophase.coordinator.lanes import run_lanes
from twophase.coordinator.metrics import SinkMetricsRecorder
from twophase.coordinator.subtask_lifecycle import PendingTransaction
from twophase.coordinator.transaction_ages import TransactionAgeMonitor
from twophase.sinks.api import CheckpointCommitSink, TwoPhaseCommitSink
from twophase.sinks.errors import (
    CommitFailedError,
    CommitWaitTimeoutError,
    ServiceUnavailableError,
    TransactionLostError,
)
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome, CommittableSize

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


def _what(sink: AnySink, txns: Sequence[PendingTransaction[Any]]) -> str:
    """A commit call in words, for its log line or error: sink, checkpoint, partitions, committables."""
    t = txns[0]
    if len(txns) == 1 and not isinstance(sink, CheckpointCommitSink):
        return (
            f"sink {sink.name!r} checkpoint {t.checkpoint_id} partition {t.partition} "
            f"attempt {t.attempt} transaction {t.committable!r}"
        )
    return (
        f"sink {sink.name!r} checkpoint {t.checkpoint_id} partitions {[x.partition for x in txns]} "
        f"({len(txns)} transactions, one checkpoint commit) transactions "
        f"{[x.committable for x in txns]!r}"
    )


class CommitterOperator:
    """Commits and aborts transactions through their sinks; see the module docstring.

    Args:
        job_id: for log fields.
        sinks: the job's sinks by name (every transaction it is given belongs to one of them).
        policy: retries, timeouts, async commit.
        clock: ms clock (age warnings).
        sleep: backoff sleep in seconds (injectable so tests do not wait); by default it waits on
            the cancel event, so :meth:`cancel` interrupts a backoff at once.
        fault: fault-point hook, called with ``"mid_commit"`` after the first of several commits.
        sink_metrics: where per-sink commit metrics go (a fresh recorder if ``None``).
    """

    def __init__(
        self,
        job_id: str,
        sinks: Mapping[str, AnySink],
        policy: CommitPolicy | None = None,
        *,
        clock: Clock = system_clock_ms,
        sleep: Callable[[float], None] | None = None,
        fault: Callable[[str], None] = lambda point: None,
        sink_metrics: SinkMetricsRecorder | None = None,
    ) -> None:
        self.job_id = job_id
        self._sinks = dict(sinks)
        self.policy = policy or CommitPolicy()
        self.clock = clock
        self._cancel = threading.Event()
        self._sleep = sleep if sleep is not None else self._interruptible_sleep
        self._fault = fault
        self.sink_metrics = sink_metrics if sink_metrics is not None else SinkMetricsRecorder()
        self.ages = TransactionAgeMonitor(
            job_id,
            self.policy.transaction_timeout_ms,
            self.policy.timeout_warning_ratio,
            clock,
            {n: t for n, s in self._sinks.items() if (t := s.transaction_timeout_ms) is not None},
        )
        self._lock = threading.Lock()
        self._metrics = CommitterMetrics()
        self._executor: ThreadPoolExecutor | None = None
        self._error: BaseException | None = None
        self._done: queue.SimpleQueue[CommitCall] = queue.SimpleQueue()
        self._inflight = 0
        self._idle = threading.Condition(self._lock)

    def _interruptible_sleep(self, seconds: float) -> None:
        self._cancel.wait(seconds)

    # -- single transactions --------------------------------------------------------------------

    def commit(
        self, call: Sequence[PendingTransaction[Any]], *, recovery: bool = False, cancellable: bool = True
    ) -> CommitOutcome:
        """Make one commit call synchronously, retrying ``RETRY`` with backoff: ``commit`` /
        ``recover_and_commit`` for a per-committable sink; ONE ``commit_checkpoint`` /
        ``recover_and_commit_checkpoint`` call with every committable of ``call`` for a
        checkpoint-commit sink (its outcome covers all of them).

        Args:
            call: one commit call (:data:`~twophase.coordinator.commit_calls.CommitCall`).
            recovery: True when recovering after a restore (``recover_and_commit[_checkpoint]``).
            cancellable: :meth:`cancel` stops its retries.

        Returns:
            ``COMMITTED`` or ``ALREADY_COMMITTED``; ``LOST`` only when recovering with
            ``ignore_lost_on_recovery`` (logged as an ERROR).

        Raises:
            TransactionLostError: the external system lost the transaction(s) (names sink and transactions).
            CommitFailedError: ``FATAL``, an exception from the sink, the retry budget exhausted,
                or the committer was canceled while retrying.
            ValueError: ``call`` is not one commit call of one sink
                (:func:`~twophase.coordinator.commit_calls.check_call`).
        """
        txns = tuple(call)
        if not txns:
            raise ValueError("an empty commit call")
        sink = self._sinks[txns[0].sink_name]
        check_call(sink, txns)
        t = txns[0]
        partitions = [x.partition for x in txns]
        fields: dict[str, Any] = {
            "job": self.job_id, "sink": sink.name, "checkpoint": t.checkpoint_id,
            "partition": t.partition if len(txns) == 1 else partitions, "attempt": t.attempt,
            "transactions": len(txns),
        }  # fmt: skip
        invoke: Callable[[], CommitOutcome]
        if isinstance(sink, CheckpointCommitSink):
            commit_checkpoint = sink.recover_and_commit_checkpoint if recovery else sink.commit_checkpoint
            committables = [x.committable for x in txns]

            def invoke() -> CommitOutcome:
                return commit_checkpoint(t.checkpoint_id, committables)
        else:
            commit_one = sink.recover_and_commit if recovery else sink.commit

            def invoke() -> CommitOutcome:
                return commit_one(t.committable)

        pol = self.policy

        def attempt() -> CommitOutcome:
            try:
                return invoke()
            except ServiceUnavailableError as e:
                log.warning("commit: service unavailable, will retry: %s", e, extra=fields)
                return CommitOutcome.RETRY

        def before_sleep(state: RetryCallState) -> None:
            self._add(retries=1)
            self.ages.check(txns)
            log_event(
                log,
                logging.INFO,
                "commit answered RETRY",
                job=self.job_id,
                sink=sink.name,
                checkpoint=t.checkpoint_id,
                partition=fields["partition"],
                attempt_no=state.attempt_number,
            )

        def retrying(first: CommitOutcome) -> CommitOutcome:
            """Retry with backoff after a first attempt answered ``first`` (RETRY): tenacity is
            handed it as its own first attempt, so backoff and budget are as if it ran them all."""
            stop = stop_after_attempt(pol.max_attempts)
            if pol.max_retry_time_ms is not None:
                stop = stop | stop_after_delay(pol.max_retry_time_ms / 1000.0)  # type: ignore[assignment]
            if cancellable:
                stop = stop | stop_when_event_set(self._cancel)  # type: ignore[assignment]
            answered = [first]
            return Retrying(
                stop=stop,
                wait=wait_exponential(
                    multiplier=pol.initial_backoff_ms / 1000.0, max=pol.max_backoff_ms / 1000.0, exp_base=2
                ),
                retry=retry_if_result(lambda o: o is CommitOutcome.RETRY),
                sleep=self._sleep,
                before_sleep=before_sleep,
                retry_error_callback=lambda state: CommitOutcome.RETRY,
            )(lambda: answered.pop() if answered else attempt())

        started = time.perf_counter()
        try:
            # The first attempt runs without the retry machinery, which cost more than a no-op
            # commit at 10⁵ transactions (issue #29); tenacity takes over from its first RETRY.
            outcome: CommitOutcome = attempt()
            if outcome is CommitOutcome.RETRY:
                outcome = retrying(outcome)
        except Exception as e:
            self._add(commit_time_ms=(time.perf_counter() - started) * 1000.0)
            raise CommitFailedError(
                f"commit of sink {sink.name!r} checkpoint {t.checkpoint_id} "
                f"partition {fields['partition']} raised: {e!r}"
            ) from e
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        measured = outcome is CommitOutcome.COMMITTED
        sizes = [sink.measure(x.committable) if measured else CommittableSize() for x in txns]
        self.sink_metrics.committed(sink.name, t.checkpoint_id, outcome, sizes, elapsed_ms)
        n = len(txns)
        if outcome is CommitOutcome.COMMITTED:
            self._add(commit_time_ms=elapsed_ms, committed=n)
            if log.isEnabledFor(logging.DEBUG):  # one line per transaction: DEBUG, as Flink's committers
                log.debug("committed %s", _what(sink, txns), extra=fields)
            return outcome
        self._add(commit_time_ms=elapsed_ms)
        what = _what(sink, txns)
        if outcome is CommitOutcome.ALREADY_COMMITTED:
            self._add(already_committed=n)
            log.info("already committed %s", what, extra=fields)
        elif outcome is CommitOutcome.LOST:
            if recovery and pol.ignore_lost_on_recovery:
                self._add(lost_ignored=n)
                log.error("transaction LOST on recovery, ignored as configured: %s", what, extra=fields)
            else:
                raise TransactionLostError(
                    f"transaction lost by the external system: {what}. {LOST_WAY_FORWARD}"
                )
        elif outcome is CommitOutcome.RETRY:
            if self._cancel.is_set():
                raise CommitFailedError(f"commit canceled while retrying: {what}")
            raise CommitFailedError(f"commit kept answering RETRY past the retry budget: {what}")
        else:
            raise CommitFailedError(f"commit failed ({outcome.name}): {what}")
        return outcome

    def abort(self, txn: PendingTransaction[Any], *, recovery: bool = False) -> None:
        """Abort one pre-committed transaction through its sink (idempotent in the sink).

        Raises:
            Whatever the sink's ``abort``/``recover_and_abort`` raises.
        """
        sink = self._sinks[txn.sink_name]
        (sink.recover_and_abort if recovery else sink.abort)(txn.committable)
        self._add(aborted=1)
        self.sink_metrics.aborted(sink.name, txn.checkpoint_id)
        log_event(
            log,
            logging.INFO,
            "aborted",
            sink=sink.name,
            checkpoint=txn.checkpoint_id,
            partition=txn.partition,
            attempt=txn.attempt,
            transaction=txn.committable,
        )

    # -- batches (sync or ordered async) ---------------------------------------------------------

    def submit(
        self, txns: Sequence[PendingTransaction[Any]], *, on_landed: Callable[[], None] | None = None
    ) -> None:
        """Commit ``txns`` in order: now, or queued on the committer thread (``async_commit``).

        Committed transactions are reported by :meth:`poll_completed`. Fault point ``mid_commit``
        fires after the first of several commit calls.

        Args:
            txns: the batch, in commit order (grouped into calls by
                :func:`~twophase.coordinator.commit_calls.commit_calls`).
            on_landed: called once every transaction of the batch (and, batches running in order, of
                every earlier batch) is committed, from the thread that committed it: at once, or
                on the committer thread (issue #26 item 2: the committed marker follows the
                commit). Not called if the batch fails; it must not raise.

        Raises:
            The first error of an earlier asynchronous batch; synchronously, the errors of :meth:`commit`.
        """
        self.raise_if_failed()
        if not txns and on_landed is None:
            return
        calls = commit_calls(self._sinks, txns)
        if not self.policy.async_commit:
            self._run(calls, on_landed)
            return
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"committer-{self.job_id}"
                )
            self._inflight += 1
        self._executor.submit(self._run_async, calls, on_landed)

    def _run(self, calls: Sequence[CommitCall], on_landed: Callable[[], None] | None = None) -> None:
        fired = [len(calls) < 2]  # mid_commit only applies to several calls
        fire_lock = threading.Lock()

        def done(call: CommitCall) -> None:
            self._done.put(call)
            # mid_commit: once the first of several calls committed, whatever else is in flight
            with fire_lock:
                if not fired[0]:
                    fired[0] = True
                    self._fault("mid_commit")

        self._commit_calls(calls, recovery=False, cancellable=True, on_done=done)
        if on_landed is not None:
            on_landed()

    def commit_all(
        self,
        txns: Iterable[PendingTransaction[Any]],
        *,
        recovery: bool = False,
        cancellable: bool = True,
        on_done: Callable[[CommitCall], None] = lambda call: None,
    ) -> None:
        """Commit ``txns`` now (see :meth:`commit`), grouped into commit calls
        (:func:`~twophase.coordinator.commit_calls.commit_calls`): one lane per sink
        (``commit_lanes``), the lanes concurrently; within a lane in order, or up to its
        parallelism at once. Calls ``on_done`` from the committing thread after each call succeeds.

        After the first error no lane starts another call (a checkpoint-commit sink's later
        checkpoints must never commit before an earlier one); calls already running finish,
        then the first error is raised. What was not committed is recommitted by recovery. A
        recovery commit of a per-transaction sink found LOST does not stop the others: the error
        raised at the end names every lost transaction.

        Raises:
            The first error of :meth:`commit` (``CommitFailedError``, ``TransactionLostError``).
        """
        calls = commit_calls(self._sinks, txns)
        self._commit_calls(calls, recovery=recovery, cancellable=cancellable, on_done=on_done)

    def _commit_calls(
        self,
        calls: Sequence[CommitCall],
        *,
        recovery: bool,
        cancellable: bool,
        on_done: Callable[[CommitCall], None],
    ) -> None:
        lost: list[TransactionLostError] = []
        lost_lock = threading.Lock()

        def one(call: CommitCall) -> None:
            try:
                self.commit(call, recovery=recovery, cancellable=cancellable)
            except TransactionLostError as e:
                if not recovery or isinstance(self._sinks[call[0].sink_name], CheckpointCommitSink):
                    raise  # checkpoint commits keep their order
                with lost_lock:  # recovery names every lost transaction, not only the first
                    lost.append(e)
                return
            on_done(call)

        run_lanes(commit_lanes(self._sinks, calls), one, thread_prefix=f"commit-{self.job_id}")
        if len(lost) == 1:
            raise lost[0]
        if lost:
            raise TransactionLostError(
                f"{len(lost)} transactions lost by the external system:\n"
                + "\n".join(str(e).removesuffix(LOST_WAY_FORWARD).rstrip(". ") for e in lost)
                + f"\n{LOST_WAY_FORWARD}"
            )

    def _run_async(self, calls: list[CommitCall], on_landed: Callable[[], None] | None) -> None:
        try:
            if self._error is None:  # after an error, later commits are skipped: order is kept
                self._run(calls, on_landed)
        except BaseException as e:
            with self._lock:
                if self._error is None:
                    self._error = e
            log.error("asynchronous commit failed job=%s: %r", self.job_id, e, extra={"job": self.job_id})
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    def poll_completed(self) -> list[PendingTransaction[Any]]:
        """Transactions committed since the last poll, in commit order."""
        out: list[PendingTransaction[Any]] = []
        while True:
            try:
                out.extend(self._done.get_nowait())
            except queue.Empty:
                return out

    def raise_if_failed(self) -> None:
        """Raise the first error of an asynchronous commit, if any (it stays raised until reset)."""
        with self._lock:
            err = self._error
        if err is not None:
            raise err

    def drain(self, timeout_s: float | None = None) -> None:
        """Wait until every queued commit has run, then raise the first error if any.

        Raises:
            CommitWaitTimeoutError: the wait timed out.
            CommitFailedError: a commit failed.
        """
        with self._idle:
            if not self._idle.wait_for(lambda: self._inflight == 0, timeout=timeout_s):
                raise CommitWaitTimeoutError(f"asynchronous commits still running after {timeout_s} s")
        self.raise_if_failed()

    @property
    def busy(self) -> bool:
        """True while asynchronous commits are queued or running."""
        with self._lock:
            return self._inflight > 0

    def cancel(self) -> None:
        """Stop retrying at once (cancel): a backoff in progress ends and the commit fails."""
        self._cancel.set()

    def shutdown(self, wait: bool = True) -> None:
        """Stop the committer thread; queued commits not yet started are dropped if ``wait`` is False."""
        ex = self._executor
        self._executor = None
        if ex is not None:
            ex.shutdown(wait=wait, cancel_futures=not wait)

    # -- metrics ----------------------------------------------------------------------------------

    def _add(self, **delta: float) -> None:
        with self._lock:
            m = self._metrics
            self._metrics = CommitterMetrics(
                committed=m.committed + int(delta.get("committed", 0)),
                already_committed=m.already_committed + int(delta.get("already_committed", 0)),
                aborted=m.aborted + int(delta.get("aborted", 0)),
                lost_ignored=m.lost_ignored + int(delta.get("lost_ignored", 0)),
                retries=m.retries + int(delta.get("retries", 0)),
                commit_time_ms=m.commit_time_ms + float(delta.get("commit_time_ms", 0.0)),
            )

    @property
    def metrics(self) -> CommitterMetrics:
        """A snapshot of the cumulative counters."""
        with self._lock:
            return self._metrics
