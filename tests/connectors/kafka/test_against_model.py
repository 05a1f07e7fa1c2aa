"""The Kafka sink's real code (writer, committer, admin, lingering cleanup) against a model of
Kafka's transaction coordinator (support.kafka_model), through the production runtime."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from support.clock import ManualClock
from support.harness import TwoPhaseHarness
from support.kafka_model import KafkaModel
from support.model_settle import settle

from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.sinks.errors import ConcurrentAttemptError, TransactionLostError

TOPIC = "events"


def rows(n: int, partitions: int = 2, per: int = 3) -> list[list[pa.RecordBatch]]:
    """Epoch n's input: ``partitions`` partitions of ``per`` records, keys and values ``e<n>p<p>r<r>``."""
    out = []
    for p in range(partitions):
        keys = [f"e{n}p{p}r{r}" for r in range(per)]
        out.append([pa.record_batch({"key": keys, "value": keys})])
    return out


def expected(epochs: range | list[int], partitions: int = 2, per: int = 3) -> list[bytes]:
    return sorted(f"e{n}p{p}r{r}".encode() for n in epochs for p in range(partitions) for r in range(per))


def pos(n: int) -> dict[str, object]:
    return {"engine": "spark", "query_id": "q", "batch_id": n}


def setup(runtime: RuntimeConfig | None = None, **config: object) -> tuple[TwoPhaseHarness, KafkaModel]:
    clock = ManualClock()
    model = KafkaModel(clock=clock)
    cfg = KafkaSinkConfig(bootstrap_servers="model:9092", topic=TOPIC, stats_wait_ms=10_000, **config)  # type: ignore[arg-type]
    sink = KafkaSink("out", cfg, clients=model)
    return TwoPhaseHarness([sink], job_id="job", clock=clock, config=runtime), model


def committed(model: KafkaModel) -> list[bytes]:
    return sorted(v for v in model.committed_values(TOPIC) if v is not None)


def test_epochs_commit_exactly_once_and_nothing_lingers() -> None:
    h, model = setup()
    h.restore()
    for n in (1, 2, 3):
        h.write_epoch(rows(n), source_position=pos(n))
    h.runtime.finish()
    assert committed(model) == expected([1, 2, 3])
    assert model.ongoing() == []


def test_a_crash_before_persist_leaves_transactions_that_the_restore_aborts() -> None:
    h, model = setup()
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1))
    h.crash_at("before_persist")
    h.expect_crash(lambda: h.write_epoch(rows(2), source_position=pos(2)))
    assert len(model.ongoing()) == 2  # epoch 2's pre-committed transactions, in no checkpoint
    h.restart_process()
    assert model.ongoing() == []
    h.write_epoch(rows(2), source_position=pos(2))
    h.runtime.finish()
    assert committed(model) == expected([1, 2])


def test_commits_find_the_coordinator_again_after_it_moves() -> None:
    """#14 scenario 6: after a broker restart moves the transaction coordinators, the admin's cached
    coordinator answers NOT_COORDINATOR; commits must re-find it, not answer RETRY forever."""
    h, model = setup(pool_size=4)
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1))  # the admin caches slot 1's coordinators
    model.move_coordinators()
    for n in range(2, 7):  # checkpoint 5 reuses slot 1's transactional ids
        h.write_epoch(rows(n), source_position=pos(n))
    h.runtime.finish()
    assert committed(model) == expected(range(1, 7))
    assert model.ongoing() == []


def test_cancel_aborts_lingering_transactions_after_the_coordinators_moved() -> None:
    """Found by the model-based test (seed 3): lingering cleanup's DescribeTransactions met
    NOT_COORDINATOR after a broker restart moved the coordinators and failed the cancel with
    "stopped answering", leaving the open transactions."""
    h, model = setup(pool_size=4)
    h.restore()
    h.write_epoch(rows(1, partitions=6), source_position=pos(1))  # the admin caches 6 coordinators
    model.move_coordinators()
    h.runtime.cancel()
    assert committed(model) == expected([1], partitions=6)
    assert model.ongoing() == []


