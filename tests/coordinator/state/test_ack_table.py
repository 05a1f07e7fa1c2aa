"""An epoch's acknowledgements as one Arrow table (issue #42): the checks in Arrow compute agree
with recording the acknowledgements one by one, and a table that fails a check records nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pac
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import ManualClock
from support.fakes import FakeExternalSystem, FakeSink
from support.harness import batch
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig, DuplicateAcknowledgementError
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state import ack_table
from twophase.coordinator.state.acknowledgement import (
    ACK_SCHEMA,
    RELEASE,
    Acknowledgement,
    acknowledgement_table,
    acknowledgements_in,
)
from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.state.payload import payload_bytes, payload_object
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import (
    CommitFailedError,
    CommittableDecodeError,
    ConfigError,
    IllegalTransitionError,
    JobError,
)

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
    payload = payload_bytes({"kind": "k", "version": 1, "body": {"x": "é"}})
    ack = Acknowledgement("s0", 3, 1, payload, {"o": 1}, 7, 2.5)
    table = acknowledgement_table([ack, Acknowledgement("s1", 0, 0)])
    assert table.schema.equals(ACK_SCHEMA)
    assert table["committable"][0].as_py() == b'{"body":{"x":"\\u00e9"},"kind":"k","version":1}'
    assert table["release"].to_pylist() == [RELEASE, RELEASE]
    assert acknowledgements_in(table) == [ack, Acknowledgement("s1", 0, 0)]


def test_an_acknowledgement_carries_the_header_of_what_its_sink_encoded() -> None:
    """#42: the executor stamps the codec's ``kind`` and ``version`` beside the payload, from the
    object it encoded, so that the driver checks them without parsing the payload."""
    coord, _ = coordinator()
    ack = acknowledgement(coord, "s0", 1, 0)
    assert ack.committable is not None
    assert (ack.kind, ack.version) == ("test.fake", 1)
    assert (payload_object(ack.committable)["kind"], payload_object(ack.committable)["version"]) == (
        ack.kind,
        ack.version,
    )
    table = acknowledgement_table([ack, Acknowledgement("s1", 0, 0)])
    assert table["kind"].to_pylist() == ["test.fake", None]
    assert table["version"].to_pylist() == [1, None]
    assert acknowledgements_in(table)[0] == ack


def test_large_var_types_from_spark_are_taken() -> None:
    table = acknowledgement_table(
        [Acknowledgement("s0", 0, 0, payload_bytes({"kind": "k", "version": 1, "body": {}}))]
    )
    large = table.cast(
        pa.schema([f.with_type(pa.large_binary() if f.type == pa.binary() else f.type) for f in ACK_SCHEMA])
    )
    assert normalized(large).equals(table.drop_columns([ack_table.PAYLOAD]))


def normalized(table: pa.Table) -> pa.Table:
    """:func:`ack_table.normalized` as the intake calls it: handed ``table`` without its payloads."""
    rest = [n for n in table.column_names if n != ack_table.PAYLOAD]
    return ack_table.normalized(table.select(rest), table.schema)


def test_the_payloads_go_to_the_ledger_as_received_and_a_wrong_type_is_refused_by_name() -> None:
    """#42: the intake's normalization is not handed the payloads; they reach the ledger block as
    Spark's buffers (rows in key order, in chunks), cast only from another binary type; a payload
    column of another type, or none, is refused before anything is recorded."""
    acks = [_ack(p, _fake(f"t{p}", p)) for p in range(3)]
    table = per_task(acknowledgement_table(acks))
    coord, _ = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2]})
    assert coord.acknowledge_table(1, table).recorded == 3
    (block,) = coord._ledgers["s0"].blocks
    received = [c.buffers()[2].address for c in table[ack_table.PAYLOAD].chunks]
    assert [c.buffers()[2].address for c in block.payload.chunks] == received  # not copied
    assert block.payload.to_pylist() == [a.committable for a in acks]
    at = ACK_SCHEMA.get_field_index(ack_table.PAYLOAD)
    large = table.set_column(at, ack_table.PAYLOAD, table[ack_table.PAYLOAD].cast(pa.large_binary()))
    coord, _ = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2]})
    assert coord.acknowledge_table(1, large).recorded == 3
    assert coord._ledgers["s0"].blocks[0].payload.type == pa.binary()
    for wrong, match in [
        (table.set_column(at, ack_table.PAYLOAD, pa.array([1, 2, 3], pa.int64())), "have the schema"),
        (table.drop_columns([ack_table.PAYLOAD]), r"lack the columns \['committable'\]"),
    ]:
        coord, _ = coordinator()
        coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2]})
        _refused(coord, wrong, JobError, match)


def per_task(table: pa.Table) -> pa.Table:
    """``table`` as Spark's collection hands it: one chunk per task (here one row each)."""
    return pa.Table.from_batches(
        [b for i in range(table.num_rows) for b in table.slice(i, 1).to_batches()], schema=table.schema
    )


