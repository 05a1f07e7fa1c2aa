"""EndTxn error codes to commit outcomes, and the committer's protocol against an in-memory fake."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import kafka.errors as kerrors
import pytest

from twophase.connectors.kafka import KafkaCommittable
from twophase.connectors.kafka.internal.admin import KafkaAdmin, TransactionSnapshot
from twophase.connectors.kafka.internal.committable import CODEC
from twophase.connectors.kafka.internal.committer import (
    CLOCK_SKEW_MS,
    EndTxnVerdict,
    KafkaCommitter,
    KafkaErrorCode,
    classify_end_txn,
    coordinator_forgot,
    marker_partition,
    outcome_after_rejection,
    outcome_before_end_txn,
    outcome_of_end_txn,
)
from twophase.connectors.kafka.internal.transport import MarkerSearch, SearchStop
from twophase.sinks.outcome import CommitOutcome

C = KafkaCommittable(
    "p-s-0-1", producer_id=7, producer_epoch=3, topic_partitions=(("t", 0),), record_count=5, checkpoint_id=1
)


def snap(state: str, pid: int = 7, epoch: int = 3) -> TransactionSnapshot:
    return TransactionSnapshot(C.transactional_id, state, pid, epoch, 60_000, 0)


@pytest.mark.parametrize(
    ("code", "after", "outcome"),
    [
        (KafkaErrorCode.NONE, None, CommitOutcome.COMMITTED),
        (KafkaErrorCode.CONCURRENT_TRANSACTIONS, None, CommitOutcome.RETRY),
        (KafkaErrorCode.NOT_COORDINATOR, None, CommitOutcome.RETRY),
        (KafkaErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None, CommitOutcome.RETRY),
        (KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, None, CommitOutcome.RETRY),
        (KafkaErrorCode.REQUEST_TIMED_OUT, None, CommitOutcome.RETRY),
        (KafkaErrorCode.NETWORK_EXCEPTION, None, CommitOutcome.RETRY),
        # rejected: LOST unless the coordinator shows this very transaction committed
        (KafkaErrorCode.INVALID_TXN_STATE, snap("CompleteAbort", epoch=4), CommitOutcome.LOST),
        (KafkaErrorCode.PRODUCER_FENCED, snap("CompleteAbort", epoch=4), CommitOutcome.LOST),
        (KafkaErrorCode.INVALID_PRODUCER_EPOCH, snap("Ongoing", epoch=5), CommitOutcome.LOST),
        (KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING, None, CommitOutcome.LOST),
        (KafkaErrorCode.INVALID_TXN_STATE, snap("CompleteCommit"), CommitOutcome.ALREADY_COMMITTED),
        (KafkaErrorCode.PRODUCER_FENCED, snap("CompleteCommit"), CommitOutcome.ALREADY_COMMITTED),
        (KafkaErrorCode.INVALID_PRODUCER_EPOCH, snap("PrepareCommit"), CommitOutcome.ALREADY_COMMITTED),
        (KafkaErrorCode.INVALID_TXN_STATE, snap("Empty"), CommitOutcome.ALREADY_COMMITTED),
        # a later epoch committed something else: ours is not known to be committed
        (KafkaErrorCode.PRODUCER_FENCED, snap("CompleteCommit", epoch=4), CommitOutcome.LOST),
        (KafkaErrorCode.PRODUCER_FENCED, snap("CompleteCommit", pid=8), CommitOutcome.LOST),
        (KafkaErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, CommitOutcome.FATAL),
        (12345, None, CommitOutcome.FATAL),
        (-1, None, CommitOutcome.FATAL),
    ],
)
def test_end_txn_outcome_table(code: int, after: TransactionSnapshot | None, outcome: CommitOutcome) -> None:
    assert outcome_of_end_txn(code, after, C) is outcome


def test_verdicts() -> None:
    assert classify_end_txn(0) is EndTxnVerdict.DONE
    assert classify_end_txn(16) is EndTxnVerdict.REFIND_AND_RETRY
    assert classify_end_txn(51) is EndTxnVerdict.RETRY
    assert classify_end_txn(90) is EndTxnVerdict.CHECK_STATE


@pytest.mark.parametrize("state", ["CompleteCommit", "PrepareCommit", "Empty"])
def test_recommit_is_recognised_before_end_txn(state: str) -> None:
    assert outcome_before_end_txn(snap(state), C) is CommitOutcome.ALREADY_COMMITTED


@pytest.mark.parametrize("s", [None, snap("Ongoing"), snap("CompleteCommit", epoch=2), snap("CompleteAbort")])
def test_anything_else_goes_to_end_txn(s: TransactionSnapshot | None) -> None:
    assert outcome_before_end_txn(s, C) is None
    assert outcome_after_rejection(s, C) is CommitOutcome.LOST


class FakeCoordinator:
    """In-memory TV1 transaction coordinator for one id: just enough of EndTxn/DescribeTransactions."""

    def __init__(self, state: str = "Ongoing", epoch: int = 3, script: list[object] | None = None) -> None:
        self.state = state
        self.epoch = epoch
        self.script = list(script or [])  # error codes or exceptions returned before the real answer
        self.end_txn_calls: list[bool] = []

    def describe_transaction(self, txn_id: str) -> TransactionSnapshot | None:
        return TransactionSnapshot(txn_id, self.state, 7, self.epoch, 60_000, 0)

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        self.end_txn_calls.append(commit)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, BaseException):
                raise step
            assert isinstance(step, int)
            return step
        if pid != 7 or epoch != self.epoch:
            return KafkaErrorCode.PRODUCER_FENCED
        if self.state == "Ongoing":
            self.state = "CompleteCommit" if commit else "CompleteAbort"
            return KafkaErrorCode.NONE
        if self.state == "CompleteCommit" and commit:
            return KafkaErrorCode.NONE  # what a TV1 coordinator answers to a repeated commit
        return KafkaErrorCode.INVALID_TXN_STATE


def committer_over(fake: FakeCoordinator, attempts: int = 3) -> KafkaCommitter:
    """A committer whose admin client is the fake (it has the few calls the committer makes)."""
    return KafkaCommitter(
        cast(KafkaAdmin, fake), attempts=attempts, backoff_ms=1, transaction_timeout_ms=60_000
    )


def test_commit_then_recommit_is_already_committed() -> None:
    fake = FakeCoordinator()
    committer = committer_over(fake)
    assert committer.commit(C) is CommitOutcome.COMMITTED
    assert committer.commit(C) is CommitOutcome.ALREADY_COMMITTED
    assert fake.end_txn_calls == [True]


def test_not_coordinator_is_retry() -> None:
    # re-finding the coordinator is the admin's part (tests/connectors/kafka/internal/test_admin.py)
    fake = FakeCoordinator(script=[KafkaErrorCode.NOT_COORDINATOR])
    committer = committer_over(fake)
    assert committer.commit(C) is CommitOutcome.RETRY
    assert committer.commit(C) is CommitOutcome.COMMITTED
    assert fake.end_txn_calls == [True, True]


def test_network_failure_is_retry_never_lost() -> None:
    fake = FakeCoordinator(script=[kerrors.KafkaConnectionError("down")])
    committer = committer_over(fake)
    assert committer.commit(C) is CommitOutcome.RETRY
    assert committer.commit(C) is CommitOutcome.COMMITTED


def test_timed_out_transaction_is_lost() -> None:
    fake = FakeCoordinator(state="CompleteAbort", epoch=4)  # the coordinator bumped the epoch
    committer = committer_over(fake)
    assert committer.commit(C) is CommitOutcome.LOST


def test_abort_is_idempotent_and_never_touches_newer_epochs() -> None:
    fake = FakeCoordinator()
    committer = committer_over(fake)
    committer.abort(C)
    assert fake.state == "CompleteAbort"
    committer.abort(C)
    assert fake.end_txn_calls == [False]
    newer = FakeCoordinator(state="Ongoing", epoch=9)
    committer_over(newer).abort(C)
    assert newer.state == "Ongoing" and newer.end_txn_calls == []


def test_abort_retries_transient_errors() -> None:
    fake = FakeCoordinator(
        script=[KafkaErrorCode.CONCURRENT_TRANSACTIONS, KafkaErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    )
    committer_over(fake, attempts=5).abort(C)
    assert fake.end_txn_calls == [False, False, False]


def test_authorization_failure_is_fatal_not_an_exception() -> None:
    fake = FakeCoordinator(script=[kerrors.TransactionalIdAuthorizationFailedError("denied")])
    assert committer_over(fake).commit(C) is CommitOutcome.FATAL


# -- the coordinator forgot the id: the log's marker decides (#26 item 2) -----------------------------

OPENED = 1_700_000_000_000
C2 = KafkaCommittable(
    "p-s-0-1-0",
    producer_id=7,
    producer_epoch=3,
    topic_partitions=(("t", -1), ("t", 2), ("u", 0)),
    record_count=5,
    checkpoint_id=1,
    opened_ms=OPENED,
)


@pytest.mark.parametrize(
    ("after", "marker", "outcome"),
    [
        (None, True, CommitOutcome.ALREADY_COMMITTED),  # the id expired after the commit
        (snap("Ongoing", pid=8, epoch=0), True, CommitOutcome.ALREADY_COMMITTED),  # expired, then reused
        (snap("CompleteCommit", epoch=4), True, CommitOutcome.ALREADY_COMMITTED),  # a later epoch
        (None, False, CommitOutcome.LOST),  # aborted
        (None, None, CommitOutcome.LOST),  # the log no longer tells
        (snap("CompleteAbort"), None, CommitOutcome.LOST),
    ],
)
def test_a_marker_in_the_log_decides_what_the_coordinator_forgot(
    after: TransactionSnapshot | None, marker: bool | None, outcome: CommitOutcome
) -> None:
    assert outcome_of_end_txn(KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING, after, C2, marker) is outcome


def test_the_marker_is_searched_in_the_first_known_partition_from_the_opening() -> None:
    assert marker_partition(C2) == ("t", 2)
    assert marker_partition(C) is None  # a version 1 committable: no opening time
    assert marker_partition(replace(C2, topic_partitions=(("t", -1),))) is None
    assert coordinator_forgot(None, C2) and coordinator_forgot(snap("CompleteCommit", epoch=4), C2)
    assert not coordinator_forgot(snap("CompleteAbort"), C2)


class ForgetfulCoordinator(FakeCoordinator):
    """The id expired (DescribeTransactions: unknown, EndTxn: INVALID_PRODUCER_ID_MAPPING); the log
    still holds ``marker`` for the transaction, found by a search that stops at ``stop``."""

    def __init__(self, marker: bool | None, stop: SearchStop = SearchStop.END_OF_LOG) -> None:
        super().__init__()
        self.marker = marker
        self.stop = SearchStop.MARKER if marker is not None else stop
        self.searches: list[tuple[str, int, int, int, int, int, int | None]] = []

    def describe_transaction(self, txn_id: str) -> TransactionSnapshot | None:
        return None

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        return KafkaErrorCode.INVALID_PRODUCER_ID_MAPPING

    def transaction_outcome(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        since_ms: int,
        until_ms: int,
        from_offset: int | None = None,
    ) -> MarkerSearch:
        self.searches.append((topic, partition, producer_id, producer_epoch, since_ms, until_ms, from_offset))
        start = 0 if from_offset is None else from_offset
        return MarkerSearch(self.marker, self.stop, start, start + 10, 5_000, 4_096)


def test_a_commit_whose_id_expired_is_already_committed_when_its_marker_is_in_the_log() -> None:
    fake = ForgetfulCoordinator(marker=True)
    committer = committer_over(fake)
    assert committer.commit(C2) is CommitOutcome.ALREADY_COMMITTED
    skew = CLOCK_SKEW_MS
    assert fake.searches == [("t", 2, 7, 3, OPENED - skew, OPENED + 60_000 + skew, None)]
    fake = ForgetfulCoordinator(marker=None)
    committer = committer_over(fake)
    assert committer.commit(C2) is CommitOutcome.LOST
    assert committer.commit(C) is CommitOutcome.LOST  # version 1: nothing to search
    assert len(fake.searches) == 1


def test_a_committable_with_a_marker_offset_is_searched_from_it() -> None:
    """#43 item 1: from the offset the writer read after its last record was acknowledged, not
    from five minutes before it opened (which counted other traffic and its own records)."""
    fake = ForgetfulCoordinator(marker=True)
    c3 = replace(C2, marker_offset=12_345)
    assert committer_over(fake).commit(c3) is CommitOutcome.ALREADY_COMMITTED
    assert [s[-1] for s in fake.searches] == [12_345]


@pytest.mark.parametrize(
    ("stop", "says", "never"),
    [
        (
            SearchStop.BYTES_BOUND,
            "stopped at its bound of 4096 bytes (marker_search_max_bytes) at offset 12355",
            "retention",
        ),
        (SearchStop.END_OF_LOG, "stopped at the end of the log without finding it (retention", "bound"),
        (SearchStop.PAST_END, "the log ends before the offset it starts from", "bound"),
    ],
)
def test_a_lost_says_where_the_search_stopped(
    stop: SearchStop, says: str, never: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The committable's repr, which the TransactionLostError line shows, and the log line say
    where the search stopped; a search stopped on its bound does not blame retention."""
    fake = ForgetfulCoordinator(marker=None, stop=stop)
    c3 = replace(C2, marker_offset=12_345)
    with caplog.at_level("ERROR"):
        assert committer_over(fake).commit(c3) is CommitOutcome.LOST
    assert says in repr(c3), repr(c3)
    assert never not in repr(c3)
    assert any(says in r.getMessage() for r in caplog.records)