def test_async_commit_never_lets_the_pool_wrap_onto_a_checkpoint_still_committing() -> None:
    """#14 scenario 3: with asynchronous commit, checkpoint c commits while later epochs write. A
    slow commit must hold back the epoch whose pooled transactional id is c's, or that epoch's
    init_transactions fences c's durable transaction (LOST)."""
    # max_pending_checkpoints=1: slots repeat every 3 checkpoints
    h, model = setup(RuntimeConfig(commit=CommitPolicy(async_commit=True)), pool_size=3)
    h.restore()
    model.end_txn_gate = threading.Event()  # checkpoint 1's commit stalls
    threading.Timer(0.5, model.end_txn_gate.set).start()
    for n in range(1, 6):
        h.write_epoch(rows(n), source_position=pos(n))
    h.runtime.finish()
    assert committed(model) == expected(range(1, 6))
    assert model.ongoing() == []


def test_an_epoch_runs_while_the_pool_has_room_for_its_ids() -> None:
    """#26 item 5: with max_pending_checkpoints=1 and a pool of 4, epoch c+2 waited for the commit
    of checkpoint c although its ids (slot c+2) are two slots away from c's; the pool keeps one
    spare slot (naming.MIN_POOL_HEADROOM) and allows pool_size - 2 checkpoints awaiting commit."""
    # a bound generous enough for a loaded machine (epoch 4 and finish wait for the commits once
    # the gate opens): an epoch 3 that waited for checkpoint 1 would find the gate closed and the
    # model's EndTxn would fail after its own 30 s (#45 item 7)
    runtime = RuntimeConfig(commit=CommitPolicy(async_commit=True), commit_drain_timeout_s=120)
    h, model = setup(runtime, pool_size=4, max_pending_checkpoints=1)
    assert h.sink("out").max_pending_checkpoints == 2
    h.restore()
    model.end_txn_gate = threading.Event()  # checkpoint 1's commit stalls
    for n in (1, 2, 3):  # 3 = c + 2 runs beside c = 1 still committing
        h.write_epoch(rows(n), source_position=pos(n))
    model.end_txn_gate.set()
    h.write_epoch(rows(4), source_position=pos(4))
    h.runtime.finish()
    assert committed(model) == expected(range(1, 5))
    assert model.ongoing() == []


def _fail_publish(h: TwoPhaseHarness, *ids: int) -> None:
    from twophase.coordinator.state.metadata import CheckpointMetadata

    def hook(meta: CheckpointMetadata) -> None:
        if meta.checkpoint_id in ids:
            raise OSError("checkpoint storage refused the write")

    h.storage.publish_hook = hook


def test_epochs_failing_in_process_never_turn_a_committed_checkpoint_into_lost() -> None:
    """#14 scenario 5: epochs that fail before their checkpoint is durable, with in-process
    failovers, must not use up checkpoint ids until one re-initialises the transactional ids of
    the latest (committed) checkpoint: the next restore would re-commit it, be answered
    PRODUCER_FENCED, report LOST and refuse to start although the data is visible."""
    from twophase.coordinator.run.restart import RestartStrategy

    h, model = setup(RuntimeConfig(restart=RestartStrategy.fixed_delay(10, 0)), pool_size=4)
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1))
    _fail_publish(h, *range(2, 20))
    for _ in range(5):  # five failed attempts at batch 2, each followed by a failover
        try:
            h.write_epoch(rows(2), source_position=pos(2))
        except Exception as e:
            h.runtime.failover(e)
    h.storage.publish_hook = None
    h.write_epoch(rows(2), source_position=pos(2))
    h.runtime.finish()
    assert committed(model) == expected([1, 2])
    assert model.ongoing() == []


