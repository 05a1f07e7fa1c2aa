"""An epoch's acknowledgements as one Arrow table (issue #42): the checks in Arrow compute agree
with recording the acknowledgements one by one, and a table that fails a check records nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import ManualClock
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import batch
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator import ack_table
from twophase.coordinator.acknowledgement import (
    ACK_SCHEMA,
    Acknowledgement,
    acknowledgement_table,
    acknowledgements_in,
)
from twophase.coordinator.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint_state import CheckpointConfig, DuplicateAcknowledgementError
from twophase.coordinator.committer_operator import CommitterOperator
from twophase.coordinator.metadata import CheckpointKind
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import ConfigError, IllegalTransitionError, JobError

JOB = "job"


def coordinator() -> tuple[CheckpointCoordinator, FakeExternalSystem]:
    system = FakeExternalSystem()
    sinks = [FakeSink(f"s{i}", system) for i in range(2)]
    clock = ManualClock()
    committer = CommitterOperator(JOB, {s.name: s for s in sinks}, clock=clock, sleep=clock.sleep)
    cfg = CheckpointConfig(max_concurrent_checkpoints=2, retained_checkpoints=2)
    storage = InMemoryCheckpointStorage(JOB)
    coord = CheckpointCoordinator(JOB, sinks, storage, committer, cfg, clock=clock, fault=lambda p: None)
    return coord, system


def acknowledgement(coord: CheckpointCoordinator, sink: str, partition: int, attempt: int) -> Acknowledgement:
    """Subtask (sink, partition)'s attempt ``attempt`` of checkpoint 1, run in-process."""
    s = coord.sinks[sink]
    txn = s.begin_transaction(WriterContext(JOB, sink, 1, partition, attempt, 3))
    s.write(txn, batch([f"{sink}-{partition}-{attempt}"]))
    return Acknowledgement.of(s, partition, attempt, s.pre_commit(txn), {"offset": attempt}, 1)


def test_rows_round_trip_through_the_schema_as_binary_json() -> None:
    ack = Acknowledgement("s0", 3, 1, {"kind": "k", "version": 1, "body": {"x": "é"}}, {"o": 1}, 7, 2.5)
    table = acknowledgement_table([ack, Acknowledgement("s1", 0, 0)])
    assert table.schema.equals(ACK_SCHEMA)
    assert table["committable"][0].as_py() == b'{"kind":"k","version":1,"body":{"x":"\\u00e9"}}'
    assert acknowledgements_in(table) == [ack, Acknowledgement("s1", 0, 0)]


def test_large_var_types_from_spark_are_taken() -> None:
    table = acknowledgement_table([Acknowledgement("s0", 0, 0, {"kind": "k", "version": 1, "body": {}})])
    large = table.cast(
        pa.schema([f.with_type(pa.large_binary() if f.type == pa.binary() else f.type) for f in ACK_SCHEMA])
    )
    assert ack_table.normalized(large).equals(table)


def test_a_table_of_another_release_is_refused_by_name() -> None:
    old = pa.table({"sink": ["s0"], "partition": pa.array([0], pa.int32())})
    with pytest.raises(JobError, match="another twophase release"):
        ack_table.normalized(old)


def test_the_first_row_of_each_subtask_is_kept_in_arrival_order() -> None:
    rows = [("s0", 1, 0), ("s0", 0, 0), ("s0", 1, 1), ("s1", 1, 2), ("s1", 1, 0), ("s0", 0, 3)]
    table = acknowledgement_table(Acknowledgement(s, p, a) for s, p, a in rows)
    split = ack_table.split_first(table)
    assert [(a.sink, a.partition, a.attempt) for a in acknowledgements_in(split.first)] == [
        ("s0", 1, 0),
        ("s0", 0, 0),
        ("s1", 1, 2),
    ]
    assert [(a.sink, a.partition, a.attempt) for a in acknowledgements_in(split.later)] == [
        ("s0", 1, 1),
        ("s1", 1, 0),
        ("s0", 0, 3),
    ]


def test_records_per_sink_count_a_silent_row_as_zero() -> None:
    silent = Acknowledgement("s0", 1, 0)
    table = acknowledgement_table(
        [Acknowledgement("s0", 0, 0, records=5), silent, Acknowledgement("s1", 0, 0, records=2)]
    )
    assert ack_table.records_per_sink(table) == {"s0": 5, "s1": 2}


def test_an_unknown_sink_or_an_unexpected_subtask_records_nothing() -> None:
    coord, _ = coordinator()
    pc = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1], "s1": [0, 1]})
    good = [acknowledgement(coord, "s0", 0, 0), acknowledgement(coord, "s1", 0, 0)]
    with pytest.raises(ConfigError, match=r"unknown sinks \['nope'\]"):
        unknown = Acknowledgement("nope", 0, 0)
        coord.acknowledge_table(pc.checkpoint_id, acknowledgement_table([*good, unknown]))
    with pytest.raises(IllegalTransitionError, match=r"unexpected s1\[2\]"):
        coord.acknowledge_table(
            pc.checkpoint_id, acknowledgement_table([*good, acknowledgement(coord, "s1", 2, 0)])
        )
    assert pc.acks == {}
    assert all(not lc.pending for lc in coord.subtasks.values())


def test_a_late_table_for_an_aborted_checkpoint_aborts_every_row() -> None:
    coord, system = coordinator()
    pc = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0]})
    coord.abort_checkpoint(pc.checkpoint_id, "test")
    late = [acknowledgement(coord, "s0", 0, 0), acknowledgement(coord, "s0", 0, 1)]
    taken = coord.acknowledge_table(pc.checkpoint_id, acknowledgement_table(late))
    assert taken.recorded == 0
    assert len(system.aborted) == 2


subtasks = st.tuples(st.sampled_from(["s0", "s1"]), st.integers(0, 2), st.integers(0, 2))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(subtasks, max_size=12))
def test_a_table_records_what_one_by_one_records(rows: list[tuple[str, int, int]]) -> None:
    """The reference is the per-acknowledgement path: the first of each (sink, partition) is
    recorded, every later one refused as a duplicate, the same records counted."""
    by_table, _ = coordinator()
    one_by_one, _ = coordinator()
    participants = {"s0": [0, 1, 2], "s1": [0, 1, 2]}
    table_pc = by_table.trigger(CheckpointKind.CHECKPOINT, participants)
    ref_pc = one_by_one.trigger(CheckpointKind.CHECKPOINT, participants)
    acks = [acknowledgement(by_table, s, p, a) for s, p, a in rows]
    duplicates = []
    for ack in acks:
        try:
            one_by_one.acknowledge(ref_pc.checkpoint_id, ack)
        except DuplicateAcknowledgementError:
            duplicates.append(ack)
    taken = by_table.acknowledge_table(table_pc.checkpoint_id, acknowledgement_table(acks))
    assert table_pc.acks == ref_pc.acks
    assert list(taken.duplicates) == duplicates
    assert taken.recorded == len(ref_pc.acks)
    per_sink: dict[str, int] = {}
    for a in ref_pc.acks.values():
        per_sink[a.sink] = per_sink.get(a.sink, 0) + (a.records or 0)
    assert dict(taken.records) == per_sink
    assert {k: [t.committable for t in lc.pending] for k, lc in by_table.subtasks.items()} == {
        k: [t.committable for t in lc.pending] for k, lc in one_by_one.subtasks.items()
    }
