"""The subtask lifecycle (FLIP-147 table): transitions, pending transactions, the 42/43/44 example."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from twophase.coordinator.state.subtask_lifecycle import (
    TRANSITIONS,
    PendingTransaction,
    SubtaskLifecycle,
    SubtaskState,
    SubtaskTransition,
    TxnStatus,
)
from twophase.sinks.errors import IllegalTransitionError


def ids(txns: Sequence[PendingTransaction[str]]) -> list[str]:
    return [t.committable for t in txns]


def state_of(lc: SubtaskLifecycle[str]) -> SubtaskState:
    """The state as of now (a call: mypy keeps no narrowing from an earlier assert across it)."""
    return lc.state


def test_commit_every_pending_up_to_notified_checkpoint_in_order() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    for c in (1, 2, 3):
        lc.snapshot(c, 0, [f"t{c}"], None, now_ms=0)
    lc.checkpoint_persisted(2)
    actions = lc.notify_checkpoint_complete(2)
    assert ids(actions.commit) == ["t1", "t2"]
    assert actions.abort == ()
    # a late, older notification finds nothing left (subsumed)
    assert lc.notify_checkpoint_complete(1).commit == ()
    # committing transactions stay held until confirmed
    assert ids(lc.uncommitted(3)) == ["t1", "t2", "t3"]
    for t in actions.commit:
        lc.commit_confirmed(t)
    assert ids(lc.uncommitted(3)) == ["t3"]
    assert lc.uncommitted(3)[0].status is TxnStatus.PRE_COMMITTED


def test_notify_for_a_checkpoint_that_is_not_durable_is_illegal() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.snapshot(1, 0, ["t1"], None, now_ms=0)
    with pytest.raises(IllegalTransitionError, match="not durable"):
        lc.notify_checkpoint_complete(1)


def test_flip147_42_43_44_commit_up_to_43_then_close_aborts_44() -> None:
    """FLIP-147: finish(); 42, 43, 44 triggered; notifyCheckpointComplete(43) → commit 42 and 43,
    close, abort 44's transaction (opened after finish by the sink)."""
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.finish(last_triggered_checkpoint=41)
    assert lc.state is SubtaskState.WAITING_FOR_FINAL_CHECKPOINT
    for c in (42, 43, 44):
        lc.snapshot(c, 0, [f"t{c}"], None, now_ms=0)
    lc.checkpoint_persisted(43)
    actions = lc.notify_checkpoint_complete(43)
    assert ids(actions.commit) == ["t42", "t43"]
    assert ids(actions.abort) == ["t44"]
    assert state_of(lc) is SubtaskState.FINISHED
    with pytest.raises(IllegalTransitionError):
        lc.notify_checkpoint_complete(44)


def test_final_close_commits_later_transactions_that_are_already_durable() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.finish(last_triggered_checkpoint=41)
    for c in (42, 43, 44):
        lc.snapshot(c, 0, [f"t{c}"], None, now_ms=0)
    lc.checkpoint_persisted(44)  # 44 completed before notify(43) arrived
    actions = lc.notify_checkpoint_complete(43)
    assert ids(actions.commit) == ["t42", "t43", "t44"]
    assert actions.abort == ()


def test_notification_of_a_checkpoint_triggered_before_finish_does_not_close() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.snapshot(5, 0, ["t5"], None, now_ms=0)
    lc.finish(last_triggered_checkpoint=5)
    lc.checkpoint_persisted(5)
    assert ids(lc.notify_checkpoint_complete(5).commit) == ["t5"]
    assert lc.state is SubtaskState.WAITING_FOR_FINAL_CHECKPOINT
    lc.snapshot(6, 0, [], None, now_ms=0)
    lc.checkpoint_persisted(6)
    lc.notify_checkpoint_complete(6)
    assert state_of(lc) is SubtaskState.FINISHED