@pytest.mark.parametrize("state", [None, {"o": 1}])
def test_a_table_in_chunks_keeps_its_rows_and_joins_the_columns_read_per_row(
    state: dict[str, int] | None,
) -> None:
    """Joining every chunk of every column costs per chunk (issue #42): the columns the intake
    sorts, groups or reads per row come in one chunk; a column null on every row becomes one null
    array; the rest may stay as received. Whatever the chunks, the rows and their order are kept."""
    acks = [
        Acknowledgement(f"s{i % 2}", i, 0, _fake(f"t{i}", i), state if i == 3 else None, 1) for i in range(7)
    ]
    table = acknowledgement_table(acks)
    chunked = per_task(table)
    assert chunked["sink"].num_chunks == 7
    got = normalized(chunked)
    assert got.schema.equals(ack_table.ROW_SCHEMA)
    assert got.to_pylist() == table.drop_columns([ack_table.PAYLOAD]).to_pylist()
    at = ACK_SCHEMA.get_field_index(ack_table.PAYLOAD)
    assert acknowledgements_in(got.add_column(at, ACK_SCHEMA.field(at), chunked[ack_table.PAYLOAD])) == acks
    for name in ack_table._ONE_CHUNK:
        assert got[name].num_chunks == 1, name
    rest = table.drop_columns([ack_table.PAYLOAD])
    assert normalized(table).equals(rest)  # one chunk already: as it is


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.frozensets(st.integers(0, 2**31 - 1), max_size=8))
)
def test_the_key_table_of_partitions_per_sink_holds_their_pairs(parts_of: dict[str, frozenset[int]]) -> None:
    """#42: built per sink, the expected table holds exactly the (sink, partition) pairs, typed as
    the table of pairs is."""
    t = ack_table.key_table_of(parts_of)
    want = {(s, p) for s, parts in parts_of.items() for p in parts}
    assert t.schema.equals(ack_table.key_table(want).schema)
    assert sorted(zip(t["sink"].to_pylist(), t["partition"].to_pylist(), strict=True)) == sorted(want)


def test_a_table_of_another_release_is_refused_by_name() -> None:
    old = pa.table({"sink": ["s0"], "partition": pa.array([0], pa.int32())})
    with pytest.raises(JobError, match="another twophase release"):
        normalized(old)


def test_a_table_without_the_header_columns_names_the_release_that_sent_it() -> None:
    """An executor of the release before the header columns (#42) hands rows without ``kind``
    and ``version``: the refusal names its release and what to install, as ``check_release``'s."""
    table = acknowledgement_table([_ack(0, _fake("a"))])
    earlier = table.drop_columns(["kind", "version"]).set_column(
        ACK_SCHEMA.get_field_index("release"), "release", pa.array(["0.9.0"], pa.string())
    )
    with pytest.raises(JobError, match=rf"executors run twophase 0\.9\.0 .* install twophase {RELEASE}"):
        normalized(earlier)
    with pytest.raises(JobError, match=r"lack the columns \['kind', 'version'\]"):
        normalized(table.drop_columns(["kind", "version"]))  # this release: by the columns


