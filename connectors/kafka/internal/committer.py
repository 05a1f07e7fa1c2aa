"""Driver side: commit or abort a pre-committed Kafka transaction with EndTxn (KIP-98, TV1).

The writer never commits. It leaves its transaction open (destroying a librdkafka producer does
not abort it), and the committable records the transactional id, producer id and epoch. The
driver, possibly in another process after a crash, sends FindCoordinator(transaction) and
EndTxn(commit) with exactly those. It never calls ``init_transactions`` on that id first, which
would abort the transaction.

Outcomes (DESIGN.md §7):

===========================================================  =================================
EndTxn error                                                 outcome
===========================================================  =================================
NONE                                                         COMMITTED
CONCURRENT_TRANSACTIONS, NOT_COORDINATOR,                    RETRY (coordinator re-found)
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
REQUEST_TIMED_OUT, NETWORK_EXCEPTION, no answer
INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,  LOST, unless DescribeTransactions
INVALID_PRODUCER_ID_MAPPING                                  shows it committed:
                                                             ALREADY_COMMITTED
anything else (authorization, …)                             FATAL
===========================================================  =================================

A TV1 coordinator answers NONE to a repeated EndTxn(commit) of a completed commit, so a commit
first looks at DescribeTransactions: the same producer id and epoch in PrepareCommit,
CompleteCommit (or Empty, the state some coordinators show after completing) means it was
committed before, and the answer is ALREADY_COMMITTED without sending EndTxn.

The coordinator cannot answer once it forgot the transactional id (``transactional.id.expiration.ms``
passed) or the id moved on to another producer or epoch. The partition's log still can: EndTxn
writes a COMMIT marker with the transaction's producer id and epoch into every partition it wrote
(KIP-98), and the marker outlives the id. So before a rejection is reported LOST, the committer
searches the first partition of the committable for that marker: from ``marker_offset`` (the
partition's end offset after the writer's last record was acknowledged, so only other producers'
records between the pre-commit and the commit lie before the marker), or, in committables of
version 2, from the time the writer opened the transaction (``opened_ms``). A COMMIT marker means
ALREADY_COMMITTED. Anything else stays LOST: an abort, a search that stopped on its bound (the
LOST says where), a log that no longer holds the marker, or a committable of version 1, which
says neither where nor when.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

import kafka.errors as kerrors
import tenacity

from twophase.connectors.kafka.errors import KafkaTransactionError
from twophase.connectors.kafka.internal.admin import NETWORK_ERRORS, KafkaAdmin, TransactionSnapshot
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.connectors.kafka.internal.transport import MarkerSearch, SearchStop
from twophase.sinks.errors import ServiceUnavailableError
from twophase.sinks.outcome import CommitOutcome

log = logging.getLogger(__name__)


class KafkaErrorCode(enum.IntEnum):
    """Kafka protocol error codes the committer distinguishes (Kafka's ``Errors`` enum)."""

    NONE = 0
    REQUEST_TIMED_OUT = 7
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    PRODUCER_FENCED = 90


class EndTxnVerdict(enum.Enum):
    """What an EndTxn error code means before looking at the transaction's state."""

    DONE = "done"
    RETRY = "retry"
    REFIND_AND_RETRY = "refind_and_retry"
    CHECK_STATE = "check_state"
    FATAL = "fatal"


_VERDICTS = {
    KafkaErrorCode.NONE: EndTxnVerdict.DONE,
    KafkaErrorCode.CONCURRENT_TRANSACTIONS: EndTxnVerdict.RETRY,
    KafkaErrorCode.REQUEST_TIMED_OUT: EndTxnVerdict.RETRY,
    KafkaErrorCode.NETWORK_EXCEPTION: EndTxnVerdict.REFIND_AND_RETRY,
    KafkaErrorCode.NOT_COORDINATOR: EndTxnVerdict.REFIND_AND_RETRY,
    KafkaErrorCode.COORDINATOR_LOAD_IN_PROGRESS: EndTxnVerdict.REFIND_AND_RETRY,
    KafkaErrorCode.COORDINATOR_NOT_AVAILABLE: EndTxnVerdict.REFIND_AND_RETRY,
    KafkaErrorCode.INVALID_TXN_STATE: EndTxnVerdict.CHECK_STATE,
    KafkaErrorCode.PRODUCER_FENCED: EndTxnVerdict.CHECK_STATE,
    KafkaErrorCode.INVALID_PRODUCER_EPOCH: EndTxnVerdict.CHECK_STATE,
    KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING: EndTxnVerdict.CHECK_STATE,
}

COMMITTED_STATES = frozenset({"PrepareCommit", "CompleteCommit", "Empty"})
ABORTED_STATES = frozenset({"PrepareAbort", "CompleteAbort", "PrepareEpochFence", "Dead"})
CLOCK_SKEW_MS = 5 * 60 * 1000
"""Margin, ms, for the executor's clock (``opened_ms``) against the brokers' (a marker's time)
and for the coordinator's delay in aborting a timed-out transaction, when a marker is searched."""


def classify_end_txn(error_code: int) -> EndTxnVerdict:
    """Map an EndTxn error code to its verdict (see the module table); unknown codes are FATAL."""
    try:
        return _VERDICTS[KafkaErrorCode(error_code)]
    except (ValueError, KeyError):
        return EndTxnVerdict.FATAL


def _same_producer(snapshot: TransactionSnapshot, c: KafkaCommittable) -> bool:
    return snapshot.producer_id == c.producer_id and snapshot.producer_epoch == c.producer_epoch


def outcome_before_end_txn(snapshot: TransactionSnapshot | None, c: KafkaCommittable) -> CommitOutcome | None:
    """ALREADY_COMMITTED when DescribeTransactions shows ``c`` committed; ``None``: send EndTxn."""
    if snapshot is not None and _same_producer(snapshot, c) and snapshot.state in COMMITTED_STATES:
        return CommitOutcome.ALREADY_COMMITTED
    return None


def coordinator_forgot(snapshot: TransactionSnapshot | None, c: KafkaCommittable) -> bool:
    """True when the coordinator can no longer tell ``c``'s outcome: it does not know the id, or
    the id now belongs to another producer id or epoch (a later ``init_transactions``)."""
    return snapshot is None or not _same_producer(snapshot, c)


def marker_partition(c: KafkaCommittable) -> tuple[str, int] | None:
    """The partition whose log is searched for ``c``'s marker: its first known one, or ``None``
    (neither ``marker_offset`` nor ``opened_ms``, or librdkafka did not report the partitions)."""
    if c.opened_ms is None and c.marker_offset is None:
        return None
    return next(((t, p) for t, p in c.topic_partitions if p >= 0), None)


def outcome_after_rejection(
    snapshot: TransactionSnapshot | None,
    c: KafkaCommittable,
    marker: bool | None = None,
    search: MarkerSearch | None = None,
) -> CommitOutcome:
    """The outcome after EndTxn(commit) was rejected as fenced or in an invalid state.

    ALREADY_COMMITTED if the coordinator shows ``c``'s producer id and epoch committed, or if the
    log holds its COMMIT marker (``marker`` True, see the module docstring); else LOST: the
    transaction was aborted (timeout, or fenced by a later ``init_transactions``), or nothing that
    is left can tell. ``search`` (the marker search that ran, if one did) says which in the log
    line and in ``c``'s ``repr``, which the TransactionLostError line shows.
    """
    if outcome_before_end_txn(snapshot, c) is not None or marker is True:
        return CommitOutcome.ALREADY_COMMITTED
    if coordinator_forgot(snapshot, c) and marker is None:  # ambiguous: the loss may be a false alarm
        where = marker_partition(c)
        if where is None:
            why = "the committable says neither where nor when to search the log (a version 1 committable)"
        elif search is None:
            why = f"no search of {where[0]}[{where[1]}] ran"
        elif search.stop is SearchStop.BYTES_BOUND:
            why = f"the search of {where[0]}[{where[1]}] {search.describe()}"
        else:
            why = (
                f"the search of {where[0]}[{where[1]}] {search.describe()} without finding it "
                "(retention or compaction deleted it, or the topic was recreated)"
            )
        c.record_marker_search(f"outcome unknown: {why}")
        log.error(
            "transaction outcome unknown: its coordinator forgot the transactional id or gave it to "
            "another producer (transactional.id.expiration.ms, a later init_transactions), and no "
            "COMMIT or ABORT marker of it was found: %s. Check the topic for its records before "
            "skipping it %s",
            why,
            _kv(c),
        )
    elif search is not None and marker is False:
        c.record_marker_search(f"ABORT marker found: {search.describe()}")
    return CommitOutcome.LOST


def outcome_of_end_txn(
    error_code: int,
    snapshot_after: TransactionSnapshot | None,
    c: KafkaCommittable,
    marker: bool | None = None,
    search: MarkerSearch | None = None,
) -> CommitOutcome:
    """The full mapping of an EndTxn(commit) answer, given the state read after a rejection and,
    where the coordinator forgot it, the marker found in the log."""
    verdict = classify_end_txn(error_code)
    if verdict is EndTxnVerdict.DONE:
        return CommitOutcome.COMMITTED
    if verdict in (EndTxnVerdict.RETRY, EndTxnVerdict.REFIND_AND_RETRY):
        return CommitOutcome.RETRY
    if verdict is EndTxnVerdict.CHECK_STATE:
        return outcome_after_rejection(snapshot_after, c, marker, search)
    return CommitOutcome.FATAL


class KafkaCommitter:
    """Commits and aborts :class:`KafkaCommittable` s through a :class:`KafkaAdmin` (driver side).

    Args:
        admin: the driver's transaction calls.
        attempts: EndTxn(abort) attempts on transient errors.
        backoff_ms: first backoff between them, ms.
        transaction_timeout_ms: the sink's ``transaction.timeout.ms``: a committed transaction's
            marker lies within it of ``opened_ms`` (plus :data:`CLOCK_SKEW_MS`).
    """

    def __init__(
        self, admin: KafkaAdmin, attempts: int, backoff_ms: int, transaction_timeout_ms: int
    ) -> None:
        self._admin = admin
        self._attempts = attempts
        self._backoff_ms = backoff_ms
        self._transaction_timeout_ms = transaction_timeout_ms

    def commit(self, c: KafkaCommittable) -> CommitOutcome:
        """One commit attempt. Never raises for network trouble (RETRY); see the module table."""
        return self._commit(c, None, described=False)

    def commit_batch(self, committables: Sequence[KafkaCommittable]) -> list[CommitOutcome]:
        """One commit attempt of each committable of one checkpoint, in input order.

        The state each commit first reads (DescribeTransactions) is read for the whole batch at
        once, one request per transaction coordinator instead of one per transaction; then each
        transaction is decided exactly as :meth:`commit` decides it from its own state (EndTxn with
        its recorded producer id and epoch, the state again and the log after a rejection: KIP-98
        fencing, never ``init_transactions``). A batch naming one transactional id twice, or whose
        batched read fails for one id (authorization), is committed one by one instead. Never
        raises for network trouble (RETRY for every committable).
        """
        ids = [c.transactional_id for c in committables]
        if len(set(ids)) != len(ids):
            return [self.commit(c) for c in committables]
        try:
            snapshots = self._admin.describe_transactions(ids)
        except NETWORK_ERRORS as e:
            log.warning("commit batch needs retry transactions=%d error=%s", len(ids), e)
            return [CommitOutcome.RETRY] * len(committables)
        except kerrors.KafkaError:  # a per-id failure: each one answers for itself
            return [self.commit(c) for c in committables]
        return [self._commit(c, snapshots.get(c.transactional_id), described=True) for c in committables]

    def _commit(
        self, c: KafkaCommittable, snapshot: TransactionSnapshot | None, *, described: bool
    ) -> CommitOutcome:
        """:meth:`commit`, from ``snapshot`` (``c``'s DescribeTransactions state) if ``described``."""
        try:
            if not described:
                snapshot = self._admin.describe_transaction(c.transactional_id)
            before = outcome_before_end_txn(snapshot, c)
            if before is not None:
                log.info("already committed %s", _kv(c))
                return before
            code = self._admin.end_txn(c.transactional_id, c.producer_id, c.producer_epoch, commit=True)
            after = search = None
            if classify_end_txn(code) is EndTxnVerdict.CHECK_STATE:
                after = self._admin.describe_transaction(c.transactional_id)
                if outcome_before_end_txn(after, c) is None and coordinator_forgot(after, c):
                    search = self._marker(c)
            marker = None if search is None else search.found
            outcome = outcome_of_end_txn(code, after, c, marker, search)
        except NETWORK_ERRORS as e:  # the admin re-finds the coordinator on the next attempt
            log.warning("commit needs retry %s error=%s", _kv(c), e)
            return CommitOutcome.RETRY
        except kerrors.KafkaError as e:  # authorization and other non-transient broker answers
            log.error("commit failed %s error=%s", _kv(c), e)
            return CommitOutcome.FATAL
        level = logging.INFO if outcome.is_success or outcome is CommitOutcome.RETRY else logging.ERROR
        log.log(level, "end_txn(commit) %s error_code=%d outcome=%s", _kv(c), code, outcome.name)
        return outcome

    def _marker(self, c: KafkaCommittable) -> MarkerSearch | None:
        """Search the log for ``c``'s marker (``None``: ``c`` does not say where).

        From ``marker_offset`` when the committable has one; else from ``opened_ms`` minus
        :data:`CLOCK_SKEW_MS` (committables of version 2).

        Raises:
            one of ``NETWORK_ERRORS`` (a RETRY), kafka-python errors (FATAL).
        """
        where = marker_partition(c)
        if where is None:
            return None
        opened = c.opened_ms if c.opened_ms is not None else 0
        since = opened - CLOCK_SKEW_MS
        until = opened + self._transaction_timeout_ms + CLOCK_SKEW_MS if c.opened_ms is not None else 2**62
        search = self._admin.transaction_outcome(
            *where, c.producer_id, c.producer_epoch, since, until, c.marker_offset
        )
        log.info(
            "transaction marker searched %s partition=%s found=%s search=%s",
            _kv(c),
            where,
            search.found,
            search.describe(),
        )
        return search

    def abort(self, c: KafkaCommittable) -> None:
        """Abort with EndTxn(abort) and the recorded producer id/epoch, retrying transient errors.

        Idempotent: a transaction already aborted or fenced is left alone; one already committed
        cannot be aborted and is logged as an error. Only ``c``'s own producer epoch is ever
        touched, so a newer transaction on the same id is never disturbed.
        """
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self._attempts),
            wait=tenacity.wait_exponential(multiplier=self._backoff_ms / 1000.0, max=10),
            retry=tenacity.retry_if_result(lambda done: not done)
            | tenacity.retry_if_exception_type(NETWORK_ERRORS),
            reraise=True,
        )
        try:
            retrying(self._abort_once, c)
        except (tenacity.RetryError, *NETWORK_ERRORS) as e:  # type: ignore[misc]
            raise ServiceUnavailableError(
                f"EndTxn(abort) of {c.transactional_id} got no final answer after "
                f"{self._attempts} attempts: {e}"
            ) from None

    def _abort_once(self, c: KafkaCommittable) -> bool:
        snapshot = self._admin.describe_transaction(c.transactional_id)
        if snapshot is None or not _same_producer(snapshot, c) or snapshot.state in ABORTED_STATES:
            log.info("abort: nothing open %s state=%s", _kv(c), snapshot and snapshot.state)
            return True
        if snapshot.state in ("PrepareCommit", "CompleteCommit"):
            log.error("abort: transaction was already committed %s", _kv(c))
            return True
        code = self._admin.end_txn(c.transactional_id, c.producer_id, c.producer_epoch, commit=False)
        verdict = classify_end_txn(code)
        if verdict in (EndTxnVerdict.DONE, EndTxnVerdict.CHECK_STATE):
            log.info("end_txn(abort) %s error_code=%d", _kv(c), code)
            return True
        if verdict is EndTxnVerdict.FATAL:
            raise KafkaTransactionError(
                f"EndTxn(abort) of {c.transactional_id} failed with error code {code}"
            )
        return False


def _kv(c: KafkaCommittable) -> str:
    return " ".join(f"{k}={v}" for k, v in c.log_fields().items())
