"""The metadata cache: each checkpoint read once, its committables decoded once per sink (or
taken as the coordinator decoded them), forgotten when deleted."""

from __future__ import annotations

from collections import Counter

from support.fakes import CODEC, FakeCommittable, FakeExternalSystem, FakeSink
from support.memory_storage import InMemoryCheckpointStorage

from twophase.coordinator.checkpoint.metadata_cache import MetadataCache
from twophase.coordinator.state.metadata import (
    CheckpointKind,
    CheckpointMetadata,
    CommittableRecord,
    SinkSnapshot,
)
from twophase.coordinator.state.payload import payload_bytes
from twophase.coordinator.storage.base import CheckpointRef
from twophase.sinks.context import JsonObject


class CountingStorage(InMemoryCheckpointStorage):
    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.loads: Counter[int] = Counter()

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        self.loads[ref.checkpoint_id] += 1
        return super().load(ref)


class CountingSink(FakeSink):
    def __init__(self, name: str) -> None:
        super().__init__(name, FakeExternalSystem())
        self.decodes = 0

    def decode(self, payload: JsonObject) -> FakeCommittable:
        self.decodes += 1
        return super().decode(payload)


def checkpoint(c: int, *txns: str) -> CheckpointMetadata:
    records = tuple(
        CommittableRecord(0, 0, payload_bytes(CODEC.to_json(FakeCommittable(t, c, 0, 1))), c) for t in txns
    )
    return CheckpointMetadata("job", c, CheckpointKind.CHECKPOINT, 0, {"a": SinkSnapshot(1, records)})


def test_a_loaded_checkpoint_is_read_once_and_each_payload_decoded_once_on_access() -> None:
    storage = CountingStorage("job")
    ref = storage.publish(checkpoint(1, "t1", "t2"))
    cache, sink, other = MetadataCache(storage), CountingSink("a"), CountingSink("b")
    assert cache.retained() == cache.retained() == [checkpoint(1, "t1", "t2")]
    assert storage.loads == Counter({1: 1})
    first = cache.committables(ref.location, sink)
    assert len(first) == 2 and sink.decodes == 0  # nothing decoded until read (#42)
    assert first[1] == FakeCommittable("t2", 1, 0, 1) and sink.decodes == 1
    assert tuple(first) == (FakeCommittable("t1", 1, 0, 1), FakeCommittable("t2", 1, 0, 1))
    assert tuple(first) == tuple(first) and sink.decodes == 2
    assert cache.committables(ref.location, sink) is first and sink.decodes == 2
    assert cache.committables(ref.location, other) == () and other.decodes == 0  # not in it


def test_a_published_checkpoint_keeps_the_committables_it_was_given() -> None:
    storage = CountingStorage("job")
    meta = checkpoint(1, "t1")
    ref = storage.publish(meta)
    cache, sink = MetadataCache(storage), CountingSink("a")
    given = (FakeCommittable("t1", 1, 0, 1),)
    cache.remember(ref.location, meta, {"a": given})
    assert cache.retained_at() == [(ref.location, meta)]
    assert cache.committables(ref.location, sink) == given and sink.decodes == 0
    assert storage.loads == Counter()


def test_a_location_from_elsewhere_comes_last_and_forgotten_ones_are_read_again() -> None:
    storage = CountingStorage("job")
    ref = storage.publish(checkpoint(2, "t2"))
    cache = MetadataCache(storage)
    elsewhere = checkpoint(1, "t1")
    cache.remember("mem://elsewhere/_metadata", elsewhere)
    assert [loc for loc, _ in cache.retained_at("mem://elsewhere/_metadata")] == [
        ref.location,
        "mem://elsewhere/_metadata",
    ]
    assert [loc for loc, _ in cache.retained_at(ref.location)] == [ref.location]  # listed: once
    cache.forget(ref.location)
    cache.retained()
    assert storage.loads == Counter({2: 2})