def test_the_first_row_of_each_subtask_is_kept_in_arrival_order() -> None:
    rows = [("s0", 1, 0), ("s0", 0, 0), ("s0", 1, 1), ("s1", 1, 2), ("s1", 1, 0), ("s0", 0, 3)]
    table = acknowledgement_table(Acknowledgement(s, p, a) for s, p, a in rows)
    first = ack_table.first_rows(table.select(ack_table.KEY))
    assert first is not None
    assert [(a.sink, a.partition, a.attempt) for a in acknowledgements_in(table.filter(first))] == [
        ("s0", 1, 0),
        ("s0", 0, 0),
        ("s1", 1, 2),
    ]
    later = table.filter(pac.invert(first))
    assert [(a.sink, a.partition, a.attempt) for a in acknowledgements_in(later)] == [
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
@given(rows=st.lists(subtasks, max_size=12), in_chunks=st.booleans())
def test_a_table_records_what_one_by_one_records(rows: list[tuple[str, int, int]], in_chunks: bool) -> None:
    """The reference is the per-acknowledgement path: the first of each (sink, partition) is
    recorded, every later one refused as a duplicate, the same records counted; in one chunk or
    one per task (:func:`per_task`)."""
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
    table = acknowledgement_table(acks)
    taken = by_table.acknowledge_table(table_pc.checkpoint_id, per_task(table) if in_chunks else table)
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


# -- what decoding at intake used to catch, caught in Arrow before anything is recorded (issue #42)


def _fake(txn: str, partition: int = 0, version: int = 1, kind: str = "test.fake") -> bytes:
    body = {"txn_id": txn, "checkpoint_id": 1, "partition": partition, "records": 1}
    return payload_bytes({"kind": kind, "version": version, "body": body})


def _ack(
    partition: int, payload: bytes | None, kind: str | None = "test.fake", version: int | None = 1
) -> Acknowledgement:
    """Sink s0's acknowledgement of ``partition`` with ``payload`` under the header ``kind`` and
    ``version`` (what ``Acknowledgement.of`` stamps; a hand-made row may say otherwise)."""
    if payload is None:
        return Acknowledgement("s0", partition, 0)
    return Acknowledgement("s0", partition, 0, payload, kind=kind, version=version)


def _refused(coord: CheckpointCoordinator, table: pa.Table, error: type[Exception], match: str) -> None:
    pc = coord.pending(1)
    with pytest.raises(error, match=match):
        coord.acknowledge_table(1, table)
    assert pc.acks == {}
    assert all(not lc.pending for lc in coord.subtasks.values())


def test_rows_of_another_release_are_refused_naming_what_to_install() -> None:
    coord, _ = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    table = acknowledgement_table([_ack(0, _fake("a")), _ack(1, _fake("b"))])
    table = table.set_column(
        ACK_SCHEMA.get_field_index("release"), "release", pa.array([RELEASE, "9.9.9"], pa.string())
    )
    _refused(coord, table, JobError, rf"executors run twophase 9\.9\.9 .* install twophase {RELEASE}")


@pytest.mark.parametrize(
    ("kind", "version", "match"),
    [
        ("test.other", 1, r"sink 's0' partition 1: a committable of kind 'test.other'"),
        ("test.fake", 2, "version 2, where this driver's codec reads kind 'test.fake' versions \\[1\\]"),
        ("test.fake", None, r"partition 1: a committable w\w+ its codec header \(kind 'test.fake' version"),
        (None, 1, r"without its codec header \(kind None version 1\).*Acknowledgement.of"),
    ],
)
@pytest.mark.parametrize("in_chunks", [False, True])
def test_a_payload_whose_header_the_driver_cannot_read_records_nothing(
    kind: str | None, version: int | None, match: str, in_chunks: bool
) -> None:
    """The header the executor stamped is checked, not the payload (#42): a row of another kind,
    a version the codec does not read, or no header at all (not made by ``Acknowledgement.of``,
    or another build) is refused naming the sink and partition, before anything is recorded."""
    coord, _ = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2]})
    table = acknowledgement_table([_ack(0, _fake("a")), _ack(2, None), _ack(1, _fake("b"), kind, version)])
    _refused(coord, per_task(table) if in_chunks else table, CommittableDecodeError, match)


