"""A ledger block's commit call committed as columns (issue #42, "cols42"): the committables
decoded in bulk from the payload column (kept by the block only when some of its rows were decoded
before), handed to the sink's ``commit_batch``, the outcomes taken back as a list; a transaction
object is made only when a row is not confirmed at once, with the committables decoded already,
and only a well-formed answer's confirmed rows are confirmed."""

from __future__ import annotations

import functools
import json
import threading
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from support.clock import ManualClock
from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness, batch

from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.payload import decode_payload, decode_payloads, payload_bytes
from twophase.coordinator.state.subtask_lifecycle import BlockRows, LedgerBlock
from twophase.sinks.context import JsonObject, WriterContext
from twophase.sinks.errors import CommitFailedError, CommittableDecodeError
from twophase.sinks.outcome import CommitOutcome

JOB = "job"


class CountingSink(FakeSink):
    """A fake sink counting its decodes and keeping each ``commit_batch``'s committables."""

    def __init__(self, name: str, system: FakeExternalSystem) -> None:
        super().__init__(name, system)
        self.decodes: Counter[str] = Counter()
        self.batches: list[list[str]] = []

    def decode(self, payload: JsonObject) -> FakeCommittable:
        committable = super().decode(payload)
        self.decodes[committable.txn_id] += 1
        return committable

    def commit_batch(self, committables: Sequence[FakeCommittable]) -> list[CommitOutcome]:
        self.batches.append([c.txn_id for c in committables])
        return super().commit_batch(committables)


def setup(
    n: int, chunk: int | None = None
) -> tuple[CountingSink, FakeExternalSystem, LedgerBlock, list[str]]:
    """A sink with ``n`` pre-committed transactions of checkpoint 1, as one ledger block's rows
    (PERSISTED→COMMITTING is the ledger's; the committer reads the columns only); the payload
    column in chunks of ``chunk`` rows when given, as a gathered intake records it (slices of the
    batches Spark handed the driver)."""
    system = FakeExternalSystem()
    sink = CountingSink("s0", system)
    payloads: list[bytes] = []
    ids: list[str] = []
    for p in range(n):
        txn = sink.begin_transaction(WriterContext(JOB, "s0", 1, p, 0, n))
        sink.write(txn, batch([f"r{p}"]))
        c = sink.pre_commit(txn)
        assert c is not None
        payloads.append(payload_bytes(sink.encode(c)))
        ids.append(c.txn_id)
    block = LedgerBlock(
        "s0",
        1,
        pa.array(range(n), pa.int32()),
        pa.array([0] * n, pa.int32()),
        pa.array(payloads, pa.binary())
        if chunk is None
        else pa.chunked_array([pa.array(payloads[i : i + chunk], pa.binary()) for i in range(0, n, chunk)]),
        0,
        functools.partial(decode_payload, sink),
    )
    return sink, system, block, ids


def test_a_call_of_some_rows_of_a_block_in_chunks_commits_those_rows() -> None:
    """A gathered intake's block holds its payloads in Spark's batches (issue #42); a call of some
    of its rows (a retry, rows left after an eviction) takes those rows' payloads across chunks."""
    sink, system, block, ids = setup(5, chunk=2)
    call = BlockRows(block, [1, 2, 4])
    assert call.payload.to_pylist() == [block.payload[r].as_py() for r in (1, 2, 4)]
    assert committer(sink).commit(call) is CommitOutcome.COMMITTED
    assert sink.batches == [[ids[1], ids[2], ids[4]]] and sorted(system.committed) == sorted(
        ids[i] for i in (1, 2, 4)
    )


def committer(sink: CountingSink) -> CommitterOperator:
    clock = ManualClock()
    return CommitterOperator(JOB, {"s0": sink}, clock=clock, sleep=clock.sleep)


def test_a_call_confirmed_whole_makes_no_transaction_and_lets_its_decoded_committables_go() -> None:
    sink, system, block, ids = setup(3)
    call = BlockRows(block, range(3))
    confirmed: list[Any] = []
    assert committer(sink).commit(call, on_confirmed=confirmed.append) is CommitOutcome.COMMITTED
    assert confirmed == [call]  # whole, as it came: the driver lets its rows leave by range
    # committed: the decoded committables are let go (issue #42: ~330 MB of a 10⁵ × 3 driver)
    assert block.made == {} and block.decoded == {}
    assert sink.batches == [ids] and sorted(system.committed) == sorted(ids)
    assert sink.decodes == Counter(ids)
    assert [
        t.committable.txn_id for t in block.transactions(range(3))
    ] == ids  # made later (a cleanup reading what is held): decoded again, once
    assert sink.decodes == Counter({t: 2 for t in ids})


def test_a_call_none_of_whose_rows_was_decoded_keeps_no_committable_on_the_block() -> None:
    """The common path decodes the payload column as a whole and hands it to the sink: no
    row → committable entry is stored on the block meanwhile, and none is left to let go."""
    sink, system, block, ids = setup(3)
    kept_during: list[dict[int, Any]] = []
    commit_batch = sink.commit_batch

    def spying(committables: Sequence[FakeCommittable]) -> list[CommitOutcome]:
        kept_during.append(dict(block.decoded))
        return commit_batch(committables)

    sink.commit_batch = spying  # type: ignore[method-assign]
    assert committer(sink).commit(BlockRows(block, range(3))) is CommitOutcome.COMMITTED
    assert kept_during == [{}] and block.decoded == {} and block.made == {}
    assert sorted(system.committed) == sorted(ids) and sink.decodes == Counter(ids)