def test_restoring_an_older_savepoint_never_reports_its_committed_transactions_lost() -> None:
    h, model = setup(pool_size=4)
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1), notify=False)  # commit not notified yet (async, late)
    savepoint = h.runtime.stop_with_savepoint(drain=False)  # holds checkpoint 1's transactions; commits
    h.restart_process(savepoint_location=savepoint.location)
    for n in range(2, 8):  # later checkpoints reuse the savepoint's slots
        h.write_epoch(rows(n), source_position=pos(n))
    h.runtime.stop()
    h.restart_process(savepoint_location=savepoint.location)  # the user goes back to the savepoint
    for n in range(2, 4):
        h.write_epoch(rows(n), source_position=pos(n))
    h.runtime.finish()
    assert committed(model) == expected([1, *range(2, 8), 2, 3])
    assert model.ongoing() == []


def test_a_restore_after_transactional_id_expiration_never_reports_committed_data_lost() -> None:
    h, model = setup()
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1), notify=False)
    h.runtime.stop()  # holds checkpoint 1's transactions and commits them; the job stays away
    # longer than transactional.id.expiration.ms
    h.clock.advance(model.id_expiration_ms + 1)
    model.advance()
    h.restart_process()
    h.write_epoch(rows(2), source_position=pos(2))
    h.runtime.finish()
    assert committed(model) == expected([1, 2])


def test_an_asynchronous_commit_writes_the_committed_marker_when_it_lands() -> None:
    """#26 item 2: with async commit the marker waited for the next driver action. A job idle
    after a commit whose driver then stays down past transactional.id.expiration.ms re-committed
    on restore, could not tell (the id expired) and refused to start with TransactionLostError
    for visible data. The marker is written by the thread that lands the commit."""
    h, model = setup(RuntimeConfig(commit=CommitPolicy(async_commit=True)))
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1))
    settle(h.runtime)  # the commit lands on the committer thread; no driver action follows
    latest = h.storage.list_checkpoints()[-1]
    assert h.storage.is_committed(latest.location)
    h.clock.advance(model.id_expiration_ms + 1)  # the driver dies and stays down past id expiry
    model.advance()
    restored = h.restart_process()
    assert restored is not None and restored.recommitted == 0
    h.write_epoch(rows(2), source_position=pos(2))
    h.runtime.finish()
    assert committed(model) == expected([1, 2])
    assert model.ongoing() == []


def test_a_commit_whose_marker_write_failed_is_found_in_the_log_after_the_id_expired() -> None:
    """#26 item 2: the commit landed, but the checkpoint's committed marker was not written (the
    storage refused it; the driver dying in between does the same), and the driver stayed down past
    transactional.id.expiration.ms. The re-commit on restore cannot ask the coordinator any more;
    the COMMIT marker in the partition's log decides, and the job starts."""
    h, model = setup()
    h.restore()

    h.storage.refuse_markers = 10
    h.write_epoch(rows(1), source_position=pos(1))
    assert committed(model) == expected([1])
    h.runtime.abandon()  # the driver dies
    h.clock.advance(model.id_expiration_ms + 1)
    model.advance()
    assert model.txns == {}  # the coordinator forgot every id
    restored = h.restart_process()
    assert restored is not None and restored.recommitted == 2
    assert len(model.searches) == 2 and {search[0] for search in model.searches} == {TOPIC}
    h.write_epoch(rows(2), source_position=pos(2))
    h.runtime.finish()
    assert committed(model) == expected([1, 2])
    assert model.ongoing() == []


