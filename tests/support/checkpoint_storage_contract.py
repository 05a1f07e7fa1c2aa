"""The checkpoint-storage contract of DESIGN.md §5, written once for every object store it runs on
(MinIO, Azurite, fake-gcs-server): publish/list/load, the conditional create, committed markers,
corruption, retention, crashed final publishes and driver epochs. No mocks (issues #46, #43).

A test module subclasses :class:`CheckpointStorageContract` (pytest collects it as ``Test...``) and
provides two fixtures: ``store`` (a :class:`Store` on a fresh bucket or container) and ``storage``
(``store.open("job-1")``). Raw objects are read and written with each service's own SDK, never with
the storage under test.
"""

from __future__ import annotations

import random
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from support.checkpoints import metadata
from twophase.coordinator.checkpoint.driver_fence import DriverFence
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import encode
from twophase.coordinator.storage.object_store import ObjectCheckpointStorage
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointStorageError,
    CommittableFileError,
    CorruptCheckpointError,
    DriverFencedError,
)

CK, FIN, SP = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL, CheckpointKind.SAVEPOINT
PREFIX = "checkpoints/team-a"


@dataclass
class Store:
    """One fresh bucket or container: how to open the storage by location, and raw SDK access.

    Attributes:
        root: the location of the bucket, e.g. ``s3://bucket``, ``gs://bucket`` or
            ``abfss://container@account.dfs.core.windows.net``.
        open: job id -> the storage at ``root/PREFIX``, opened the way a job opens it.
        listing: every object key in the bucket, sorted.
        put_raw: writes bytes at a key (overwriting).
        get_raw: reads the bytes at a key.
    """

    root: str
    open: Callable[[str], ObjectCheckpointStorage]
    listing: Callable[[], list[str]]
    put_raw: Callable[[str, bytes], None]
    get_raw: Callable[[str], bytes]


def ids(storage: ObjectCheckpointStorage) -> list[tuple[int, CheckpointKind]]:
    """The (checkpoint id, kind) pairs the storage lists, oldest first."""
    return [(r.checkpoint_id, r.kind) for r in storage.list_checkpoints()]


