"""One task's pass over its sinks (coordinator/run/fanout.py): the pre-commits of Spark's tasks
run at once, and a failure is raised only once every pre-commit has ended."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink, FakeTxn

from twophase.coordinator.run.fanout import EpochPlan, write_subtasks


class WaitingSink(FakeSink):
    """A fake sink whose pre-commit meets the others' at ``barrier`` (they must run at once) and
    records when its pre-commit ended and when its transaction was aborted."""

    def __init__(
        self,
        name: str,
        system: FakeExternalSystem,
        barrier: threading.Barrier,
        events: list[str],
        fail: bool = False,
    ) -> None:
        super().__init__(name, system)
        self.barrier = barrier
        self.events = events
        self.fail = fail

    def pre_commit(self, txn: FakeTxn) -> FakeCommittable | None:
        self.barrier.wait()
        if self.fail:
            self.events.append(f"{self.name} failed")
            raise ConnectionError(f"{self.name}: the service went away")
        committable = super().pre_commit(txn)
        self.events.append(f"{self.name} pre-committed")
        return committable

    def abort_open(self, txn: FakeTxn) -> None:
        self.events.append(f"{self.name} aborted")
        super().abort_open(txn)


def plan_of(sinks: tuple[FakeSink, ...]) -> EpochPlan:
    return EpochPlan(job_id="job", checkpoint_id=1, num_partitions=1, sinks=sinks, restored={})


def batches() -> list[pa.RecordBatch]:
    return [pa.record_batch({"key": ["a", "b"]})]


def test_spark_tasks_pre_commit_every_sink_at_once_and_acknowledge_in_plan_order() -> None:
    system, events = FakeExternalSystem(), list[str]()
    barrier = threading.Barrier(3, timeout=10)  # one after another, the first would wait alone
    sinks = tuple(WaitingSink(n, system, barrier, events) for n in ("kafka", "s3", "delta"))
    acks = write_subtasks(plan_of(sinks), 0, 0, batches(), fault=lambda _: None, pre_commit_at_once=True)
    assert [a.sink for a in acks] == ["kafka", "s3", "delta"]
    assert [a.records for a in acks] == [2, 2, 2]
    assert sorted(events) == ["delta pre-committed", "kafka pre-committed", "s3 pre-committed"]


def test_a_failed_pre_commit_is_raised_once_every_pre_commit_ended_and_then_all_are_aborted() -> None:
    system, events = FakeExternalSystem(), list[str]()
    barrier = threading.Barrier(3, timeout=10)
    sinks = (
        WaitingSink("kafka", system, barrier, events),
        WaitingSink("s3", system, barrier, events, fail=True),
        WaitingSink("delta", system, barrier, events),
    )
    with pytest.raises(ConnectionError, match="s3: the service went away"):
        write_subtasks(plan_of(sinks), 0, 0, batches(), fault=lambda _: None, pre_commit_at_once=True)
    ended = {"kafka pre-committed", "s3 failed", "delta pre-committed"}
    assert set(events[:3]) == ended  # every pre-commit ended before any abort
    assert events[3:] == ["kafka aborted", "s3 aborted", "delta aborted"]
    assert system.violations == []


def test_the_harness_keeps_the_pre_commits_in_plan_order() -> None:
    system, events = FakeExternalSystem(), list[str]()
    barrier = threading.Barrier(1)  # alone each time
    sinks = tuple(WaitingSink(n, system, barrier, events) for n in ("kafka", "s3", "delta"))
    write_subtasks(plan_of(sinks), 0, 0, batches(), fault=lambda _: None)
    assert events == ["kafka pre-committed", "s3 pre-committed", "delta pre-committed"]