def test_a_sink_that_overrides_decode_has_its_headers_unchecked() -> None:
    """A sink without a codec header (:func:`codec_header` ``None``) says alone what it reads:
    intake takes its rows whatever they stamp, its commit decodes them."""
    headers = acknowledgement_table([_ack(0, _fake("a"), "any", None)]).select(ack_table.HEADERS)
    fake = ack_table.CodecHeader("test.fake", frozenset({1}))
    ack_table.check_payloads(headers, pa.array([True]), {"s1": fake})
    with pytest.raises(CommittableDecodeError, match="sink 's0' partition 0"):
        ack_table.check_payloads(headers, pa.array([True]), {"s0": fake})


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b'{"kind":"test.fake","version":1,"body":{', "not JSON"),
        (b"not json at all", "not JSON"),
        (b'["test.fake", 1]', "not a JSON object"),
    ],
)
def test_a_payload_not_json_under_a_good_header_fails_its_commit_by_name(payload: bytes, match: str) -> None:
    """Intake no longer parses a payload (#42): the executor writes it as ``json.dumps`` of the
    object whose header it stamps, so no executor of this release sends one that is not JSON. A
    hand-made row may: it is recorded and published as it came, and the commit, where the sink's
    object is first made, fails loudly (``CommitFailedError`` naming the sink, the partition and
    the decode error) and counts nothing as committed; a restore decodes it again, as loudly."""
    coord, system = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    good = acknowledgement(coord, "s0", 0, 0)
    assert coord.acknowledge_table(1, acknowledgement_table([good, _ack(1, payload)])).recorded == 2
    done = coord.complete(1)
    assert [r.payload for r in done.metadata.sinks["s0"].committables] == [good.committable, payload]
    with pytest.raises(CommitFailedError, match=rf"(?s)s0.*1.*{match}"):
        coord.notify_checkpoint_complete(1)
    assert coord.confirm_commits() == 0
    assert system.committed == {}
    assert sorted(t.partition for t in coord.uncommitted_transactions()) == [0, 1]


def test_intake_parses_no_payload() -> None:
    """JSON only Python reads (``NaN``), a newline inside, or bytes that are no JSON at all: the
    intake takes each row by its header, as it reads no payload (#42)."""
    coord, _ = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2]})
    body = b'"body":{"txn_id":"a","checkpoint_id":1,"partition":0,"records":1'
    nan = b"{" + body + b',"x":NaN},"kind":"test.fake","version":1}'
    spaced = b'{"kind":"test.fake",\n"version":1,' + body + b"}}"
    table = acknowledgement_table([_ack(0, nan), _ack(1, spaced), _ack(2, b"\xff not json")])
    assert coord.acknowledge_table(1, table).recorded == 3


def test_intake_decodes_nothing_and_the_committer_decodes_each_once() -> None:
    coord, system = coordinator()
    decoded: list[bytes] = []
    sink = coord.sinks["s0"]
    decode = sink.decode

    def counting(obj: Mapping[str, Any]) -> Any:  # the sink's codec: the committer decodes in bulk
        decoded.append(payload_bytes(obj))
        return decode(obj)

    sink.decode = counting  # type: ignore[method-assign,assignment]
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    acks = [acknowledgement(coord, "s0", 0, 0), acknowledgement(coord, "s0", 1, 0)]
    coord.acknowledge_table(1, acknowledgement_table(acks))
    assert decoded == []
    done = coord.complete(1)
    assert decoded == []
    published = [r.payload for r in done.metadata.sinks["s0"].committables]
    assert published == [a.committable for a in acks]  # the executor's bytes, as they came
    coord.notify_checkpoint_complete(1)
    assert sorted(decoded) == sorted(published)
    assert sorted(system.committed) == sorted(payload_object(p)["body"]["txn_id"] for p in published)


def test_a_payload_that_decodes_only_at_commit_fails_the_commit_and_counts_nothing() -> None:
    """Right release, kind and version, a body the codec refuses: intake takes it (it decodes
    nothing), the commit call fails loudly, and nothing of it is confirmed or forgotten."""
    coord, system = coordinator()
    coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1]})
    good = acknowledgement(coord, "s0", 0, 0)
    broken = payload_bytes({"kind": "test.fake", "version": 1, "body": {"txn_id": "x"}})  # fields missing
    coord.acknowledge_table(1, acknowledgement_table([good, _ack(1, broken)]))
    done = coord.complete(1)
    assert [r.payload for r in done.metadata.sinks["s0"].committables] == [good.committable, broken]
    with pytest.raises(CommitFailedError, match="invalid body"):
        coord.notify_checkpoint_complete(1)
    assert system.committed == {}
    assert coord.confirm_commits() == 0
    assert sorted(t.partition for t in coord.uncommitted_transactions()) == [0, 1]


# -- the pending checkpoint's acknowledgements as columns (issue #42: no object per row)