def test_transactions_refuse_committables_not_one_per_row() -> None:
    _sink, _system, block, _ids = setup(3)
    committables = [block.committable(r) for r in range(2)]
    with pytest.raises(ValueError, match="2 committables for 3 rows"):
        block.transactions(range(3), committables)
    assert block.made == {}


def test_the_rows_answering_retry_are_retried_as_a_smaller_call_and_the_call_confirmed() -> None:
    sink, system, block, ids = setup(3)
    system.script(ids[1], CommitOutcome.RETRY)
    call = BlockRows(block, range(3))
    confirmed: list[Any] = []
    assert committer(sink).commit(call, on_confirmed=confirmed.append) is CommitOutcome.COMMITTED
    assert sink.batches == [ids, [ids[1]]]
    assert confirmed == [call] and sorted(system.committed) == sorted(ids)
    assert sorted(block.made) == [0, 1, 2]  # the exception's path made them, with the decoded committables
    assert sink.decodes == Counter(ids)


def test_rows_a_verification_decoded_are_not_decoded_again() -> None:
    sink, _system, block, ids = setup(4)
    assert [block.committable(r).txn_id for r in (0, 2)] == [ids[0], ids[2]]
    assert block.made == {}  # read without a transaction
    call = BlockRows(block, [1, 2, 3])
    assert committer(sink).commit(call) is CommitOutcome.COMMITTED
    assert sink.batches == [ids[1:]] and block.made == {}
    assert sink.decodes == Counter(ids)


@pytest.mark.parametrize("answer", [[CommitOutcome.COMMITTED], [CommitOutcome.COMMITTED] * 4, "COMMITTED"])
def test_an_answer_of_the_wrong_shape_confirms_nothing(answer: Any) -> None:
    sink, _system, block, _ids = setup(3)
    sink.commit_batch = lambda committables: answer  # type: ignore[method-assign]
    confirmed: list[Any] = []
    with pytest.raises(CommitFailedError, match="commit_batch"):
        committer(sink).commit(BlockRows(block, range(3)), on_confirmed=confirmed.append)
    assert confirmed == []


def test_a_commit_batch_that_raises_confirms_nothing_of_the_call() -> None:
    sink, system, block, ids = setup(3)

    def midway(committables: Sequence[FakeCommittable]) -> list[CommitOutcome]:
        FakeSink.commit_batch(sink, committables[:1])
        raise RuntimeError("broken midway")

    sink.commit_batch = midway  # type: ignore[method-assign]
    confirmed: list[Any] = []
    with pytest.raises(CommitFailedError, match="broken midway"):
        committer(sink).commit(BlockRows(block, range(3)), on_confirmed=confirmed.append)
    assert confirmed == [] and list(system.committed) == [ids[0]]


def test_the_bulk_decode_names_the_payload_that_does_not_decode() -> None:
    sink, _system, block, ids = setup(2)
    good = block.payload[0].as_py()
    assert [c.txn_id for c in decode_payloads(sink, pa.array([good, good], pa.binary()))] == [ids[0]] * 2
    with pytest.raises(CommittableDecodeError, match="not JSON"):
        decode_payloads(sink, [good, b"{nope"])


def test_an_asynchronous_commit_stays_columnar_when_the_driver_checks_for_its_marker_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With asynchronous commit the driver asks, after each notification, whether the latest
    checkpoint's committed marker can be written yet (``CommitSteps.mark_committed_if_done``),
    while the committer thread still holds the call. That ask must make no transaction of the
    block's rows: one made row sent the whole call down the object path (a
    ``PendingTransaction`` for every row: 10⁵ of them, ~60 MB, in the 10⁵ × 3 benchmark's
    tracemalloc, 2026-12-04)."""
    system = FakeExternalSystem()
    sink = CountingSink("s0", system)
    made: list[int] = []
    transactions = LedgerBlock.transactions

    def counted(self: LedgerBlock, rows: range | Sequence[int]) -> tuple[Any, ...]:
        made.append(len(rows))
        return transactions(self, rows)

    gate = threading.Event()
    commit = CommitterOperator.commit

    def commit_when_let(self: CommitterOperator, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():  # the committer thread
            assert gate.wait(30), "the test never let the commit run"
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(LedgerBlock, "transactions", counted)
    monkeypatch.setattr(CommitterOperator, "commit", commit_when_let)
    h = TwoPhaseHarness([sink], config=RuntimeConfig(commit=CommitPolicy(async_commit=True)))
    h.restore()
    h.write_epoch([[batch([f"r{p}"])] for p in range(4)])  # notified: the call waits on the thread
    gate.set()
    h.runtime.await_commits()
    assert sorted(system.committed) == sorted(sink.batches[0]) and len(sink.batches) == 1
    assert made == [], f"transactions made of the block's rows: {made}"
    h.runtime.finish()


def test_the_bulk_decode_holds_a_slice_of_the_payloads_as_python_bytes_at_a_time() -> None:
    """``decode_payloads`` over a binary column turns it into Python bytes a slice at a time: the
    whole column at once held every payload twice beside its decoded committables (issue #42: ~200
    MB more at the commit of 10⁵ × 3), what the driver's high-water mark was made of."""
    sink, _system, block, ids = setup(1)
    good = json.loads(block.payload[0].as_py())
    good["pad"] = "x" * 8_000  # the codec reads its fields, and ignores this one
    column = pa.array([json.dumps(good).encode()] * 10_000, pa.binary())  # 80 MB of payloads
    tracemalloc.start()
    try:
        decoded = decode_payloads(sink, column)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decoded) == 10_000 and decoded[-1].txn_id == ids[0]
    assert peak < 40_000_000, f"{peak / 1e6:.0f} MB traced while decoding 80 MB of payloads"
