"""S3CheckpointStorage against a real S3 server (MinIO): the checkpoint-storage contract of
DESIGN.md §5 with conditional PUT, listing, corruption and retention. No mocks.

Each test works in its own fresh bucket, removed afterwards.
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError
from support.checkpoints import metadata

from twophase.coordinator.driver_fence import DriverFence
from twophase.coordinator.metadata import CheckpointKind
from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.s3 import S3CheckpointStorage
from twophase.integration.services.s3 import S3Endpoint
from twophase.sinks.errors import CheckpointStorageError, CorruptCheckpointError, DriverFencedError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.s3

CK, FIN, SP = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL, CheckpointKind.SAVEPOINT
PREFIX = "checkpoints/team-a"


@pytest.fixture
def client(s3_endpoint: S3Endpoint) -> S3Client:
    return s3_endpoint.boto3_client()


@pytest.fixture
def bucket(client: S3Client) -> Iterator[str]:
    name = f"twophase-ckpt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield name
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", ()):
            client.delete_object(Bucket=name, Key=obj["Key"])
    client.delete_bucket(Bucket=name)


@pytest.fixture
def storage(s3_endpoint: S3Endpoint, bucket: str) -> S3CheckpointStorage:
    """Opened the way a job opens it: by location, with explicit options."""
    options = s3_endpoint.s3_options()
    s = open_storage(f"s3://{bucket}/{PREFIX}", "job-1", s3_options=options, env={})
    assert isinstance(s, S3CheckpointStorage)
    return s


def keys(client: S3Client, bucket: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", ()))


def ids(storage: S3CheckpointStorage) -> list[tuple[int, CheckpointKind]]:
    return [(r.checkpoint_id, r.kind) for r in storage.list_checkpoints()]


@pytest.mark.parametrize("kind", list(CheckpointKind))
def test_publish_list_load_round_trip(
    storage: S3CheckpointStorage, client: S3Client, bucket: str, kind: CheckpointKind
) -> None:
    meta = metadata(4, kind)
    ref = storage.publish(meta)
    rel = "savepoints/sp-4" if kind is SP else "chk-4"
    assert ref == CheckpointRef(4, kind, f"s3://{bucket}/{PREFIX}/job-1/{rel}/_metadata")
    assert storage.list_checkpoints() == [ref]
    assert storage.load(ref) == meta
    assert storage.latest() == meta
    assert storage.load_location(ref.location) == meta
    assert storage.load_location(ref.location.removesuffix("/_metadata")) == meta
    expected = [f"{PREFIX}/job-1/{rel}/_metadata"]
    if kind is FIN:
        expected.insert(0, f"{PREFIX}/job-1/chk-4/_final")
    assert keys(client, bucket) == expected


def test_the_committed_marker_is_an_object_beside_the_metadata_and_goes_with_it(
    storage: S3CheckpointStorage, client: S3Client, bucket: str
) -> None:
    ref = storage.publish(metadata(4, CheckpointKind.CHECKPOINT))
    assert not storage.is_committed(ref.location)
    storage.mark_committed(ref.location)
    assert storage.is_committed(ref.location)
    assert f"{PREFIX}/job-1/chk-4/_committed" in keys(client, bucket)
    assert storage.list_checkpoints() == [ref]  # a marker is not a checkpoint
    storage.delete(ref)
    assert keys(client, bucket) == []


def test_new_job_is_empty(storage: S3CheckpointStorage) -> None:
    assert storage.list_checkpoints() == []
    assert storage.latest() is None
    assert storage.apply_retention(1) == []


def test_server_refuses_conditional_overwrite(client: S3Client, bucket: str) -> None:
    """The primitive publish relies on: MinIO answers 412 to If-None-Match: * on an existing key."""
    client.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"


def test_publishing_an_existing_id_raises_and_keeps_the_first(
    storage: S3CheckpointStorage, client: S3Client, bucket: str
) -> None:
    first = metadata(3)
    ref = storage.publish(first)
    with pytest.raises(CheckpointStorageError, match="exists"):
        storage.publish(metadata(3, partitions=1))
    with pytest.raises(CheckpointStorageError, match="exists"):
        storage.publish(metadata(3, SP))  # ids are shared between checkpoints and savepoints
    assert storage.list_checkpoints() == [ref]
    assert storage.latest() == first
    assert client.get_object(Bucket=bucket, Key=storage.metadata_key(3, CK))["Body"].read() == first.dumps()


def test_conditional_put_refuses_even_when_the_precheck_is_raced(
    storage: S3CheckpointStorage, client: S3Client, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = metadata(5)
    storage.publish(first)
    monkeypatch.setattr(storage, "_exists", lambda _key: False)  # a concurrent writer passed the check
    with pytest.raises(CheckpointStorageError, match="exists already"):
        storage.publish(metadata(5, partitions=1))
    assert storage.latest() == first


def test_latest_by_listing_is_numeric(storage: S3CheckpointStorage) -> None:
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


def test_jobs_sharing_a_prefix_do_not_see_each_other(
    s3_endpoint: S3Endpoint, bucket: str, client: S3Client
) -> None:
    a = S3CheckpointStorage(bucket, PREFIX, "job-a", client)
    b = S3CheckpointStorage(bucket, PREFIX, "job-ab", client)  # a prefix of the other's name
    a.publish(metadata(1, job_id="job-a"))
    b.publish(metadata(2, job_id="job-ab"))
    assert [r.checkpoint_id for r in a.list_checkpoints()] == [1]
    assert [r.checkpoint_id for r in b.list_checkpoints()] == [2]


@pytest.mark.parametrize(
    ("corrupt", "why"),
    [
        (lambda good: good[: len(good) // 2], "not a complete zlib stream"),
        (lambda good: zlib.decompress(good)[:40], "not JSON"),
        (
            lambda good: zlib.compress(zlib.decompress(good).replace(b'"version":2', b'"version":3')),
            "unsupported checkpoint metadata version 3",
        ),
        (lambda good: b'{"format": "something-else"}', "not a twophase.checkpoint object"),
    ],
)
def test_corrupt_object_raises_naming_the_uri(
    storage: S3CheckpointStorage, client: S3Client, bucket: str, corrupt: Callable[[bytes], bytes], why: str
) -> None:
    older = metadata(1)
    storage.publish(older)
    ref = storage.publish(metadata(2))
    client.put_object(Bucket=bucket, Key=storage.metadata_key(2, CK), Body=corrupt(metadata(2).dumps()))
    with pytest.raises(CorruptCheckpointError, match=why) as info:
        storage.latest()
    assert ref.location == f"s3://{bucket}/{PREFIX}/job-1/chk-2/_metadata"
    assert ref.location in str(info.value)
    assert storage.latest(fallback_to_valid=True) == older  # only on explicit request


def test_missing_location_is_a_storage_error(storage: S3CheckpointStorage, bucket: str) -> None:
    with pytest.raises(CheckpointStorageError, match="no checkpoint metadata at") as info:
        storage.load_location(f"s3://{bucket}/{PREFIX}/job-1/savepoints/sp-99")
    assert not isinstance(info.value, CorruptCheckpointError)


def test_retention_keeps_newest_n_and_never_deletes_savepoints(
    storage: S3CheckpointStorage, client: S3Client, bucket: str
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
    assert keys(client, bucket) == [
        f"{job}/chk-7/_metadata",
        f"{job}/chk-8/_final",
        f"{job}/chk-8/_metadata",
        f"{job}/savepoints/sp-6/_metadata",
    ]
    storage.apply_retention(1)
    assert ids(storage) == [(6, SP), (8, FIN)]  # the final checkpoint is the newest: kept


def test_crashed_final_publish_is_invisible_and_cleaned(
    storage: S3CheckpointStorage, client: S3Client, bucket: str
) -> None:
    storage.publish(metadata(1))
    # a process that died between the _final marker and the conditional PUT of _metadata
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/job-1/chk-2/_final", Body=b"")
    assert ids(storage) == [(1, CK)]
    storage.publish(metadata(3))
    assert storage.apply_retention(5) == []
    assert keys(client, bucket) == [f"{PREFIX}/job-1/chk-1/_metadata", f"{PREFIX}/job-1/chk-3/_metadata"]
    # and an id whose final publish crashed can still be published as a plain checkpoint
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/job-1/chk-4/_final", Body=b"")
    storage.publish(metadata(4))
    assert ids(storage)[-1] == (4, CK)


def test_delete_is_idempotent(storage: S3CheckpointStorage, client: S3Client, bucket: str) -> None:
    ref = storage.publish(metadata(1, FIN))
    storage.delete(ref)
    storage.delete(ref)
    assert keys(client, bucket) == []


def test_a_losing_final_publish_leaves_the_winners_checkpoint_loadable(
    storage: S3CheckpointStorage, client: S3Client, bucket: str
) -> None:
    # issue #43: another driver's plain chk-2 won the conditional PUT; our _final stayed beside it
    storage.publish(metadata(2))
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/job-1/chk-2/_final", Body=b"")
    assert storage.latest() == metadata(2)


def test_driver_epochs_are_claimed_once_each_and_the_newest_fences_the_older(
    s3_endpoint: S3Endpoint, bucket: str, client: S3Client
) -> None:
    def opened() -> S3CheckpointStorage:
        s = open_storage(f"s3://{bucket}/{PREFIX}", "job-1", s3_options=s3_endpoint.s3_options(), env={})
        assert isinstance(s, S3CheckpointStorage)
        return s

    old, new = DriverFence("job-1", opened(), lambda: 0), DriverFence("job-1", opened(), lambda: 0)
    assert old.claim() == 1 and new.claim() == 2
    assert not opened().create_driver_epoch(2, b"another driver")  # If-None-Match: * on MinIO
    with pytest.raises(DriverFencedError, match=r"driver epoch 1 of job 'job-1' is fenced .*epoch 2 on "):
        old.check("publishing checkpoint 3")
    new.check("publishing checkpoint 3")
    opened().prune_driver_epochs(2)
    assert keys(client, bucket) == [f"{PREFIX}/job-1/_drivers/driver-2"]
    assert opened().list_checkpoints() == []  # claims are no checkpoints