def test_a_search_description_names_its_bound_and_where_it_stopped() -> None:
    bounded = MarkerSearch(None, SearchStop.BYTES_BOUND, 100, 900, 1_048_576, 1_048_576)
    assert bounded.describe() == (
        "stopped at its bound of 1048576 bytes (marker_search_max_bytes) at offset 900, after it read "
        "offsets 100..900 (1048576 bytes); the marker may lie beyond it: raise marker_search_max_bytes"
    )
    assert MarkerSearch(True, SearchStop.MARKER, 5, 7, 300, 1_048_576).describe() == (
        "read offsets 5..7 (300 bytes) and stopped at the transaction's marker"
    )
    assert MarkerSearch(None, SearchStop.NOTHING_SINCE).describe() == (
        "stopped before it began: no record at or after the time it starts from"
    )


def test_a_version_1_committable_still_decodes() -> None:
    payload = CODEC.to_json(C2)
    payload["version"] = 1
    del payload["body"]["opened_ms"]
    del payload["body"]["marker_offset"]
    assert CODEC.from_json(payload) == replace(C2, opened_ms=None)
    assert CODEC.from_json(CODEC.to_json(C2)) == C2


class FakeCoordinators:
    """One :class:`FakeCoordinator` per transactional id, behind one admin; counts DescribeTransactions."""

    def __init__(self, **by_id: FakeCoordinator) -> None:
        self.by_id = by_id
        self.describes: list[list[str]] = []
        self.describe_error: BaseException | None = None

    def describe_transactions(self, txn_ids: list[str]) -> dict[str, TransactionSnapshot]:
        self.describes.append(list(txn_ids))
        if self.describe_error is not None:
            raise self.describe_error
        out = {i: self.by_id[i].describe_transaction(i) for i in txn_ids}
        return {i: s for i, s in out.items() if s is not None}

    def describe_transaction(self, txn_id: str) -> TransactionSnapshot | None:
        return self.describe_transactions([txn_id]).get(txn_id)

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        return self.by_id[txn_id].end_txn(txn_id, pid, epoch, commit)


