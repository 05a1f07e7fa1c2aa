"""Checkpoint storage on Azure Blob Storage (Azurite) and Google Cloud Storage (fake-gcs-server):
the contract of DESIGN.md §5 (:class:`support.checkpoint_storage_contract.CheckpointStorageContract`,
the cases tests/integration/test_checkpoint_storage_s3.py runs on MinIO), plus two drivers
publishing one id at once, credentials kept out of reprs and a wrong Azure key. No mocks (issue #46).

Each test works in its own fresh container or bucket. Raw objects are read and written with each
service's own SDK, not with the storage under test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.azure_container import fresh_container
from support.checkpoint_storage_contract import PREFIX, CheckpointStorageContract, Store, race
from support.checkpoints import metadata

from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions, open_storage
from twophase.coordinator.storage.committable_files import encode
from twophase.coordinator.storage.object_store import ObjectCheckpointStorage
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.integration.services.gcs_server import GcsEndpoint
from twophase.sinks.errors import CheckpointNotPublishedError


def _azure(endpoint: AzureBlobEndpoint) -> Iterator[Store]:
    with fresh_container(endpoint, "ckpt") as c:

        def opened(job_id: str) -> ObjectCheckpointStorage:
            s = open_storage(f"{c.root}/{PREFIX}", job_id, azure_options=c.options, env={})
            assert isinstance(s, ObjectCheckpointStorage)
            return s

        yield Store(
            c.root,
            opened,
            lambda: sorted(c.client.list_blob_names()),
            lambda key, data: c.client.upload_blob(key, data, overwrite=True),
            lambda key: c.client.download_blob(key).readall(),
        )


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


class TestCloudCheckpointStorage(CheckpointStorageContract):
    """The shared contract on Azurite and fake-gcs-server (``store`` is parametrized)."""


def test_two_drivers_publishing_one_id_at_once_exactly_one_wins(store: Store) -> None:
    for cid in range(1, 6):
        candidates = [metadata(cid, partitions=1), metadata(cid, partitions=3)]
        drivers = [store.open("job-1"), store.open("job-1")]
        outcomes = race(drivers, candidates)
        assert sorted(outcomes) == ["not published", "published"], outcomes
        won = outcomes.index("published")
        winner = candidates[won]
        manifest = encode(winner, drivers[won].writer.run, 0).manifest
        assert store.get_raw(f"{PREFIX}/job-1/chk-{cid}/_metadata") == manifest
        assert store.open("job-1").latest() == winner


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