@pytest.mark.parametrize("where_it_fails", [None, "end_offset"])
def test_a_forgotten_commit_is_found_past_more_than_the_bound_of_other_traffic(
    where_it_fails: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#43 item 1: 5 GiB of other traffic arrived just before the checkpoint, the committed
    marker was refused and the ids expired. The search starts at the offset the writer read after
    its last record was acknowledged, so the traffic before it does not count against the 4 GiB
    bound. When the writer could not read that offset, the search starts five minutes before the
    transaction opened, as for committables of version 2, stops on its bound, and the LOST says so."""
    h, model = setup()
    if where_it_fails is not None:

        def refused(*_: object) -> int:
            raise TimeoutError("ListOffsets timed out")

        monkeypatch.setattr(model, "end_offset", refused)
    h.restore()
    model.busy(TOPIC, 5 * 1024 * 1024 * 1024)
    h.storage.refuse_markers = 10
    h.write_epoch(rows(1), source_position=pos(1))
    h.runtime.abandon()
    h.clock.advance(model.id_expiration_ms + 1)
    model.advance()
    if where_it_fails is None:
        restored = h.restart_process()
        assert restored is not None and restored.recommitted == 2
        assert committed(model) == expected([1])
        return
    with pytest.raises(TransactionLostError, match=r"stopped at its bound of 4294967296 bytes"):
        h.restart_process()


def test_a_commit_whose_marker_retention_deleted_is_reported_lost_by_name() -> None:
    """When the log no longer holds the marker either, nothing can tell: LOST, naming the
    transactions (the restore refuses to start unless told to skip them)."""
    h, model = setup()
    h.restore()

    h.storage.refuse_markers = 10
    h.write_epoch(rows(1), source_position=pos(1))
    h.runtime.abandon()
    h.clock.advance(model.id_expiration_ms + 1)
    model.advance()
    model.delete_logs()
    with pytest.raises(TransactionLostError, match="twophase-job-out-0-1-0"):
        h.restart_process()


def test_a_zombie_attempt_that_fences_the_acknowledged_transaction_is_caught_before_persist() -> None:
    """#14 scenario 8: after a stage retry Spark keeps old attempts running beside new ones and takes
    the first success per partition. A zombie's init_transactions on the shared transactional id
    fences the acknowledged attempt's pre-committed transaction; persisting that would be LOST
    after the checkpoint (data gone). The runtime verifies before persisting and retries the epoch."""
    from twophase.coordinator.run.restart import RestartStrategy

    h, model = setup(RuntimeConfig(restart=RestartStrategy.fixed_delay(3, 0)))
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1))
    epoch = h.begin_epoch(2, pos(2))
    for p, batches in enumerate(rows(2)):
        h.run_subtask(epoch, "out", p, batches)  # the attempts Spark acknowledges
    h.run_subtask(epoch, "out", 0, rows(2)[0], attempt=0, acknowledge=False)  # a zombie, still running
    try:
        h.complete(epoch)
        raise AssertionError("a fenced transaction was persisted")
    except Exception as e:
        assert "another attempt" in str(e)
        h.runtime.failover(e)
    h.write_epoch(rows(2), source_position=pos(2))  # the engine retries the batch
    h.runtime.finish()
    assert committed(model) == expected([1, 2])
    assert model.ongoing() == []


def test_lost_notifications_never_stop_the_job_when_the_pool_would_wrap() -> None:
    """Found by the model-based test: two completed checkpoints whose notifications were lost held
    back the next epoch (its pooled ids would fence them) with a JobError. A completed checkpoint
    may be committed at any time after it completed; the epoch commits them first."""
    h, model = setup(pool_size=3)
    h.restore()
    h.write_epoch(rows(1), source_position=pos(1))
    h.write_epoch(rows(2), source_position=pos(2), notify=False)
    h.write_epoch(rows(3), source_position=pos(3), notify=False)
    h.write_epoch(rows(4), source_position=pos(4))
    h.runtime.finish()
    assert committed(model) == expected(range(1, 5))
    assert model.ongoing() == []


def test_a_zombie_on_an_id_a_retained_checkpoint_names_never_lingers() -> None:
    """Found by the model-based test: with asynchronous commit (no committed marker yet) and three
    retained checkpoints, checkpoint 1 still names the pooled ids that epoch 4 reuses. A zombie
    attempt of epoch 4 with the winner's attempt number (one of an earlier stage attempt: Spark
    numbers attempts from 0 again in each) fences the acknowledged transaction (the epoch fails
    over) and leaves its own Ongoing on such an id; the restore's lingering cleanup must abort it."""
    from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
    from twophase.coordinator.run.fanout import write_subtasks

    cfg = RuntimeConfig(
        checkpoint=CheckpointConfig(retained_checkpoints=3), commit=CommitPolicy(async_commit=True)
    )
    h, model = setup(cfg, pool_size=3)
    h.restore()
    for n in (1, 2, 3):
        h.write_epoch(rows(n), source_position=pos(n))
    epoch = h.begin_epoch(2, pos(4))
    for p, batches in enumerate(rows(4)):
        [ack] = write_subtasks(epoch.plan(), p, 0, batches)
        epoch.acknowledge(ack)
    write_subtasks(epoch.plan(), 0, 0, rows(4)[0])  # the zombie: same partition, after the winner
    with pytest.raises(ConcurrentAttemptError):
        h.complete(epoch)
    h.runtime.failover(ConcurrentAttemptError("zombie"))
    h.runtime.finish()
    assert committed(model) == expected([1, 2, 3])
    assert model.ongoing() == []