def test_failure_close_aborts_only_what_is_not_durable() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.snapshot(1, 0, ["t1"], None, now_ms=0)
    lc.snapshot(2, 0, ["t2"], None, now_ms=0)
    lc.checkpoint_persisted(1)
    actions = lc.close()
    assert ids(actions.abort) == ["t2"]
    assert lc.state is SubtaskState.CLOSED
    assert ids(list(lc.pending)) == ["t1"]  # durable: left to the restore


def test_aborted_checkpoint_aborts_its_transactions_and_in_progress_state() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0, {"v": 0}, 0)
    lc.snapshot(1, 0, ["t1"], {"v": 1}, now_ms=0)
    assert ids(lc.notify_checkpoint_aborted(1).abort) == ["t1"]
    assert lc.latest_in_progress == {"v": 0}
    lc.snapshot(1, 1, ["t1b"], {"v": 2}, now_ms=0)  # a retried epoch may acknowledge again
    assert lc.in_progress_for(1) == {"v": 2}


def test_in_progress_state_by_checkpoint() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0, {"v": 0}, 3)
    lc.snapshot(4, 0, [], {"v": 4}, now_ms=0)
    lc.snapshot(5, 0, [], {"v": 5}, now_ms=0)
    assert lc.in_progress_for(3) == {"v": 0}
    assert lc.in_progress_for(4) == {"v": 4}
    lc.checkpoint_persisted(4)
    assert lc.in_progress_for(4) == {"v": 4}
    assert lc.latest_in_progress == {"v": 5}


@pytest.mark.parametrize("state", list(SubtaskState))
@pytest.mark.parametrize("transition", list(SubtaskTransition))
def test_transition_table_is_enforced(state: SubtaskState, transition: SubtaskTransition) -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.state = state
    lc.finished_after = 0
    calls: dict[SubtaskTransition, Callable[[], object]] = {
        SubtaskTransition.SNAPSHOT: lambda: lc.snapshot(1, 0, [], None, 0),
        SubtaskTransition.FINISH: lambda: lc.finish(0),
        SubtaskTransition.NOTIFY_CHECKPOINT_COMPLETE: lambda: lc.notify_checkpoint_complete(0),
        SubtaskTransition.NOTIFY_CHECKPOINT_ABORTED: lambda: lc.notify_checkpoint_aborted(1),
        SubtaskTransition.FINAL_CHECKPOINT_COMPLETE: lambda: lc.notify_checkpoint_complete(1),
        SubtaskTransition.CLOSE: lambda: lc.close(),
    }
    call = calls[transition]
    legal = (state, transition) in TRANSITIONS
    if transition is SubtaskTransition.FINAL_CHECKPOINT_COMPLETE:
        legal = state.is_live  # notify(1) after finish at 0 is the final checkpoint when waiting
    if legal:
        call()
    else:
        with pytest.raises(IllegalTransitionError) as e:
            call()
        assert e.value.state == state.value


def test_snapshot_twice_for_one_checkpoint_is_illegal() -> None:
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    lc.snapshot(1, 0, ["a"], None, 0)
    with pytest.raises(IllegalTransitionError, match="twice"):
        lc.snapshot(1, 1, ["b"], None, 0)


def test_a_long_run_keeps_state_for_pending_checkpoints_only() -> None:
    # the soak (#29 item 5) found the ids of every checkpoint ever acknowledged kept per subtask;
    # the coordinator refuses acknowledgements of checkpoints no longer pending, so completed ids go
    lc: SubtaskLifecycle[str] = SubtaskLifecycle("s", 0)
    for c in range(1, 1001):
        lc.snapshot(c, 0, [f"t{c}"], {"offset": c}, now_ms=0)
        lc.checkpoint_persisted(c)
        for t in lc.notify_checkpoint_complete(c).commit:
            lc.commit_confirmed(t)
    lc.snapshot(1001, 0, ["t1001"], None, now_ms=0)
    assert lc._snapshotted == {1001} and len(lc._in_progress) <= 2 and ids(lc.pending) == ["t1001"]
    with pytest.raises(IllegalTransitionError, match="twice"):
        lc.snapshot(1001, 0, ["again"], None, now_ms=0)
