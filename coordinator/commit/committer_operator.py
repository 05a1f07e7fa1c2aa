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
(:data:`~twophase.coordinator.commit.commit_calls.CommitCall`) is every transaction of one sink and one
checkpoint: ONE ``commit_batch`` call of the sink, which answers per transaction (issue #42 item
3), or ONE ``commit_checkpoint`` call of a checkpoint-commit sink such as Delta, which answers for
all. Each transaction keeps its own outcome: the ones answering ``RETRY`` are retried together as
a smaller call, the confirmed ones are reported at once, and a call whose other transactions
failed still reports what it confirmed. Ordering, asynchronous commit and the committed marker
work on whole calls; metrics count transactions.

Commits run synchronously while a checkpoint's commit is small, and on one ordered committer
thread once one holds more than ``CommitPolicy.async_commit_above`` transactions (or always, or
never, as ``CommitPolicy.async_commit`` says); once one batch is queued, every later one queues
behind it: the commits of checkpoint c may overlap the next epoch, batches stay in
submission order, and an error surfaces on the next :meth:`CommitterOperator.raise_if_failed`
or :meth:`CommitterOperator.drain`; after an error the queued commits are skipped (the job fails and
recovery re-commits from checkpoint storage).

Within a batch (a checkpoint's notification, a restore, a cancel) the sinks commit concurrently, one
lane per sink (a batch comes per sink,
:data:`~twophase.coordinator.commit.commit_calls.CallsBySink`): the sinks of a job are independent,
so k sinks finish in about the time of the slowest rather than the sum. A sink's own calls stay in
checkpoint order; within one call the sink commits as its service is fastest (S3 completes uploads
from a pool, PostgreSQL commits over a few connections; the default ``commit_batch`` runs up to the
sink's ``commit_concurrency`` commits at once): recovering 1,000 pending uploads is not 1,000 round
trips in a row.
"""

from __future__ import annotations

import functools
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

from twophase.coordinator.commit.commit_calls import (
    CallsBySink,
    CommitCall,
    NamedCall,
    check_call,
    commit_calls,
    sink_concurrency,
)
from twophase.coordinator.commit.commit_policy import LOST_WAY_FORWARD, CommitPolicy, CommitterMetrics
from twophase.coordinator.commit.lanes import Lane, run_lanes
from twophase.coordinator.commit.transaction_ages import TransactionAgeMonitor
from twophase.coordinator.state.clock import Clock, system_clock_ms
from twophase.coordinator.state.metrics import SinkMetricsRecorder
from twophase.coordinator.state.payload import decode_payloads
from twophase.coordinator.state.subtask_lifecycle import BlockRows, PendingTransaction
from twophase.sinks.api import CheckpointCommitSink, TwoPhaseCommitSink
from twophase.sinks.errors import (
    CommitFailedError,
    CommitWaitTimeoutError,
    ServiceUnavailableError,
    TransactionLostError,
)
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome, CommittableSize, checked_outcomes

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


_SHOWN = 20
"""A commit call's log line or error lists at most this many partitions and transactions."""


def _what(sink: AnySink, txns: Sequence[PendingTransaction[Any]]) -> str:
    """Commit call rows in words, for a log line or error: sink, checkpoint, partitions, committables."""
    t = txns[0]
    if len(txns) == 1 and not isinstance(sink, CheckpointCommitSink):
        return (
            f"sink {sink.name!r} checkpoint {t.checkpoint_id} partition {t.partition} "
            f"attempt {t.attempt} transaction {t.committable!r}"
        )
    how = "one checkpoint commit" if isinstance(sink, CheckpointCommitSink) else "of one batch"
    more = f" and {len(txns) - _SHOWN} more" if len(txns) > _SHOWN else ""
    shown = txns[:_SHOWN]
    return (
        f"sink {sink.name!r} checkpoint {t.checkpoint_id} partitions {[x.partition for x in shown]}{more} "
        f"({len(txns)} transactions, {how}) transactions {[x.committable for x in shown]!r}{more}"
    )


class _LostRows(TransactionLostError):
    """Transactions lost by the external system: one line each, and the way forward once."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = [line.rstrip(". ") for line in lines]
        if len(self.lines) == 1:
            super().__init__(f"{self.lines[0]}. {LOST_WAY_FORWARD}")
        else:
            super().__init__(
                f"{len(self.lines)} transactions lost by the external system:\n"
                + "\n".join(self.lines)
                + f"\n{LOST_WAY_FORWARD}"
            )


def _sender(sink: AnySink, recovery: bool, checkpoint_id: int) -> Callable[[Sequence[Any]], Any]:
    """What one attempt of a commit call calls with its committables: the sink's
    ``commit_batch`` (``recover_and_commit_batch`` when recovering), which answers per
    committable; for a checkpoint-commit sink its ``commit_checkpoint`` of ``checkpoint_id``
    (``recover_and_commit_checkpoint``), whose one outcome is every committable's."""
    if isinstance(sink, CheckpointCommitSink):
        commit = sink.recover_and_commit_checkpoint if recovery else sink.commit_checkpoint
        return lambda committables: [commit(checkpoint_id, committables)] * len(committables)
    return sink.recover_and_commit_batch if recovery else sink.commit_batch


class _Rows:
    """The transactions of one commit call, as the sink's answers decide them (see
    :meth:`CommitterOperator.commit`): ``pending`` (not yet tried, or answered ``RETRY``), then
    ``committed``, ``already``, ``lost`` or ``fatal``, each in call order."""

    def __init__(self, txns: CommitCall) -> None:
        self.pending: CommitCall = txns
        self.committed: list[PendingTransaction[Any]] = []
        self.already: list[PendingTransaction[Any]] = []
        self.lost: list[PendingTransaction[Any]] = []
        self.fatal: list[PendingTransaction[Any]] = []

    @property
    def confirmed(self) -> CommitCall:
        """The transactions the sink confirmed (committed now or before)."""
        return (*self.committed, *self.already)

    @property
    def failing(self) -> bool:
        """Whether some transaction can no longer commit."""
        return bool(self.lost or self.fatal)

    def answered(self, outcomes: Sequence[CommitOutcome], *, tolerate_lost: bool) -> CommitOutcome:
        """Take one attempt's outcomes for :attr:`pending` (same length and order).

        Returns:
            ``RETRY`` when some transactions answered it and nothing stops their retry (a ``FATAL``
            one, or a ``LOST`` one unless ``tolerate_lost``); ``COMMITTED`` otherwise (this
            call is decided: see the fields).
        """
        by_outcome = {
            CommitOutcome.COMMITTED: self.committed,
            CommitOutcome.ALREADY_COMMITTED: self.already,
            CommitOutcome.LOST: self.lost,
            CommitOutcome.FATAL: self.fatal,
        }
        retry: list[PendingTransaction[Any]] = []
        for txn, outcome in zip(self.pending, outcomes, strict=True):
            by_outcome.get(outcome, retry).append(txn)
        self.pending = tuple(retry)
        stop = bool(self.fatal) or (bool(self.lost) and not tolerate_lost)
        return CommitOutcome.RETRY if retry and not stop else CommitOutcome.COMMITTED


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
        self,
        call: Sequence[PendingTransaction[Any]],
        *,
        recovery: bool = False,
        cancellable: bool = True,
        on_confirmed: Callable[[CommitCall], None] | None = None,
        lost: list[str] | None = None,
    ) -> CommitOutcome:
        """Make one commit call synchronously: ONE ``commit_batch`` / ``recover_and_commit_batch``
        call with every committable of ``call`` for a per-committable sink, which answers per
        transaction; ONE ``commit_checkpoint`` / ``recover_and_commit_checkpoint`` call for a
        checkpoint-commit sink, whose outcome covers all of them. The transactions answering
        ``RETRY`` are tried again, as one smaller call, with backoff, within the policy's budget;
        the others are decided.

        Args:
            call: one commit call (:data:`~twophase.coordinator.commit.commit_calls.CommitCall`).
            recovery: True when recovering after a restore (``recover_and_commit_*``).
            cancellable: :meth:`cancel` stops its retries.
            on_confirmed: called once, before this returns or raises, with the transactions the
                sink confirmed (``COMMITTED`` / ``ALREADY_COMMITTED``), if any: a call that fails
                may still have committed some of them.
            lost: where a recovery commit of a per-transaction sink puts one line per transaction
                the external system lost, instead of raising (the caller names every lost one
                at the end); ``None``: raised here.

        Returns:
            ``COMMITTED`` when at least one transaction committed now and every other one was
            already committed; ``ALREADY_COMMITTED`` when all were; ``LOST`` only when recovering
            with ``ignore_lost_on_recovery`` and some were lost (logged as an ERROR), or when
            ``lost`` took them.

        Raises:
            TransactionLostError: the external system lost transaction(s) (names sink and transactions).
            CommitFailedError: ``FATAL``, an exception from the sink, outcomes that do not match the
                batch (:func:`~twophase.sinks.outcome.checked_outcomes`; none then counts as
                confirmed), the retry budget exhausted, or the committer was canceled while retrying.
            ValueError: ``call`` is not one commit call of one sink
                (:func:`~twophase.coordinator.commit.commit_calls.check_call`).
        """
        pol = self.policy
        # LOST while recovering does not stop the others (the error at the end names every lost
        # one); any other failure stops retrying: after an error nothing new starts
        tolerate_lost = recovery
        first: list[CommitOutcome] | None = None  # the outcomes of a call's rows taken as columns
        raised: Exception | None = None
        started = time.perf_counter()
        block_made = call.block.made if isinstance(call, BlockRows) else None
        if isinstance(call, BlockRows) and not (block_made and any(r in block_made for r in call.rows)):
            # a ledger block's rows, none made into a transaction yet (the common path, issue
            # #42): committed as columns, here, where the call runs (the committer thread when
            # asynchronous): the committables decoded in bulk from the payload column, handed to
            # the sink, the outcomes taken back as a list; transactions are made only if some
            # row is not confirmed (a retry, a loss, a failure)
            n = len(call.rows)
            if not n:
                raise ValueError("an empty commit call")
            sink = self._sinks[call.sink_name]
            checkpoint_sink = isinstance(sink, CheckpointCommitSink)
            committables: list[Any] | None = None
            try:
                # none of the rows decoded yet (the common path): the payload column as a whole,
                # nothing kept on the block; else the block decodes the others and keeps them
                committables = (
                    call.block.committables(call.rows, call.payload, sink)
                    if call.block.decoded
                    else decode_payloads(sink, call.payload)
                )
                answer = _sender(sink, recovery, call.checkpoint_id)(committables)
                first = answer if checkpoint_sink else checked_outcomes(answer, n)
            except ServiceUnavailableError as e:
                log.warning(
                    "commit: service unavailable, will retry: %s", e,
                    extra={"job": self.job_id, "sink": sink.name, "checkpoint": call.checkpoint_id},
                )  # fmt: skip
                first = [CommitOutcome.RETRY] * n
            except Exception as e:
                raised = e
            if first is not None and committables is not None and first.count(CommitOutcome.COMMITTED) == n:
                elapsed_ms = (time.perf_counter() - started) * 1000.0
                self._account(sink, call.checkpoint_id, list(map(sink.measure, committables)), 0, elapsed_ms)
                if log.isEnabledFor(logging.DEBUG):  # one line per call: DEBUG, as Flink's committers
                    what = _what(sink, call.block.transactions(call.rows, committables))
                    log.debug("committed %s", what, extra={"job": self.job_id, "sink": sink.name})
                if on_confirmed is not None:
                    on_confirmed(call)  # whole: the driver lets the rows leave by range (one recode)
                call.block.forget_decoded(call.rows)  # committed: nothing needs them decoded now
                return CommitOutcome.COMMITTED
            txns = call.block.transactions(call.rows, committables)  # each committable decoded once
        else:
            txns = call.block.transactions(call.rows) if isinstance(call, BlockRows) else tuple(call)
            if not txns:
                raise ValueError("an empty commit call")
            sink = self._sinks[txns[0].sink_name]
            if not isinstance(call, BlockRows):  # a block's rows are one sink's and one checkpoint's
                check_call(sink, txns)
        t = txns[0]
        partitions = [x.partition for x in txns]
        fields: dict[str, Any] = {
            "job": self.job_id, "sink": sink.name, "checkpoint": t.checkpoint_id,
            "partition": t.partition if len(txns) == 1 else partitions[:_SHOWN], "attempt": t.attempt,
            "transactions": len(txns),
        }  # fmt: skip
        rows = _Rows(txns)
        send = _sender(sink, recovery, t.checkpoint_id)

        def attempt() -> CommitOutcome:
            """One call of the sink with the pending transactions' committables (each decoded on
            its first read, here: the committer's thread when asynchronous)."""
            pending = rows.pending
            try:
                answer = send([x.committable for x in pending])
                if isinstance(sink, CheckpointCommitSink):
                    outcomes = answer
                else:
                    outcomes = checked_outcomes(answer, len(pending))
            except ServiceUnavailableError as e:
                log.warning("commit: service unavailable, will retry: %s", e, extra=fields)
                return CommitOutcome.RETRY
            return rows.answered(outcomes, tolerate_lost=tolerate_lost)

        def before_sleep(state: RetryCallState) -> None:
            self._add(retries=1)
            self.ages.check(rows.pending)
            log_event(
                log,
                logging.INFO,
                "commit answered RETRY",
                job=self.job_id,
                sink=sink.name,
                checkpoint=t.checkpoint_id,
                partition=fields["partition"],
                transactions=len(rows.pending),
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

        try:
            # The first attempt runs without the retry machinery, which cost more than a no-op
            # commit at 10⁵ transactions (issue #29); tenacity takes over from its first RETRY.
            # A call taken as columns had its first attempt already: its outcomes decide its rows.
            if raised is None:
                outcome = attempt() if first is None else rows.answered(first, tolerate_lost=tolerate_lost)
                if outcome is CommitOutcome.RETRY:
                    retrying(CommitOutcome.RETRY)
        except Exception as e:
            raised = e
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        self._account(
            sink,
            t.checkpoint_id,
            [sink.measure(x.committable) for x in rows.committed],
            len(rows.already),
            elapsed_ms,
            failed=raised is not None or rows.failing,
        )
        if rows.confirmed:
            if log.isEnabledFor(logging.DEBUG):  # one line per call: DEBUG, as Flink's committers
                log.debug("committed %s", _what(sink, rows.confirmed), extra=fields)
            if rows.already:
                log.info("already committed %s", _what(sink, rows.already), extra=fields)
            if on_confirmed is not None:
                # a ledger block's rows confirmed whole go back as they came: the driver lets
                # them leave by range, one status recode, not one call per row (issue #42)
                whole = isinstance(call, BlockRows) and len(rows.confirmed) == len(txns)
                on_confirmed(call if whole else rows.confirmed)
        if raised is not None:
            raise CommitFailedError(
                f"commit of sink {sink.name!r} checkpoint {t.checkpoint_id} "
                f"partition {fields['partition']} raised: {raised!r}"
            ) from raised
        if rows.fatal:
            raise CommitFailedError(f"commit failed (FATAL): {_what(sink, rows.fatal)}")
        ignore_lost = recovery and pol.ignore_lost_on_recovery
        if rows.lost and not ignore_lost:
            # a checkpoint commit lost its checkpoint as a whole; a batch lost each row on its own
            groups = [rows.lost] if isinstance(sink, CheckpointCommitSink) else [[x] for x in rows.lost]
            lines = [f"transaction lost by the external system: {_what(sink, g)}" for g in groups]
            error = _LostRows(lines)
            if lost is None or isinstance(sink, CheckpointCommitSink):  # checkpoint commits keep their order
                raise error
            lost.extend(error.lines)  # one C-level extend: lanes on other threads may add theirs
            return CommitOutcome.LOST
        if rows.pending:
            what = _what(sink, rows.pending)
            if self._cancel.is_set():
                raise CommitFailedError(f"commit canceled while retrying: {what}")
            raise CommitFailedError(f"commit kept answering RETRY past the retry budget: {what}")
        if rows.lost:
            what = _what(sink, rows.lost)
            self._add(lost_ignored=len(rows.lost))
            log.error("transaction LOST on recovery, ignored as configured: %s", what, extra=fields)
            return CommitOutcome.LOST
        return CommitOutcome.COMMITTED if rows.committed else CommitOutcome.ALREADY_COMMITTED

    def _account(
        self,
        sink: AnySink,
        checkpoint_id: int,
        committed: Sequence[CommittableSize],
        already: int,
        elapsed_ms: float,
        *,
        failed: bool = False,
    ) -> None:
        """Count one commit call's confirmed transactions (``committed``: the sizes of those
        committed now; ``already``: how many were committed before) and its time (once, with
        the first group)."""
        self._add(commit_time_ms=elapsed_ms, committed=len(committed), already_committed=already)
        groups = [
            (CommitOutcome.COMMITTED, list(committed)),
            (CommitOutcome.ALREADY_COMMITTED, [CommittableSize() for _ in range(already)]),
        ]
        ms = elapsed_ms
        for outcome, sizes in groups:
            if sizes:
                self.sink_metrics.committed(sink.name, checkpoint_id, outcome, sizes, ms)
                ms = 0.0
        if ms and failed:
            self.sink_metrics.committed(sink.name, checkpoint_id, CommitOutcome.FATAL, [], ms)

    def abort_all(self, txns: Sequence[PendingTransaction[Any]]) -> None:
        """Abort pre-committed transactions (of aborted checkpoints, or of closed subtasks): one
        ``abort_batch`` per sink, the sinks in order of their first transaction, each sink's in
        the order given; one log line per sink (each transaction at DEBUG).

        Raises:
            Exception: whatever a sink's ``abort_batch`` raises (the sinks after it are not
                called: what is left is aborted by the lingering cleanup).
        """
        by_sink: dict[str, list[PendingTransaction[Any]]] = {}
        for t in txns:
            by_sink.setdefault(t.sink_name, []).append(t)
        for name, group in by_sink.items():
            sink = self._sinks[name]
            sink.abort_batch([t.committable for t in group])
            self._add(aborted=len(group))
            for t in group:
                self.sink_metrics.aborted(name, t.checkpoint_id)
            log_event(
                log,
                logging.INFO,
                "aborted",
                sink=name,
                checkpoints=sorted({t.checkpoint_id for t in group}),
                transactions=len(group),
            )
            if log.isEnabledFor(logging.DEBUG):
                for t in group:
                    _log_aborted(logging.DEBUG, t)

    def abort(self, txn: PendingTransaction[Any], *, recovery: bool = False) -> None:
        """Abort one pre-committed transaction through its sink (idempotent in the sink).

        Raises:
            Whatever the sink's ``abort``/``recover_and_abort`` raises.
        """
        sink = self._sinks[txn.sink_name]
        (sink.recover_and_abort if recovery else sink.abort)(txn.committable)
        self._add(aborted=1)
        self.sink_metrics.aborted(sink.name, txn.checkpoint_id)
        _log_aborted(logging.INFO, txn)

    # -- batches (sync or ordered async) ---------------------------------------------------------

    def submit(
        self, txns: Sequence[PendingTransaction[Any]], *, on_landed: Callable[[], None] | None = None
    ) -> None:
        """Commit ``txns`` in order: now, or queued on the committer thread
        (:meth:`~twophase.coordinator.commit.commit_policy.CommitPolicy.commits_async`, and every batch
        after a queued one).

        Committed transactions are reported by :meth:`poll_completed`. Fault point ``mid_commit``
        fires once the first commit call of a batch of several transactions confirmed some.

        Args:
            txns: the batch, in commit order (grouped into calls by
                :func:`~twophase.coordinator.commit.commit_calls.commit_calls`).
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
        self.submit_calls(commit_calls(self._sinks, txns), on_landed=on_landed)

    def submit_calls(self, calls: CallsBySink, *, on_landed: Callable[[], None] | None = None) -> int:
        """:meth:`submit` of a batch already grouped into commit calls per sink
        (:data:`~twophase.coordinator.commit.commit_calls.CallsBySink`: each call every
        transaction of one sink and one checkpoint, ascending by partition, naming its sink: a
        :class:`~twophase.coordinator.commit.commit_calls.TxnCall` as
        :func:`~twophase.coordinator.commit.commit_calls.commit_calls` makes them, or a ledger
        block's rows; a sink's calls in commit order): the coordinator's per-sink ledgers hand
        their blocks so (issue #42), with no pass over the transactions and no regrouping here.

        Returns:
            how many transactions the calls hold (each call's size is read once, here).

        Raises:
            As :meth:`submit`.
        """
        self.raise_if_failed()
        n = 0
        kept: dict[str, list[NamedCall]] = {}
        for name, sink_calls in calls.items():
            for call in sink_calls:
                # a ledger block's rows are sized by the rows they name, as commit reads them, not
                # asked their length (issue #42); an empty call is dropped
                size = len(call.rows) if isinstance(call, BlockRows) else len(call)
                if size:
                    kept.setdefault(name, []).append(call)
                    n += size
        if not kept and on_landed is None:
            return 0
        if not self.asynchronous and not self.policy.commits_async(n):
            self._commit_calls(
                kept, recovery=False, cancellable=True, on_done=self._reporter(n), on_landed=on_landed
            )
            return n
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"committer-{self.job_id}"
                )
            self._inflight += 1
        self._executor.submit(self._run_async, kept, n, on_landed)
        return n

    @property
    def asynchronous(self) -> bool:
        """Whether batches go to the committer thread: once one did, every later one does, so that
        they commit in submission order behind it."""
        return self._executor is not None

    def _reporter(self, n: int) -> Callable[[CommitCall], None]:
        """What a submitted batch of ``n`` transactions does with each confirmed call: queue it
        for :meth:`poll_completed_calls`, and fire fault point ``mid_commit`` once the first of
        several transactions committed (a whole call, or its confirmed part), whatever else is
        in flight."""
        fired = [n < 2]  # mid_commit only applies to several transactions
        fire_lock = threading.Lock()

        def done(call: CommitCall) -> None:
            self._done.put(call)
            with fire_lock:
                if not fired[0]:
                    fired[0] = True
                    self._fault("mid_commit")

        return done

    def commit_all(
        self,
        txns: Iterable[PendingTransaction[Any]],
        *,
        recovery: bool = False,
        cancellable: bool = True,
        on_done: Callable[[CommitCall], None] = lambda call: None,
    ) -> None:
        """Commit ``txns`` now (see :meth:`commit`), grouped into commit calls per sink
        (:func:`~twophase.coordinator.commit.commit_calls.commit_calls`): one lane per sink,
        the lanes concurrently, within a lane in order. Calls ``on_done`` from
        the committing thread with what each call confirmed (all of it, or what a failing call
        confirmed: see :meth:`commit`).

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
        calls: CallsBySink,
        *,
        recovery: bool,
        cancellable: bool,
        on_done: Callable[[CommitCall], None],
        on_landed: Callable[[], None] | None = None,
    ) -> None:
        """Make ``calls`` in one lane per sink (the lanes concurrently, a sink's calls in their
        order, one at a time: a sink's checkpoints commit one after another; what one call
        commits at once is the sink's ``commit_batch``'s choice, by default up to its
        ``commit_concurrency``), then call ``on_landed`` if every one committed. A recovery
        names every lost transaction of a per-transaction sink at the end, not only the first
        (:meth:`commit`'s ``lost``).

        Raises:
            ConfigError: a sink declares ``commit_concurrency`` < 1 (before anything commits).
            As :meth:`commit`.
        """
        lanes: list[Lane[NamedCall]] = []
        for name, sink_calls in calls.items():
            sink = self._sinks[name]
            if not isinstance(sink, CheckpointCommitSink):
                sink_concurrency(sink)  # refused before anything commits, as before batches
            lanes.append(Lane(name, tuple(sink_calls)))
        lost: list[str] = []
        one = functools.partial(
            self.commit,
            recovery=recovery,
            cancellable=cancellable,
            on_confirmed=on_done,
            lost=lost if recovery else None,
        )
        run_lanes(lanes, one, thread_prefix=f"commit-{self.job_id}")
        if lost:
            raise _LostRows(lost)
        if on_landed is not None:
            on_landed()

    def _run_async(self, calls: CallsBySink, n: int, on_landed: Callable[[], None] | None) -> None:
        try:
            if self._error is None:  # after an error, later commits are skipped: order is kept
                self._commit_calls(
                    calls, recovery=False, cancellable=True, on_done=self._reporter(n), on_landed=on_landed
                )
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
        return [t for call in self.poll_completed_calls() for t in call]

    def poll_completed_calls(self) -> list[CommitCall]:
        """What was committed since the last poll, in commit order, as the calls (or the parts of
        calls) confirmed: a ledger block's rows confirmed whole are the
        :class:`~twophase.coordinator.state.subtask_lifecycle.BlockRows` handed in."""
        out: list[CommitCall] = []
        while True:
            try:
                out.append(self._done.get_nowait())
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


def _log_aborted(level: int, txn: PendingTransaction[Any]) -> None:
    log_event(
        log,
        level,
        "aborted",
        sink=txn.sink_name,
        checkpoint=txn.checkpoint_id,
        partition=txn.partition,
        attempt=txn.attempt,
        transaction=txn.committable,
    )
