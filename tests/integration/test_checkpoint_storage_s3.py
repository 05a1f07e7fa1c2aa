"""S3CheckpointStorage against a real S3 server (MinIO): the checkpoint-storage contract of
DESIGN.md §5 (:class:`support.checkpoint_storage_contract.CheckpointStorageContract`, shared with
Azurite and fake-gcs-server) plus what is S3's own: the server's conditional PUT and a losing final
publish. No mocks.

Each test works in its own fresh bucket, removed afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError
from support.checkpoint_storage_contract import FIN, PREFIX, CheckpointStorageContract, Store
from support.checkpoints import metadata

from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.s3 import S3CheckpointStorage
from twophase.integration.services.s3 import S3Endpoint

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.s3


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


def keys(client: S3Client, bucket: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", ()))


@pytest.fixture
def store(s3_endpoint: S3Endpoint, client: S3Client, bucket: str) -> Store:
    """The bucket; storages opened the way a job opens them: by location, with explicit options."""

    def opened(job_id: str) -> S3CheckpointStorage:
        s = open_storage(f"s3://{bucket}/{PREFIX}", job_id, s3_options=s3_endpoint.s3_options(), env={})
        assert isinstance(s, S3CheckpointStorage)
        return s

    def put_raw(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=key, Body=data)

    return Store(
        f"s3://{bucket}",
        opened,
        lambda: keys(client, bucket),
        put_raw,
        lambda key: client.get_object(Bucket=bucket, Key=key)["Body"].read(),
    )


@pytest.fixture
def storage(store: Store) -> S3CheckpointStorage:
    s = store.open("job-1")
    assert isinstance(s, S3CheckpointStorage)
    return s


class TestS3CheckpointStorage(CheckpointStorageContract):
    """The shared contract on MinIO."""


def test_server_refuses_conditional_overwrite(client: S3Client, bucket: str) -> None:
    """The primitive publish relies on: MinIO answers 412 to If-None-Match: * on an existing key."""
    client.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as info:
        client.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"


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
