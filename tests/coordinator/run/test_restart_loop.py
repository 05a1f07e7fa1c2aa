"""Failing over while a service is still down: the restore itself fails and is retried."""

from __future__ import annotations

import pytest
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness, batch

from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.restart_loop import fail_over, finish_with_restarts
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.sinks.errors import (
    JobError,
    JobRefusedError,
    S3AccessDeniedError,
    ServiceUnavailableError,
    TlsCertificateError,
    find_refusal,
)


def harness(restarts: int) -> tuple[TwoPhaseHarness, FakeExternalSystem, list[str]]:
    """A job whose epoch 2 failed after pre-commit (its transaction lingers), and whose external
    system refuses the next ``outages`` aborts (set by the test)."""
    system = FakeExternalSystem()
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(restarts, 0))
    h = TwoPhaseHarness([FakeSink("k", system)], config=cfg)
    h.restore()
    h.write_epoch([[batch(["a"])]])
    epoch = h.write_epoch([[batch(["b"])]], complete=False)
    assert epoch is not None
    refused: list[str] = []
    return h, system, refused


def test_a_restore_that_fails_while_the_service_is_down_is_retried_by_the_strategy() -> None:
    """Found by the fault suite (broker killed mid-write): the restore's lingering cleanup met the
    broker still down, and the streaming job died instead of failing over again."""
    h, system, refused = harness(restarts=5)
    outage = [2]

    def abort(txn_id: str) -> None:
        if outage[0] > 0:
            outage[0] -= 1
            refused.append(txn_id)
            raise ServiceUnavailableError("brokers stopped answering")

    system.abort_hook = abort
    fail_over(h.runtime, RuntimeError("a task failed"))
    assert h.runtime.state is JobState.RUNNING
    assert len(refused) == 2 and system.lingering() == set()
    h.write_epoch([[batch(["b"])]])
    h.runtime.finish()
    assert sorted(r for recs in system.committed.values() for r in recs) == ["a", "b"]


def test_failing_over_gives_up_when_the_strategy_is_exhausted() -> None:
    h, system, _ = harness(restarts=2)

    def abort(txn_id: str) -> None:
        raise ServiceUnavailableError("brokers stopped answering")

    system.abort_hook = abort
    with pytest.raises(JobError, match="restart strategy exhausted"):
        fail_over(h.runtime, RuntimeError("a task failed"))
    assert h.runtime.state is JobState.FAILED


def test_a_finish_whose_lingering_cleanup_fails_fails_over_and_finishes() -> None:
    """Found by the fault suite (broker killed during the final checkpoint): the final checkpoint
    committed, its lingering cleanup met the broker down, and the streaming job died. It fails
    over (restored from the final checkpoint) and finishes with nothing left to do."""
    system = FakeExternalSystem()
    cfg = RuntimeConfig(restart=RestartStrategy.fixed_delay(5, 0), abort_lingering_each_epoch=False)
    h = TwoPhaseHarness([FakeSink("k", system)], config=cfg)
    h.restore()
    epoch = h.begin_epoch(1)
    h.run_subtask(epoch, "k", 0, [batch(["a"])])
    h.run_subtask(epoch, "k", 0, [batch(["a"])], attempt=1, acknowledge=False)  # lingers
    h.complete(epoch)
    outage = [2]

    def abort(txn_id: str) -> None:
        if outage[0] > 0:
            outage[0] -= 1
            raise ServiceUnavailableError("brokers stopped answering")

    system.abort_hook = abort
    finish_with_restarts(h.runtime, None)
    assert h.runtime.state is JobState.FINISHED
    assert system.lingering() == set()
    assert sorted(r for recs in system.committed.values() for r in recs) == ["a"]


def test_a_refusal_is_not_restarted_however_many_restarts_the_strategy_allows() -> None:
    """#45 item 8: a missing permission met by a restore's lingering cleanup (as a missing
    s3:DeleteObject is) ended the job only after the strategy's three restarts met it again."""
    h, system, refused = harness(restarts=3)

    def abort(txn_id: str) -> None:
        refused.append(txn_id)
        raise S3AccessDeniedError("s3:DeleteObject", "s3://b/p/_twophase/t/tails/1.tail", "DeleteObjects")

    system.abort_hook = abort
    with pytest.raises(JobRefusedError, match=r"not restarted: S3AccessDeniedError: S3 denied s3:Delete"):
        fail_over(h.runtime, RuntimeError("a task failed"))
    assert h.runtime.state is JobState.FAILED
    # the task failure was granted its restart; the restore's refusal was not retried (tried
    # twice: by the failure's own best-effort abort, and by the one restore)
    assert len(refused) == 2 and len(h.runtime.restarts.restarts) == 1


def test_a_refusal_met_on_an_executor_ends_the_job_at_once() -> None:
    """An executor's refusal reaches the driver as the text of Spark's task failure; its type is
    known on the driver, which imported the connector's errors with its sink."""
    from twophase.connectors.kafka.errors import KafkaAuthorizationError

    assert KafkaAuthorizationError.__name__ in str(find_refusal(KafkaAuthorizationError("x")))
    h, _, _ = harness(restarts=3)
    task_failure = RuntimeError(
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "writer.py", line 583, in _raise_if_failed\n'
        "twophase.connectors.kafka.errors.KafkaAuthorizationError: User:u is denied Write on Topic 't'\n"
    )
    with pytest.raises(JobRefusedError) as ended:
        fail_over(h.runtime, task_failure)
    assert str(ended.value) == (
        f"job {h.runtime.job_id} refused, not restarted: "
        "KafkaAuthorizationError: User:u is denied Write on Topic 't'"
    )
    assert ended.value.refusal == "KafkaAuthorizationError"
    assert h.runtime.state is JobState.FAILED and h.runtime.restarts.restarts == []


def test_a_failure_failed_again_by_the_refusal_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """The epoch's action fails the job (FAILING, logged); the refusal found in the same error
    fails it again on its way to FAILED: one failure, one "job failing" line (a user's stderr
    showed it twice for one refused epoch)."""
    h, _, _ = harness(restarts=3)
    denied = S3AccessDeniedError("s3:DeleteObject", "s3://b/p/_twophase/t/tails/1.tail", "DeleteObjects")
    h.runtime.fail(denied)  # as the action that raised it does
    with pytest.raises(JobRefusedError):
        fail_over(h.runtime, denied)
    assert [r.getMessage().split(" ")[:2] for r in caplog.records].count(["job", "failing"]) == 1
    assert h.runtime.state is JobState.FAILED


def test_run_with_restarts_ends_at_once_on_a_refusal() -> None:
    system = FakeExternalSystem()
    config = RuntimeConfig(restart=RestartStrategy.fixed_delay(3, 0))
    h = TwoPhaseHarness([FakeSink("k", system)], config=config)
    runs: list[int] = []

    def body(runtime: object) -> None:
        runs.append(1)
        raise TlsCertificateError("https://s3:9000", "AWS_CA_BUNDLE", "/etc/ca.pem", "verify failed")

    with pytest.raises(JobRefusedError, match=r"AWS_CA_BUNDLE=/etc/ca\.pem") as ended:
        h.runtime.run_with_restarts(body)
    assert isinstance(ended.value.__cause__, TlsCertificateError)
    assert runs == [1] and h.runtime.restarts.restarts == []
    assert h.runtime.state is JobState.FAILED