def test_the_ledger_keeps_rows_as_columns_and_answers_from_them() -> None:
    """A driver-side acknowledgement first, then a table with one in-progress state and that same
    subtask again: the table's repeat is a duplicate, the checkpoint is fully acknowledged by its
    row count, and the in-progress states come back per sink in partition order."""
    coord, _ = coordinator()
    pc = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2], "s1": [0]})
    coord.acknowledge(pc.checkpoint_id, Acknowledgement("s0", 2, 0, None, {"at": 2}, 4))
    assert not pc.is_fully_acknowledged and pc.missing == {("s0", 0), ("s0", 1), ("s1", 0)}
    rows = [
        Acknowledgement("s0", 1, 0, None, {"at": 1}, 3),
        Acknowledgement("s0", 2, 1, None, None, 9),  # acknowledged before the table
        Acknowledgement("s1", 0, 0, None, None, 7),
        Acknowledgement("s0", 0, 0, None, None, 5),
    ]
    taken = coord.acknowledge_table(pc.checkpoint_id, acknowledgement_table(rows))
    assert [(a.sink, a.partition, a.attempt) for a in taken.duplicates] == [("s0", 2, 1)]
    assert taken.recorded == 3 and pc.acknowledgements == 4
    assert pc.is_fully_acknowledged and pc.missing == frozenset()
    assert pc.records == 12  # s0: 4 + 3 + 5; s1: 7
    acknowledged = pc.acknowledged("s0")
    assert acknowledged is not None and acknowledged[1] == [{"at": 1}, {"at": 2}]
    assert pc.acks[("s0", 2)] == Acknowledgement("s0", 2, 0, None, {"at": 2}, 4)
    assert coord.subtask("s0", 1).latest_in_progress == {"at": 1}
    assert coord.subtask("s0", 0).latest_in_progress is None


def payload_buffer(column: pa.Array | pa.ChunkedArray) -> tuple[int, ...]:
    """The addresses of a binary column's data buffers (what a copy would change)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return tuple(c.buffers()[2].address for c in chunks)


@pytest.mark.parametrize("chunks", [1, 2])
def test_a_table_already_in_key_order_is_recorded_without_copying_its_payloads(chunks: int) -> None:
    """Rows gathered and sorted by (sink, partition) on the executors (``acknowledgements_of``)
    are recorded as they arrive: each sink's ledger block holds a slice of the table's payload
    buffers, not a copy (issue #42: every copy of the payloads was ~200 MB of a 10⁵ × 3 driver's
    peak, kept by the allocator after the intake); rows out of order are sorted as before."""
    coord, system = coordinator()
    pc = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1, 2], "s1": [0, 1]})
    acks = [
        acknowledgement(coord, s, p, 0) for s, p in [("s0", 0), ("s0", 1), ("s0", 2), ("s1", 0), ("s1", 1)]
    ]
    table = acknowledgement_table(acks)
    if chunks > 1:  # as Spark's collection hands a gathered partition: a few batches, keys in order
        table = pa.Table.from_batches(table.to_batches(max_chunksize=3), schema=ACK_SCHEMA)
    taken = coord.acknowledge_table(pc.checkpoint_id, table)
    assert taken.recorded == 5 and pc.is_fully_acknowledged
    given = set(payload_buffer(table["committable"]))
    for sink, parts in (("s0", [0, 1, 2]), ("s1", [0, 1])):
        (block,) = coord._ledgers[sink].blocks
        assert block.partition.to_pylist() == parts
        assert set(payload_buffer(block.payload)) <= given, f"{sink}'s payloads were copied"
    coord.complete(pc.checkpoint_id)
    coord.notify_checkpoint_complete(pc.checkpoint_id)
    assert sorted(system.committed_records()) == ["s0-0-0", "s0-1-0", "s0-2-0", "s1-0-0", "s1-1-0"]


def test_a_table_out_of_key_order_is_recorded_in_partition_order() -> None:
    coord, _ = coordinator()
    pc = coord.trigger(CheckpointKind.CHECKPOINT, {"s0": [0, 1], "s1": [0]})
    acks = [acknowledgement(coord, s, p, 0) for s, p in [("s0", 1), ("s1", 0), ("s0", 0)]]
    coord.acknowledge_table(pc.checkpoint_id, acknowledgement_table(acks))
    (block,) = coord._ledgers["s0"].blocks
    assert block.partition.to_pylist() == [0, 1]
    assert block.payload.to_pylist() == [acks[2].committable, acks[0].committable]
