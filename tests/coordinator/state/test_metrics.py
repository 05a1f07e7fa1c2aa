"""Per-sink commit metrics recorded by the runtime (JobRuntime.sink_metrics)."""

from __future__ import annotations

import pyarrow as pa
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness, batch

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.metrics import SinkCommitMetrics, SinkMetricsRecorder
from twophase.sinks.outcome import CommitOutcome, CommittableSize


def data(n: int) -> list[list[pa.RecordBatch]]:
    return [[batch([f"e{n}p{p}r{r}" for r in range(3)])] for p in range(2)]


def pos(n: int) -> dict[str, object]:
    return {"engine": "spark", "query_id": "q", "batch_id": n}


def test_commits_are_counted_per_sink_and_checkpoint() -> None:
    system = FakeExternalSystem()
    h = TwoPhaseHarness([FakeSink("a", system), FakeSink("b", system)])
    h.restore()
    for n in (1, 2):
        h.write_epoch(data(n), source_position=pos(n))
    h.runtime.finish()
    per = {(m.sink, m.checkpoint_id): m for m in h.runtime.sink_metrics.per_checkpoint()}
    assert per[("a", 1)] == SinkCommitMetrics(
        "a", 1, transactions_committed=2, records_committed=6, commit_ms=per[("a", 1)].commit_ms
    )
    totals = h.runtime.sink_metrics.totals()
    assert set(totals) == {"a", "b"}
    for t in totals.values():
        assert (t.transactions_committed, t.records_committed, t.checkpoints) == (4, 12, (1, 2))
        assert t.bytes_committed is None and t.transactions_aborted == t.lingering_aborted == 0


def test_recovery_counts_already_committed_and_lingering_aborts() -> None:
    system = FakeExternalSystem()
    h = TwoPhaseHarness(
        [FakeSink("a", system)], config=RuntimeConfig(checkpoint=CheckpointConfig(retained_checkpoints=2))
    )
    h.restore()
    h.write_epoch(data(1), source_position=pos(1))
    h.write_epoch(data(2), source_position=pos(2), notify=False)  # durable, not yet committed
    h.crash_at("before_persist")  # epoch 3 pre-committed, never durable: lingering after restart
    h.expect_crash(lambda: h.write_epoch(data(3), source_position=pos(3)))
    h.restart_process()
    totals = h.runtime.sink_metrics.totals()["a"]
    # the restore committed checkpoint 2's two transactions and aborted epoch 3's two
    assert (totals.transactions_committed, totals.lingering_aborted) == (2, 2)
    assert totals.transactions_already_committed == 0 and totals.checkpoints == (2,)
    h.restart_process()  # checkpoint 2 is marked committed now: nothing is re-committed
    assert h.runtime.sink_metrics.totals() == {}


def test_bytes_sum_only_what_sinks_report() -> None:
    r = SinkMetricsRecorder()
    r.committed("s", 1, CommitOutcome.COMMITTED, [CommittableSize(3, 100), CommittableSize(2, None)], 5.0)
    r.committed("s", 2, CommitOutcome.COMMITTED, [CommittableSize(1, None)], 1.0)
    r.committed("s", 2, CommitOutcome.RETRY, [CommittableSize(9, 9)], 2.0)
    t = r.totals()["s"]
    assert (t.records_committed, t.bytes_committed, t.commit_ms, t.checkpoints) == (6, 100, 8.0, (1, 2))


def test_checkpoint_metrics_count_only_transactions_committed_now() -> None:
    """#14 scenario 10: an ALREADY_COMMITTED answer is not a transaction this checkpoint committed."""
    system = FakeExternalSystem()
    h = TwoPhaseHarness([FakeSink("a", system)])
    h.restore()
    system.script("a-c1-p0-a0", CommitOutcome.ALREADY_COMMITTED)  # committed by an earlier process
    h.write_epoch(data(1), source_position=pos(1))
    m = h.runtime.checkpoint_metrics[-1]
    assert (m.transactions_committed, m.transactions_already_committed) == (1, 1)


def test_a_long_run_keeps_a_bounded_history_and_exact_totals() -> None:
    """A streaming job runs for months: per-checkpoint metrics are kept for the newest
    ``metrics_history`` checkpoints only (the soak, #29 item 5), while totals count every one."""
    r = SinkMetricsRecorder(history=3)
    for c in range(1, 11):
        r.committed("s", c, CommitOutcome.COMMITTED, [CommittableSize(2, 10)], 1.0)
    r.aborted("s", 10)
    assert [m.checkpoint_id for m in r.per_checkpoint()] == [8, 9, 10]
    t = r.totals()["s"]
    assert (t.transactions_committed, t.records_committed, t.bytes_committed, t.commit_ms) == (
        10,
        20,
        100,
        10.0,
    )
    assert (t.checkpoint_count, t.checkpoints, t.transactions_aborted) == (10, (8, 9, 10), 1)


def test_the_runtime_keeps_the_newest_checkpoint_metrics_and_counts_all() -> None:
    system = FakeExternalSystem()
    h = TwoPhaseHarness([FakeSink("a", system)], config=RuntimeConfig(metrics_history=2))
    h.restore()
    for n in (1, 2, 3, 4):
        h.write_epoch(data(n), source_position=pos(n))
    assert [m.checkpoint_id for m in h.runtime.checkpoint_metrics] == [3, 4]
    assert h.runtime.checkpoints_completed == {CheckpointKind.CHECKPOINT: 4}
    assert h.runtime.sink_metrics.totals()["a"].checkpoint_count == 4
