"""Checkpoint storage on Azure Blob Storage (Azurite) and Google Cloud Storage (fake-gcs-server):
the contract of DESIGN.md §5 as tests/integration/test_checkpoint_storage_s3.py checks it on MinIO,
plus two drivers publishing one id at once. No mocks (issue #46).

Each test works in its own fresh container or bucket. Raw objects are read and written with each
service's own SDK, not with the storage under test.
"""

from __future__ import annotations

import random
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.checkpoints import metadata

from twophase.coordinator.driver_fence import DriverFence
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions, open_storage
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.object_store import ObjectCheckpointStorage
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.integration.services.gcs_server import GcsEndpoint
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointStorageError,
    CorruptCheckpointError,
    DriverFencedError,
)

CK, FIN, SP = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL, CheckpointKind.SAVEPOINT
PREFIX = "checkpoints/team-a"


@dataclass
class Store:
    """One fresh container or bucket: how to open the storage by location, and raw SDK access."""

    root: str  # e.g. "abfss://c@twophase.dfs.core.windows.net" or "gs://bucket"
    open: Callable[[str], ObjectCheckpointStorage]  # job id -> storage at root/PREFIX
    listing: Callable[[], list[str]]
    put_raw: Callable[[str, bytes], None]
    get_raw: Callable[[str], bytes]


def _azure(endpoint: AzureBlobEndpoint) -> Iterator[Store]:
    container = f"ckpt-{uuid.uuid4().hex[:12]}"
    endpoint.ensure_container(container)
    client = endpoint.service_client().get_container_client(container)
    root = f"abfss://{container}@{endpoint.account_name}.dfs.core.windows.net"
    options = AzureStorageOptions(connection_string=endpoint.connection_string())

    def opened(job_id: str) -> ObjectCheckpointStorage:
        s = open_storage(f"{root}/{PREFIX}", job_id, azure_options=options, env={})
        assert isinstance(s, ObjectCheckpointStorage)
        return s

    yield Store(
        root,
        opened,
        lambda: sorted(client.list_blob_names()),
        lambda key, data: client.upload_blob(key, data, overwrite=True),
        lambda key: client.download_blob(key).readall(),
    )
    client.delete_container()


def _gcs(endpoint: GcsEndpoint) -> Iterator[Store]:
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    endpoint.ensure_bucket(name)
    sdk = endpoint.client()
    bucket = sdk.bucket(name)
    options = GcsStorageOptions(emulator_host=endpoint.url)

    def opened(job_id: str) -> ObjectCheckpointStorage:
        s = open_storage(f"gs://{name}/{PREFIX}", job_id, gcs_options=options, env={})
        assert isinstance(s, ObjectCheckpointStorage)
        return s

    yield Store(
        f"gs://{name}",
        opened,
        lambda: sorted(b.name for b in sdk.list_blobs(name)),
        lambda key, data: bucket.blob(key).upload_from_string(data),
        lambda key: bucket.blob(key).download_as_bytes(),
    )
    for blob in sdk.list_blobs(name):
        blob.delete()
    bucket.delete()