def test_a_batch_reads_every_state_at_once_then_decides_each_transaction() -> None:
    """#42 item 3: one DescribeTransactions for the batch; each transaction decided from its own
    state and EndTxn answer with its own producer epoch (KIP-98 fencing), in input order."""
    a, b, c = (replace(C, transactional_id=f"p-s-{p}-1") for p in range(3))
    fakes = FakeCoordinators(
        **{
            a.transactional_id: FakeCoordinator("CompleteCommit"),  # committed before a crash
            b.transactional_id: FakeCoordinator(),
            c.transactional_id: FakeCoordinator("CompleteAbort", epoch=4),  # timed out: fenced
        }
    )
    committer = KafkaCommitter(
        cast(KafkaAdmin, fakes), attempts=3, backoff_ms=1, transaction_timeout_ms=60_000
    )
    assert committer.commit_batch([a, b, c]) == [
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.COMMITTED,
        CommitOutcome.LOST,
    ]
    assert fakes.describes[0] == [a.transactional_id, b.transactional_id, c.transactional_id]
    assert len(fakes.describes) == 2  # the batch's, and the fenced one's after its rejection
    assert fakes.by_id[a.transactional_id].end_txn_calls == []  # never sent EndTxn again
    assert fakes.by_id[b.transactional_id].end_txn_calls == [True]


def test_a_batch_whose_states_cannot_be_read_retries_or_goes_one_by_one() -> None:
    a, b = (replace(C, transactional_id=f"p-s-{p}-1") for p in range(2))
    fakes = FakeCoordinators(**{a.transactional_id: FakeCoordinator(), b.transactional_id: FakeCoordinator()})
    committer = KafkaCommitter(
        cast(KafkaAdmin, fakes), attempts=3, backoff_ms=1, transaction_timeout_ms=60_000
    )
    fakes.describe_error = kerrors.KafkaConnectionError("down")
    assert committer.commit_batch([a, b]) == [CommitOutcome.RETRY] * 2
    fakes.describe_error = None
    assert committer.commit_batch([a, a, b]) == [  # one id twice: one by one
        CommitOutcome.COMMITTED,
        CommitOutcome.ALREADY_COMMITTED,
        CommitOutcome.COMMITTED,
    ]