def race(drivers: list[ObjectCheckpointStorage], candidates: list[CheckpointMetadata]) -> list[str]:
    """Both drivers publish at once (a barrier); each one's exit (``published``/``not published``)."""
    start = threading.Barrier(2)
    outcomes = ["", ""]

    def publish(i: int) -> None:
        start.wait()
        try:
            drivers[i].publish(candidates[i])
            outcomes[i] = "published"
        except CheckpointNotPublishedError:
            outcomes[i] = "not published"

    threads = [threading.Thread(target=publish, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


CORRUPTIONS = [
    (lambda good: good[: len(good) // 2], "not a complete zlib stream"),
    (lambda good: zlib.decompress(good)[:40], "not JSON"),
    (
        lambda good: zlib.compress(zlib.decompress(good).replace(b'"version":2', b'"version":4')),
        "unsupported checkpoint metadata version 4: this twophase reads versions 1 to 3",
    ),
    (lambda good: b'{"format": "something-else"}', "not a twophase.checkpoint object"),
]


class CheckpointStorageContract:
    """The cases every object-store checkpoint storage passes; fixtures ``store`` and ``storage``
    come from the subclassing test module."""

    @pytest.mark.parametrize("kind", list(CheckpointKind))
    def test_publish_list_load_round_trip(
        self, store: Store, storage: ObjectCheckpointStorage, kind: CheckpointKind
    ) -> None:
        meta = metadata(4, kind)
        ref = storage.publish(meta)
        rel = "savepoints/sp-4" if kind is SP else "chk-4"
        assert ref == CheckpointRef(4, kind, f"{store.root}/{PREFIX}/job-1/{rel}/_metadata")
        assert storage.list_checkpoints() == [ref]
        assert storage.load(ref) == meta
        assert storage.latest() == meta
        assert storage.load_location(ref.location) == meta
        assert storage.load_location(ref.location.removesuffix("/_metadata")) == meta
        # the committables of sink "orders" (index 1 of the sorted sinks) in one Arrow file, named
        # per driver run, checkpoint and attempt; the manifest names it (format v3)
        arrow = f"{PREFIX}/job-1/{rel}/committables-1-{storage.writer.run}-0.arrow"
        expected = [f"{PREFIX}/job-1/{rel}/_metadata", arrow]
        if kind is FIN:
            expected.insert(0, f"{PREFIX}/job-1/chk-4/_final")
        assert store.listing() == expected
        encoded = encode(meta, storage.writer.run, 0)
        assert store.get_raw(expected[-2]) == encoded.manifest  # read back by the service's own SDK
        assert store.get_raw(arrow) == dict(encoded.files)[arrow.rsplit("/", 1)[1]]

    def test_a_new_job_is_empty(self, storage: ObjectCheckpointStorage) -> None:
        assert storage.list_checkpoints() == []
        assert storage.latest() is None
        assert storage.apply_retention(1) == []

    def test_restore_from_a_published_checkpoint_in_a_new_process_view(self, store: Store) -> None:
        written = store.open("job-1")
        for cid in (1, 2, 3):
            written.publish(metadata(cid))
        restored = store.open("job-1")  # what a restarted driver opens
        assert restored.latest() == metadata(3)

    def test_the_committed_marker_is_an_object_beside_the_metadata_and_goes_with_it(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        ref = storage.publish(metadata(4))
        assert not storage.is_committed(ref.location)
        storage.mark_committed(ref.location)
        assert storage.is_committed(ref.location)
        assert f"{PREFIX}/job-1/chk-4/_committed" in store.listing()
        assert storage.list_checkpoints() == [ref]  # a marker is not a checkpoint
        storage.delete(ref)
        storage.delete(ref)  # idempotent
        assert store.listing() == []

    def test_publishing_an_existing_id_raises_and_keeps_the_first(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        first = metadata(3)
        ref = storage.publish(first)
        with pytest.raises(CheckpointNotPublishedError, match="exists"):
            storage.publish(metadata(3, partitions=1))
        with pytest.raises(CheckpointNotPublishedError, match="exists"):
            storage.publish(metadata(3, SP))  # ids are shared between checkpoints and savepoints
        assert storage.list_checkpoints() == [ref]
        assert storage.latest() == first
        assert store.get_raw(storage.metadata_key(3, CK)) == encode(first, storage.writer.run, 0).manifest
        # the refused publishes removed their own committable files
        assert [k for k in store.listing() if k.endswith(".arrow")] == [
            f"{PREFIX}/job-1/chk-3/committables-1-{storage.writer.run}-0.arrow"
        ]

    def test_the_conditional_create_refuses_even_when_the_precheck_is_raced(
        self, storage: ObjectCheckpointStorage, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        first = metadata(5)
        storage.publish(first)
        monkeypatch.setattr(storage, "_exists", lambda _key: False)  # a concurrent writer passed the check
        with pytest.raises(CheckpointNotPublishedError, match="exists already"):
            storage.publish(metadata(5, partitions=1))
        assert storage.latest() == first

    def test_latest_by_listing_is_numeric(self, storage: ObjectCheckpointStorage) -> None:
        order = list(range(1, 13))
        random.Random(3).shuffle(order)
        for cid in order:
            storage.publish(metadata(cid))
        assert [r.checkpoint_id for r in storage.list_checkpoints()] == list(range(1, 13))
        latest = storage.latest()
        assert latest is not None and latest.checkpoint_id == 12
        storage.publish(metadata(20, SP))
        latest = storage.latest()
        assert latest is not None and (latest.checkpoint_id, latest.kind) == (20, SP)

    def test_jobs_sharing_a_prefix_do_not_see_each_other(self, store: Store) -> None:
        a, b = store.open("job-a"), store.open("job-ab")  # a prefix of the other's name
        a.publish(metadata(1, job_id="job-a"))
        b.publish(metadata(2, job_id="job-ab"))
        assert [r.checkpoint_id for r in a.list_checkpoints()] == [1]
        assert [r.checkpoint_id for r in b.list_checkpoints()] == [2]

    @pytest.mark.parametrize(("corrupt", "why"), CORRUPTIONS)
    def test_a_corrupt_object_raises_naming_its_location(
        self, store: Store, storage: ObjectCheckpointStorage, corrupt: Callable[[bytes], bytes], why: str
    ) -> None:
        older = metadata(1)
        storage.publish(older)
        ref = storage.publish(metadata(2))
        store.put_raw(storage.metadata_key(2, CK), corrupt(metadata(2).dumps()))
        with pytest.raises(CorruptCheckpointError, match=why) as info:
            storage.latest()
        assert ref.location == f"{store.root}/{PREFIX}/job-1/chk-2/_metadata"
        assert ref.location in str(info.value)
        assert storage.latest(fallback_to_valid=True) == older  # only on explicit request

    def test_a_missing_location_is_a_storage_error(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        with pytest.raises(CheckpointStorageError, match="no checkpoint metadata at") as info:
            storage.load_location(f"{store.root}/{PREFIX}/job-1/savepoints/sp-99")
        assert not isinstance(info.value, CorruptCheckpointError)

    def test_retention_keeps_the_newest_and_never_deletes_savepoints(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        for cid in range(1, 6):
            storage.publish(metadata(cid))
        storage.publish(metadata(6, SP))
        storage.publish(metadata(7))
        storage.publish(metadata(8, FIN))
        deleted = storage.apply_retention(2)
        assert [r.checkpoint_id for r in deleted] == [1, 2, 3, 4, 5]
        assert ids(storage) == [(6, SP), (7, CK), (8, FIN)]
        job = f"{PREFIX}/job-1"
        assert [k for k in store.listing() if not k.endswith(".arrow")] == [
            f"{job}/chk-7/_metadata",
            f"{job}/chk-8/_final",
            f"{job}/chk-8/_metadata",
            f"{job}/savepoints/sp-6/_metadata",
        ]
        # committable files went with their manifests
        assert [k.rsplit("/", 1)[0] for k in store.listing() if k.endswith(".arrow")] == [
            f"{job}/chk-7",
            f"{job}/chk-8",
            f"{job}/savepoints/sp-6",
        ]
        storage.apply_retention(1)
        assert ids(storage) == [(6, SP), (8, FIN)]  # the final checkpoint is the newest: kept

    def test_a_crashed_final_publish_is_invisible_and_cleaned(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        storage.publish(metadata(1))
        # a process that died between the _final marker and the conditional create of _metadata
        store.put_raw(f"{PREFIX}/job-1/chk-2/_final", b"")
        assert ids(storage) == [(1, CK)]
        storage.publish(metadata(3))
        assert storage.apply_retention(5) == []
        assert [k for k in store.listing() if not k.endswith(".arrow")] == [
            f"{PREFIX}/job-1/chk-1/_metadata",
            f"{PREFIX}/job-1/chk-3/_metadata",
        ]
        # and an id whose final publish crashed can still be published as a plain checkpoint
        store.put_raw(f"{PREFIX}/job-1/chk-4/_final", b"")
        storage.publish(metadata(4))
        assert ids(storage)[-1] == (4, CK)

    def test_driver_epochs_are_claimed_once_each_and_the_newest_fences_the_older(self, store: Store) -> None:
        old, new = (
            DriverFence("job-1", store.open("job-1"), lambda: 0),
            DriverFence("job-1", store.open("job-1"), lambda: 0),
        )
        assert old.claim() == 1 and new.claim() == 2
        assert not store.open("job-1").create_driver_epoch(2, b"another driver")  # conditional create
        with pytest.raises(DriverFencedError, match=r"driver epoch 1 of job 'job-1' is fenced .*epoch 2 on "):
            old.check("publishing checkpoint 3")
        new.check("publishing checkpoint 3")
        store.open("job-1").prune_driver_epochs(2)
        assert store.listing() == [f"{PREFIX}/job-1/_drivers/driver-2"]
        assert store.open("job-1").list_checkpoints() == []  # claims are no checkpoints

    # -- checkpoint format v3: committable files under a manifest (issue #42 item 2) ----------

    def test_a_manifest_naming_a_missing_committable_file_is_refused(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        storage.publish(metadata(1))
        ref = storage.publish(metadata(2))
        arrow = next(k for k in store.listing() if "/chk-2/" in k and k.endswith(".arrow"))
        storage.store.delete_keys([arrow])
        with pytest.raises(
            CommittableFileError, match=r"names the committable file .* which is missing"
        ) as info:
            storage.load(ref)
        assert ref.location in str(info.value) and "orders" in str(info.value)
        with pytest.raises(CommittableFileError):
            storage.latest()  # never read as a checkpoint with nothing to commit
        assert storage.latest(fallback_to_valid=True) == metadata(1)  # only on explicit request

    def test_a_committable_file_that_does_not_match_its_sha256_is_refused(
        self, store: Store, storage: ObjectCheckpointStorage
    ) -> None:
        ref = storage.publish(metadata(2))
        arrow = next(k for k in store.listing() if k.endswith(".arrow"))
        good = store.get_raw(arrow)
        store.put_raw(arrow, good[:100] + bytes([good[100] ^ 1]) + good[101:])
        with pytest.raises(CommittableFileError, match="is corrupt: sha256 "):
            storage.load(ref)

    def test_a_stale_driver_publishing_the_same_id_never_touches_the_winners_files(
        self, store: Store
    ) -> None:
        newer, stale = store.open("job-1"), store.open("job-1")  # two driver runs of one job
        assert newer.writer.run != stale.writer.run
        ref = newer.publish(metadata(3))
        with pytest.raises(CheckpointNotPublishedError, match="exists"):
            stale.publish(metadata(3, partitions=1))
        monkey = pytest.MonkeyPatch()
        monkey.setattr(stale, "_exists", lambda _key: False)  # it passed the check before the winner
        try:
            with pytest.raises(CheckpointNotPublishedError, match="exists already"):
                stale.publish(metadata(3, partitions=1))
        finally:
            monkey.undo()
        assert newer.load(ref) == metadata(3)
        assert [k for k in store.listing() if k.endswith(".arrow")] == [
            f"{PREFIX}/job-1/chk-3/committables-1-{newer.writer.run}-0.arrow"
        ]

    def test_retention_keeps_another_runs_unpublished_files_and_removes_its_own(self, store: Store) -> None:
        storage, stale = store.open("job-1"), store.open("job-1")
        storage.publish(metadata(1))
        # files of checkpoint 2 with no manifest: this run's (a publish that failed unknown) and
        # a stale driver's, which may still publish its manifest
        for writer in (storage.writer, stale.writer):
            for name, data in encode(metadata(2), writer.run, 0).files:
                store.put_raw(f"{PREFIX}/job-1/chk-2/{name}", data)
        storage.publish(metadata(3))
        storage.apply_retention(5)
        assert [k for k in store.listing() if "/chk-2/" in k] == [
            f"{PREFIX}/job-1/chk-2/committables-1-{stale.writer.run}-0.arrow"
        ]