def test_a_later_attempt_cannot_fence_the_acknowledged_transaction() -> None:
    """#26 item 4: every attempt number has its own transactional id, so an attempt that runs
    after the acknowledged one (a speculative copy, an attempt on an executor Spark declared lost)
    does not fence it: the epoch completes, and the cleanup after it aborts the late attempt's
    transaction. (The same attempt after the publish: the model check's ``zombie_after_publish``.)"""
    from twophase.coordinator.run.fanout import write_subtasks

    h, model = setup(RuntimeConfig(), pool_size=3)
    h.restore()
    epoch = h.begin_epoch(2, pos(1))
    for p, batches in enumerate(rows(1)):
        [ack] = write_subtasks(epoch.plan(), p, 0, batches)
        epoch.acknowledge(ack)
    write_subtasks(epoch.plan(), 0, 1, rows(1)[0])  # before the publish
    h.complete(epoch)
    assert committed(model) == expected([1])
    assert model.ongoing() == []

    epoch = h.begin_epoch(2, pos(2))
    for p, batches in enumerate(rows(2)):
        [ack] = write_subtasks(epoch.plan(), p, 0, batches)
        epoch.acknowledge(ack)
    late = [write_subtasks(epoch.plan(), p, 2, batches) for p, batches in enumerate(rows(2))]
    assert {a.attempt for [a] in late} == {2}
    h.complete(epoch)
    assert committed(model) == expected([1, 2])
    assert model.ongoing() == []


def test_a_checkpoint_whose_transactions_outlived_the_timeout_is_refused_naming_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An epoch that runs longer than ``transaction_timeout_ms`` (one of 10⁴ subtasks on two cores
    took 20 minutes against Kafka's default 15-minute maximum, 2026-12-05): the broker aborts its
    first transactions and bumps their epochs, as another attempt's fencing would. The verification
    before persist refuses the checkpoint either way, and names the timeout when the transaction is
    older than it, with what to change, instead of blaming another attempt."""
    import time

    from twophase.coordinator.run.fanout import write_subtasks

    h, model = setup(transaction_timeout_ms=600_000)
    h.restore()
    epoch = h.begin_epoch(2, pos(1))
    for p, batches in enumerate(rows(1)):
        [ack] = write_subtasks(epoch.plan(), p, 0, batches)
        epoch.acknowledge(ack)
    h.clock.advance(600_001)
    model.advance()
    wall = time.time() + 601.0
    monkeypatch.setattr(time, "time", lambda: wall)
    with pytest.raises(ConcurrentAttemptError, match=r"older than the transaction timeout.*600000 ms") as e:
        h.complete(epoch)
    assert "max_epoch_ms" in str(e.value) and "transaction.max.timeout.ms" in str(e.value)
    assert "fenced it" not in str(e.value)
    assert committed(model) == []


def test_a_transaction_fenced_within_the_timeout_is_refused_naming_another_attempt() -> None:
    from twophase.coordinator.run.fanout import write_subtasks

    h, _model = setup()
    h.restore()
    epoch = h.begin_epoch(2, pos(1))
    for p, batches in enumerate(rows(1)):
        [ack] = write_subtasks(epoch.plan(), p, 0, batches)
        epoch.acknowledge(ack)
    write_subtasks(epoch.plan(), 0, 0, rows(1)[0])  # a zombie with the winner's attempt number
    with pytest.raises(ConcurrentAttemptError, match="another attempt of the same subtask fenced it"):
        h.complete(epoch)
