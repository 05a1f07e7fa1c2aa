"""coordinator.recovery: what a restore re-commits, and what lingering cleanup may never abort."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.fakes import CODEC, FakeCommittable, FakeExternalSystem, FakeSink

from twophase.coordinator.run.lingering import (
    ALL_CHECKPOINTS,
    Part,
    held_by,
    held_of,
    lingering_scope,
    transactions_part,
)
from twophase.coordinator.run.recovery import recovery_transactions
from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import DecodedOnAccess, payload_bytes, payload_object
from twophase.coordinator.state.subtask_lifecycle import PendingTransaction
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import CommittableDecodeError


def comm(txn: str, checkpoint: int, partition: int = 0) -> bytes:
    return payload_bytes(CODEC.to_json(FakeCommittable(txn, checkpoint, partition, 1)))


def meta(
    c: int,
    sinks: dict[str, SinkSnapshot],
    *,
    kind: CheckpointKind = CheckpointKind.CHECKPOINT,
    fully_finished: tuple[str, ...] = (),
) -> CheckpointMetadata:
    return CheckpointMetadata("job", c, kind, 0, sinks, fully_finished=fully_finished)


Record = tuple[int, int, bytes]


def snap(
    *records: Record, in_progress: dict[int, JsonObject] | None = None, partitions: int = 2
) -> SinkSnapshot:
    return SinkSnapshot(
        partitions,
        tuple(CommittableRecord(p, 0, payload, c) for p, c, payload in records),
        in_progress or {},
    )


def test_held_is_every_committable_and_in_progress_state_of_the_given_checkpoints() -> None:
    a1, a2, b1 = comm("a1", 1), comm("a2", 2, 1), comm("b1", 1)
    ip: JsonObject = {"file": "x"}
    checkpoints = [
        meta(1, {"a": snap((0, 1, a1)), "b": snap((0, 1, b1))}),
        meta(2, {"a": snap((0, 1, a1), (1, 2, a2), in_progress={1: ip}, partitions=5)}),
    ]
    held = held_by("a", checkpoints)
    assert list(held.committables.values()) == [a1, a2]  # a1 once, though two checkpoints hold it
    assert list(held.in_progress.values()) == [ip]
    assert held.max_partitions == 5
    assert list(held_by("b", checkpoints).committables.values()) == [b1]
    assert held_by("c", checkpoints).committables == {}


def test_what_the_running_job_holds_is_held_too() -> None:
    pending, live = comm("p3", 3), {"file": "live"}
    held = held_by("a", [], pending=[pending], live_in_progress=[live], live_parallelism=4)
    assert list(held.committables.values()) == [pending]
    assert list(held.in_progress.values()) == [live]
    assert held.max_partitions == 4


def test_equal_payloads_are_one_whatever_their_key_order() -> None:
    """Payloads are canonical bytes (keys sorted): equal objects, equal bytes."""
    p = payload_object(comm("a1", 1))
    reordered = dict(reversed(list(p.items())))
    assert len(held_by("a", [], pending=[payload_bytes(p), payload_bytes(reordered)]).committables) == 1


def test_the_scope_decodes_held_committables_and_bounds_checkpoints() -> None:
    sink = FakeSink("a", FakeExternalSystem())
    held = held_by("a", [meta(1, {"a": snap((0, 1, comm("a1", 1)))})])
    scope = lingering_scope("job", sink, held, ALL_CHECKPOINTS)
    assert tuple(scope.held) == (FakeCommittable("a1", 1, 0, 1),)
    assert (scope.job_id, scope.sink_name, scope.up_to_checkpoint) == ("job", "a", ALL_CHECKPOINTS)


def test_recovery_commits_in_checkpoint_order_and_skips_fully_finished_sinks() -> None:
    sinks = {n: FakeSink(n, FakeExternalSystem()) for n in ("a", "done")}
    m = meta(
        3,
        {
            "a": snap((1, 3, comm("a3", 3, 1)), (0, 2, comm("a2", 2)), (0, 3, comm("a3b", 3))),
            "done": snap((0, 3, comm("d3", 3))),
        },
        fully_finished=("done",),
    )
    txns = recovery_transactions(m, sinks, now_ms=5)
    assert [(t.sink_name, t.checkpoint_id, t.committable.txn_id) for t in txns] == [
        ("a", 2, "a2"),
        ("a", 3, "a3"),
        ("a", 3, "a3b"),
    ]
    assert all(t.payload is not None and t.pre_committed_ms == 5 for t in txns)


class CountingSink(FakeSink):
    def __init__(self, name: str) -> None:
        super().__init__(name, FakeExternalSystem())
        self.decodes = 0

    def decode(self, payload: JsonObject) -> FakeCommittable:
        self.decodes += 1
        return super().decode(payload)


def transaction(payload: bytes, sink: FakeSink) -> PendingTransaction[FakeCommittable]:
    c = sink.decode(payload_object(payload))
    return PendingTransaction("a", c.partition, 0, c.checkpoint_id, payload=payload, decode=lambda _: c)


def test_held_of_is_held_by_over_what_the_runtime_holds_and_decodes_nothing_unread() -> None:
    """#42: the routine cleanup's held set is told apart by payload bytes; a committable is made
    only when the sink reads it, from where it is already made, each at most once."""
    sink = CountingSink("a")
    a1, a2, p3 = (
        FakeCommittable("a1", 1, 0, 1),
        FakeCommittable("a2", 2, 1, 1),
        FakeCommittable("p3", 3, 0, 1),
    )
    ip: dict[str, object] = {"file": "x"}
    live: dict[str, object] = {"file": "live"}
    checkpoints = [
        meta(1, {"a": snap((0, 1, comm("a1", 1)))}),
        meta(
            2, {"a": snap((0, 1, comm("a1", 1)), (1, 2, comm("a2", 2, 1)), in_progress={1: ip}, partitions=5)}
        ),
    ]
    first = DecodedOnAccess(sink, [comm("a1", 1)])
    second = DecodedOnAccess(sink, [comm("a1", 1), comm("a2", 2, 1)])
    pending = [transaction(comm("p3", 3), sink), transaction(comm("a2", 2, 1), sink)]
    sink.decodes = 0
    held = held_of(
        sink,
        [(checkpoints[0], first), (checkpoints[1], second)],
        holding=[comm("r4", 4), comm("a1", 1)],
        pending=transactions_part(pending),
        live_in_progress=[live],
        live_parallelism=4,
    )
    assert list(held.in_progress.values()) == [ip, live]
    assert held.max_partitions == 5
    scope = held.scope("job", "a", 7)
    assert (scope.held_in_progress, scope.up_to_checkpoint) == ((ip, live), 7)
    assert sink.decodes == 0 and repr(scope.held) == "HeldCommittables(unread)"
    # equal payloads once, in order of first appearance: checkpoints, what a restore holds, pending
    r4 = FakeCommittable("r4", 4, 0, 1)
    assert tuple(scope.held) == (a1, a2, r4, p3)
    assert sink.decodes == 3  # a1 and a2 once each (from the first checkpoint holding them), r4
    assert held.committables.payloads == (comm("a1", 1), comm("a2", 2, 1), comm("r4", 4), comm("p3", 3))
    assert pending[0].committable is scope.held[3]  # the pending transaction's own object
    assert len(scope.held) == 4 and scope.held[-1] == p3 and tuple(scope.held[1:3]) == (a2, r4)
    # the same rule as held_by over payloads
    by_payload = held_by(
        "a",
        checkpoints,
        pending=[comm("r4", 4), comm("a1", 1), comm("p3", 3), comm("a2", 2, 1)],
        live_in_progress=[live],
    )
    assert tuple(lingering_scope("job", sink, by_payload, 7).held) == tuple(scope.held)


def test_a_held_transaction_without_payload_bytes_is_told_apart_by_its_encoding() -> None:
    """Tests build transactions from objects (no payload bytes): encoded to tell them apart."""
    sink = FakeSink("a", FakeExternalSystem())
    c = FakeCommittable("a1", 1, 0, 1)
    c2 = replace(c, checkpoint_id=2)
    txns = [PendingTransaction("a", 0, 0, 1, c), PendingTransaction("a", 0, 0, 2, c2)]
    held = held_of(
        sink,
        [(meta(1, {"a": snap((0, 1, comm("a1", 1)))}), [c])],
        pending=transactions_part(txns),
    )
    assert tuple(held.committables) == (c, c2)


def test_a_held_payload_that_does_not_decode_fails_only_the_cleanup_that_reads_it() -> None:
    sink = FakeSink("a", FakeExternalSystem())
    held = held_by("a", [], pending=[b'{"body":{},"kind":"nope","version":1}'])
    scope = lingering_scope("job", sink, held, ALL_CHECKPOINTS)
    assert len(scope.held) == 1  # told apart by bytes, not decoded
    with pytest.raises(CommittableDecodeError):
        tuple(scope.held)


def test_recovery_uses_committables_already_decoded() -> None:
    class NoDecode(FakeSink):
        def decode(self, payload: JsonObject) -> FakeCommittable:
            raise AssertionError("decoded again")

    sinks = {"a": NoDecode("a", FakeExternalSystem())}
    m = meta(3, {"a": snap((1, 3, comm("a3", 3, 1)), (0, 2, comm("a2", 2)))})
    given = (FakeCommittable("a3", 3, 1, 1), FakeCommittable("a2", 2, 0, 1))
    txns = recovery_transactions(m, sinks, 5, {"a": given})
    assert [t.committable for t in txns] == [given[1], given[0]]  # checkpoint order
    assert [t.payload for t in txns] == [comm("a2", 2), comm("a3", 3, 1)]


def test_the_running_jobs_pending_transactions_are_gathered_only_if_the_sink_reads_held() -> None:
    sink = FakeSink("a", FakeExternalSystem())
    asked: list[int] = []
    p3 = FakeCommittable("p3", 3, 0, 1)

    def pending() -> Part:
        asked.append(1)
        return transactions_part([PendingTransaction("a", 0, 0, 3, p3, payload=comm("p3", 3))])

    scope = held_of(sink, [], pending=pending).scope("job", "a", 7)
    assert asked == []
    assert tuple(scope.held) == (p3,) and tuple(scope.held) == (p3,) and asked == [1]
