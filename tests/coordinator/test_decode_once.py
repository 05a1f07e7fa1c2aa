"""The driver decodes each committable once per epoch and once per restore, and a restore reads
each checkpoint's ``_metadata`` once (issue #29 item 3): the first use decodes; verification,
commit and lingering cleanup use what it decoded, until the commit is confirmed and the
committables are let go (issue #42: a cleanup that then finds something open decodes what it
reads of them again); a restore's re-commit and cleanup share one decode through the metadata
cache."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from support.fakes import FakeCommittable, FakeExternalSystem, FakeSink
from support.harness import TwoPhaseHarness
from support.memory_storage import InMemoryCheckpointStorage
from support.runtime_scenarios import data, expected, pos

from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.state.payload import payload_object
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.context import JsonObject


class CountingSink(FakeSink):
    """A fake sink counting its codec's decodes per transaction, and keeping what it verified."""

    def __init__(self, name: str, system: FakeExternalSystem) -> None:
        super().__init__(name, system)
        self.decodes: Counter[str] = Counter()
        self.verified: list[FakeCommittable] = []

    def decode(self, payload: JsonObject) -> FakeCommittable:
        committable = super().decode(payload)
        self.decodes[committable.txn_id] += 1
        return committable

    def verify_pre_committed(
        self, committables: Sequence[FakeCommittable], in_progress: Sequence[JsonObject]
    ) -> None:
        self.verified.extend(committables)


class CountingStorage(InMemoryCheckpointStorage):
    """In-memory checkpoint storage counting the reads of each checkpoint's ``_metadata``."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.loads: Counter[int] = Counter()

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        self.loads[ref.checkpoint_id] += 1
        return super().load(ref)


def counting_harness() -> tuple[TwoPhaseHarness, CountingSink, CountingStorage, FakeExternalSystem]:
    system = FakeExternalSystem()
    sink = CountingSink("k", system)
    storage = CountingStorage("decode-once")
    config = RuntimeConfig(
        checkpoint=CheckpointConfig(retained_checkpoints=2), abort_lingering_each_epoch=True
    )
    return (
        TwoPhaseHarness([sink], job_id="decode-once", config=config, storage=storage),
        sink,
        storage,
        system,
    )


def held_in(storage: InMemoryCheckpointStorage) -> set[str]:
    """Transaction ids the retained checkpoints hold."""
    return {
        CountingSink.codec.from_json(payload_object(rec.payload)).txn_id
        for ref in storage.list_checkpoints()
        for snap in InMemoryCheckpointStorage.load(storage, ref).sinks.values()
        for rec in snap.committables
    }


def test_each_committable_is_decoded_once_per_epoch_and_once_per_restore() -> None:
    h, sink, storage, system = counting_harness()
    h.restore()
    for n in (1, 2):
        h.write_epoch(data(n), source_position=pos(n))
    # the third epoch is persisted but not notified: its transactions stay pending in memory
    # (held by lingering cleanup from the coordinator) and the restore must re-commit them
    h.write_epoch(data(3), source_position=pos(3), notify=False)
    txns = set(sink.decodes)
    assert len(txns) == 6  # 3 epochs x 2 partitions
    # decoded once each, on first use (verified), then reused by the commit; a committed
    # transaction's committable is let go (issue #42: the driver's memory), so epoch 2's, still
    # held by the retained checkpoints, is decoded again by the one cleanup that found something
    # open (epoch 3's transactions, never notified) and read what is held
    epoch_2 = {t for t in txns if "-c2-" in t}
    assert sink.decodes == Counter({t: 2 if t in epoch_2 else 1 for t in txns})
    assert sorted(c.txn_id for c in sink.verified) == sorted(txns)
    assert storage.loads == Counter()  # the runtime's own checkpoints are never read back

    retained = held_in(storage)
    assert len(retained) == 4  # retention 2: epoch 2's transactions and epoch 3's
    result = h.restart_process()
    assert result is not None and result.recommitted == 2  # epoch 3's, never notified
    assert system.committed_records() == expected([1, 2, 3])
    assert system.lingering() == set()
    # the restore decoded each committable it re-committed once (re-commit and cleanup share it;
    # epoch 2's, committed, are read by no cleanup: it found nothing open) ...
    recommitted = retained - epoch_2
    assert sink.decodes == Counter({t: (2 if t in epoch_2 else 1) + (t in recommitted) for t in txns})
    # ... and read each retained checkpoint's _metadata once (not again for the cleanup)
    loads = Counter({ref.checkpoint_id: 1 for ref in storage.list_checkpoints()})
    assert storage.loads == loads

    h.write_epoch(data(4), source_position=pos(4))  # the restored checkpoints are not read again
    assert storage.loads == loads
    assert all(n == 1 for t, n in sink.decodes.items() if t not in txns)
    assert system.committed_records() == expected([1, 2, 3, 4])