@pytest.fixture(params=["azure", "gcs"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    endpoint: Any = request.getfixturevalue(f"{request.param}_endpoint")
    yield from (_azure(endpoint) if request.param == "azure" else _gcs(endpoint))


@pytest.fixture
def storage(store: Store) -> ObjectCheckpointStorage:
    return store.open("job-1")


def ids(storage: ObjectCheckpointStorage) -> list[tuple[int, CheckpointKind]]:
    return [(r.checkpoint_id, r.kind) for r in storage.list_checkpoints()]


@pytest.mark.parametrize("kind", list(CheckpointKind))
def test_publish_list_load_round_trip(
    store: Store, storage: ObjectCheckpointStorage, kind: CheckpointKind
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
    expected = [f"{PREFIX}/job-1/{rel}/_metadata"]
    if kind is FIN:
        expected.insert(0, f"{PREFIX}/job-1/chk-4/_final")
    assert store.listing() == expected
    assert store.get_raw(expected[-1]) == meta.dumps()  # read back by the service's own SDK


def test_a_new_job_is_empty(storage: ObjectCheckpointStorage) -> None:
    assert storage.list_checkpoints() == []
    assert storage.latest() is None
    assert storage.apply_retention(1) == []


def test_restore_from_a_published_checkpoint_in_a_new_process_view(store: Store) -> None:
    written = store.open("job-1")
    for cid in (1, 2, 3):
        written.publish(metadata(cid))
    restored = store.open("job-1")  # what a restarted driver opens
    assert restored.latest() == metadata(3)


def test_the_committed_marker_goes_with_its_checkpoint(
    store: Store, storage: ObjectCheckpointStorage
) -> None:
    ref = storage.publish(metadata(4))
    assert not storage.is_committed(ref.location)
    storage.mark_committed(ref.location)
    assert storage.is_committed(ref.location)
    assert f"{PREFIX}/job-1/chk-4/_committed" in store.listing()
    assert storage.list_checkpoints() == [ref]
    storage.delete(ref)
    storage.delete(ref)  # idempotent
    assert store.listing() == []


def test_publishing_an_existing_id_raises_and_keeps_the_first(
    store: Store, storage: ObjectCheckpointStorage
) -> None:
    first = metadata(3)
    ref = storage.publish(first)
    with pytest.raises(CheckpointNotPublishedError, match="exists"):
        storage.publish(metadata(3, partitions=1))
    with pytest.raises(CheckpointNotPublishedError, match="exists"):
        storage.publish(metadata(3, SP))  # ids are shared between checkpoints and savepoints
    assert storage.list_checkpoints() == [ref]
    assert store.get_raw(f"{PREFIX}/job-1/chk-3/_metadata") == first.dumps()


def test_the_conditional_create_refuses_even_when_the_precheck_is_raced(
    storage: ObjectCheckpointStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = metadata(5)
    storage.publish(first)
    monkeypatch.setattr(storage, "_exists", lambda _key: False)  # a concurrent writer passed the check
    with pytest.raises(CheckpointNotPublishedError, match="exists already"):
        storage.publish(metadata(5, partitions=1))
    assert storage.latest() == first


def _race(drivers: list[ObjectCheckpointStorage], candidates: list[CheckpointMetadata]) -> list[str]:
    """Both drivers publish at once (a barrier); each one's exit."""
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


def test_two_drivers_publishing_one_id_at_once_exactly_one_wins(store: Store) -> None:
    for cid in range(1, 6):
        candidates = [metadata(cid, partitions=1), metadata(cid, partitions=3)]
        outcomes = _race([store.open("job-1"), store.open("job-1")], candidates)
        assert sorted(outcomes) == ["not published", "published"], outcomes
        winner = candidates[outcomes.index("published")]
        assert store.get_raw(f"{PREFIX}/job-1/chk-{cid}/_metadata") == winner.dumps()
        assert store.open("job-1").latest() == winner


def test_latest_by_listing_is_numeric(storage: ObjectCheckpointStorage) -> None:
    order = list(range(1, 13))
    random.Random(3).shuffle(order)
    for cid in order:
        storage.publish(metadata(cid))
    assert [r.checkpoint_id for r in storage.list_checkpoints()] == list(range(1, 13))
    storage.publish(metadata(20, SP))
    latest = storage.latest()
    assert latest is not None and (latest.checkpoint_id, latest.kind) == (20, SP)


def test_jobs_sharing_a_prefix_do_not_see_each_other(store: Store) -> None:
    a, b = store.open("job-a"), store.open("job-ab")  # a prefix of the other's name
    a.publish(metadata(1, job_id="job-a"))
    b.publish(metadata(2, job_id="job-ab"))
    assert [r.checkpoint_id for r in a.list_checkpoints()] == [1]
    assert [r.checkpoint_id for r in b.list_checkpoints()] == [2]


@pytest.mark.parametrize(
    ("corrupt", "why"),
    [
        (lambda good: good[: len(good) // 2], "not a complete zlib stream"),
        (lambda good: zlib.decompress(good)[:40], "not JSON"),
        (lambda good: b'{"format": "something-else"}', "not a twophase.checkpoint object"),
    ],
)
def test_a_corrupt_object_raises_naming_its_location(
    store: Store, storage: ObjectCheckpointStorage, corrupt: Callable[[bytes], bytes], why: str
) -> None:
    older = metadata(1)
    storage.publish(older)
    ref = storage.publish(metadata(2))
    store.put_raw(f"{PREFIX}/job-1/chk-2/_metadata", corrupt(metadata(2).dumps()))
    with pytest.raises(CorruptCheckpointError, match=why) as info:
        storage.latest()
    assert ref.location in str(info.value)
    assert storage.latest(fallback_to_valid=True) == older  # only on explicit request


def test_a_missing_location_is_a_storage_error(store: Store, storage: ObjectCheckpointStorage) -> None:
    with pytest.raises(CheckpointStorageError, match="no checkpoint metadata at") as info:
        storage.load_location(f"{store.root}/{PREFIX}/job-1/savepoints/sp-99")
    assert not isinstance(info.value, CorruptCheckpointError)


def test_retention_keeps_the_newest_and_never_deletes_savepoints(
    store: Store, storage: ObjectCheckpointStorage
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
    assert store.listing() == [
        f"{job}/chk-7/_metadata",
        f"{job}/chk-8/_final",
        f"{job}/chk-8/_metadata",
        f"{job}/savepoints/sp-6/_metadata",
    ]
    storage.apply_retention(1)
    assert ids(storage) == [(6, SP), (8, FIN)]


def test_a_crashed_final_publish_is_invisible_and_cleaned(
    store: Store, storage: ObjectCheckpointStorage
) -> None:
    storage.publish(metadata(1))
    store.put_raw(f"{PREFIX}/job-1/chk-2/_final", b"")  # died between the marker and the create
    assert ids(storage) == [(1, CK)]
    storage.publish(metadata(3))
    assert storage.apply_retention(5) == []
    assert store.listing() == [f"{PREFIX}/job-1/chk-1/_metadata", f"{PREFIX}/job-1/chk-3/_metadata"]


def test_driver_epochs_are_claimed_once_each_and_the_newest_fences_the_older(store: Store) -> None:
    old, new = (
        DriverFence("job-1", store.open("job-1"), lambda: 0),
        DriverFence("job-1", store.open("job-1"), lambda: 0),
    )
    assert old.claim() == 1 and new.claim() == 2
    assert not store.open("job-1").create_driver_epoch(2, b"another driver")
    with pytest.raises(DriverFencedError, match=r"driver epoch 1 of job 'job-1' is fenced"):
        old.check("publishing checkpoint 3")
    new.check("publishing checkpoint 3")
    store.open("job-1").prune_driver_epochs(2)
    assert store.listing() == [f"{PREFIX}/job-1/_drivers/driver-2"]
    assert store.open("job-1").list_checkpoints() == []


def test_credentials_are_in_no_repr(store: Store, storage: ObjectCheckpointStorage) -> None:
    text = repr(storage) + repr(storage.store)
    assert store.root in text
    assert "AccountKey" not in text and "sig=" not in text


def test_a_wrong_azure_key_is_refused_for_good_naming_the_settings(azure_endpoint: AzureBlobEndpoint) -> None:
    container = f"ckpt-{uuid.uuid4().hex[:12]}"
    azure_endpoint.ensure_container(container)
    wrong = AzureStorageOptions(
        account_key="d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmc=", blob_endpoint=azure_endpoint.blob_url
    )
    location = f"wasbs://{container}@{azure_endpoint.account_name}.blob.core.windows.net/p"
    s = open_storage(location, "job-1", azure_options=wrong, env={})
    with pytest.raises(CheckpointNotPublishedError) as info:
        s.publish(metadata(1))
    message = str(info.value)
    assert "Storage Blob Data Contributor" in message and "AZURE_STORAGE_KEY" in message
    assert "\n" not in message and wrong.account_key not in message  # type: ignore[operator]
