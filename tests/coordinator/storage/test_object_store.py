# mypy: disallow-untyped-calls=False
"""ObjectCheckpointStorage on Azure and GCS request logic against in-memory fakes of each SDK's
client, which answer with the SDK's own exceptions (no service; the real contract is exercised on
Azurite and fake-gcs-server in tests/integration/test_checkpoint_storage_cloud.py).

Covers what a healthy emulator cannot show: the S3 backend's twelve exits of a publish
(tests/coordinator/storage/test_s3_unit.py), each mapped to the answers Azure and GCS give, and
the classification of every answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.identity import CredentialUnavailableError
from azure.storage.blob import StorageErrorCode
from google.api_core import exceptions as api
from google.auth import exceptions as auth
from support.checkpoints import NOT_PUBLISHED, PUBLISHED, UNKNOWN, publish_exit

from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage import azure_blob, gcs
from twophase.coordinator.storage.committable_files import encode
from twophase.coordinator.storage.object_store import (
    ObjectCheckpointStorage,
    ObjectExists,
    ObjectMissing,
    StoreRefused,
    TransientStoreError,
)
from twophase.sinks.errors import (
    CheckpointStorageError,
    ConfigError,
)

MakeMeta = Callable[..., CheckpointMetadata]
KEY = "pre/job-1/chk-2/_metadata"


def _azure_error(
    cls: type[HttpResponseError], status: int, code: str | StorageErrorCode
) -> HttpResponseError:
    error = cls(message=f"{status} {code}\nRequestId:abc\nErrorCode:{code}")
    error.status_code = status
    error.error_code = code  # type: ignore[attr-defined]  # what the blob SDK sets
    return error


#: the answers each service gives, by what they mean
AZURE: dict[str, Callable[[], BaseException]] = {
    "transient": lambda: _azure_error(HttpResponseError, 503, "ServerBusy"),
    "refused": lambda: _azure_error(HttpResponseError, 403, "AuthorizationPermissionMismatch"),
    "exists": lambda: _azure_error(ResourceExistsError, 409, "BlobAlreadyExists"),
    "missing": lambda: _azure_error(ResourceNotFoundError, 404, "BlobNotFound"),
}
GCS: dict[str, Callable[[], BaseException]] = {
    "transient": lambda: api.ServiceUnavailable("backend error"),
    "refused": lambda: api.Forbidden("caller does not have storage.objects.create access"),
    "exists": lambda: api.PreconditionFailed("conditionNotMet"),
    "missing": lambda: api.NotFound("No such object"),
}


class Script:
    """Objects in memory, and per operation a queue of answers to give before behaving normally."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.queued: dict[str, list[BaseException | bytes]] = {}
        self.calls: list[tuple[str, str]] = []

    def answer(self, op: str, key: str) -> bytes | None:
        self.calls.append((op, key))
        queue = self.queued.get(op) or []
        if queue:
            answer = queue.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        return None


class FakeAzureBlob:
    def __init__(self, script: Script, key: str, errors: dict[str, Callable[[], BaseException]]) -> None:
        self.script, self.key, self.errors = script, key, errors

    def upload_blob(self, data: bytes, overwrite: bool, content_settings: Any = None) -> None:
        self.script.answer("create" if not overwrite else "put", self.key)
        if not overwrite and self.key in self.script.objects:
            raise self.errors["exists"]()
        self.script.objects[self.key] = data

    def download_blob(self) -> Any:
        queued = self.script.answer("get", self.key)
        data = queued if queued is not None else self.script.objects.get(self.key)
        if data is None:
            raise self.errors["missing"]()
        return type("Downloader", (), {"readall": lambda _self: data})()

    def get_blob_properties(self) -> None:
        self.script.answer("exists", self.key)
        if self.key not in self.script.objects:
            raise self.errors["missing"]()

    def delete_blob(self, delete_snapshots: str) -> None:
        self.script.answer("delete", self.key)
        if self.script.objects.pop(self.key, None) is None:
            raise self.errors["missing"]()


class FakeContainerClient:
    def __init__(self, script: Script) -> None:
        self.script = script

    def get_blob_client(self, key: str) -> FakeAzureBlob:
        return FakeAzureBlob(self.script, key, AZURE)

    def list_blob_names(self, name_starts_with: str) -> list[str]:
        self.script.answer("list", name_starts_with)
        return sorted(k for k in self.script.objects if k.startswith(name_starts_with))


class FakeGcsBlob:
    def __init__(self, script: Script, name: str) -> None:
        self.script, self.name = script, name

    def upload_from_string(self, data: bytes, if_generation_match: int | None = None, **_: Any) -> None:
        self.script.answer("create" if if_generation_match == 0 else "put", self.name)
        if if_generation_match == 0 and self.name in self.script.objects:
            raise GCS["exists"]()
        self.script.objects[self.name] = data

    def download_as_bytes(self, **_: Any) -> bytes:
        queued = self.script.answer("get", self.name)
        data = queued if queued is not None else self.script.objects.get(self.name)
        if data is None:
            raise GCS["missing"]()
        return data

    def delete(self, **_: Any) -> None:
        self.script.answer("delete", self.name)
        if self.script.objects.pop(self.name, None) is None:
            raise GCS["missing"]()


class FakeGcsBucket:
    def __init__(self, script: Script) -> None:
        self.script = script

    def blob(self, name: str) -> FakeGcsBlob:
        return FakeGcsBlob(self.script, name)

    def get_blob(self, name: str, **_: Any) -> FakeGcsBlob | None:
        self.script.answer("exists", name)
        return FakeGcsBlob(self.script, name) if name in self.script.objects else None


class FakeGcsClient:
    def __init__(self, script: Script) -> None:
        self.script = script

    def bucket(self, name: str) -> FakeGcsBucket:
        return FakeGcsBucket(self.script)

    def list_blobs(self, bucket: str, prefix: str, **_: Any) -> list[FakeGcsBlob]:
        self.script.answer("list", prefix)
        return [FakeGcsBlob(self.script, k) for k in sorted(self.script.objects) if k.startswith(prefix)]


SERVICES = ["azure", "gcs"]


def _storage(service: str, script: Script) -> ObjectCheckpointStorage:
    if service == "azure":
        location = azure_blob.parse_location("abfss://ckpt@acct.dfs.core.windows.net/pre")
        client: Any = FakeContainerClient(script)
        store: Any = azure_blob.AzureBlobStore(location, client, azure_blob.AzureStorageOptions())
    else:
        store = gcs.GcsStore(FakeGcsClient(script), "ckpt")
    return ObjectCheckpointStorage(store, "/pre/", "job-1", retry_attempts=3, retry_max_wait_s=0)


def _answers(service: str) -> dict[str, Callable[[], BaseException]]:
    return AZURE if service == "azure" else GCS


#: the S3 backend's exits (test_s3_unit.PUT_EXITS): creates answered in order, then read-backs
PUT_EXITS: dict[str, tuple[list[str], list[str | bytes], str]] = {
    "the create succeeds": ([], [], PUBLISHED),
    "retried, then it succeeds": (["transient"], [], PUBLISHED),
    "refused for good at once": (["refused"], [], NOT_PUBLISHED),
    "exists at once: another writer's": (["exists"], [], NOT_PUBLISHED),
    "the container or bucket is missing": (["missing"], [], NOT_PUBLISHED),
    "every attempt failed transiently": (["transient"] * 3, [], UNKNOWN),
    "refused for good after a transient failure": (["transient", "refused"], [], UNKNOWN),
    "exists after a retry, ours": (["transient", "exists"], [b"ours"], PUBLISHED),
    "exists after a retry, not ours": (["transient", "exists"], [b'{"other": 1}'], NOT_PUBLISHED),
    "exists after a retry, read-back keeps failing": (["transient", "exists"], ["transient"] * 3, UNKNOWN),
    "exists after a retry, read-back refused": (["transient", "exists"], ["refused"], UNKNOWN),
    "exists after a retry, the object is gone": (["transient", "exists"], ["missing"], UNKNOWN),
    "an answer nobody can read": (["unreadable"], [], UNKNOWN),
}


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("case", sorted(PUT_EXITS))
def test_every_exit_of_publish_is_published_not_published_or_unknown(
    service: str, case: str, make_meta: MakeMeta
) -> None:
    """Issue #46: the S3 backend's exits, with each service's own answers."""
    meta = make_meta(2)
    script = Script()
    storage = _storage(service, script)
    creates, reads, want = PUT_EXITS[case]
    answers = _answers(service)
    # the committable file's create succeeds (b""), then the manifest's answers as scripted
    script.queued["create"] = [
        b"",
        *(RuntimeError("?") if a == "unreadable" else answers[a]() for a in creates),
    ]
    manifest = encode(meta, storage.writer.run, 0).manifest
    script.queued["get"] = [
        manifest if r == b"ours" else r if isinstance(r, bytes) else answers[r]() for r in reads
    ]
    assert publish_exit(lambda: storage.publish(meta)) == want


@pytest.mark.parametrize("service", SERVICES)
def test_publish_exits_before_the_create_are_not_published(service: str, make_meta: MakeMeta) -> None:
    script = Script()
    storage = _storage(service, script)
    meta = make_meta(2)
    assert publish_exit(lambda: storage.publish(make_meta(2, job_id="other"))) == NOT_PUBLISHED
    script.queued["exists"] = [_answers(service)["transient"]() for _ in range(3)]
    assert publish_exit(lambda: storage.publish(meta)) == NOT_PUBLISHED
    script.queued["exists"] = [_answers(service)["refused"]()]
    assert publish_exit(lambda: storage.publish(meta)) == NOT_PUBLISHED
    assert not any(op == "create" for op, _ in script.calls)


@pytest.mark.parametrize("service", SERVICES)
def test_a_publish_is_one_conditional_create_after_the_checks(service: str, make_meta: MakeMeta) -> None:
    script = Script()
    storage = _storage(service, script)
    ref = storage.publish(make_meta(2))
    assert script.calls == [
        ("exists", KEY),
        ("exists", "pre/job-1/savepoints/sp-2/_metadata"),
        ("delete", "pre/job-1/chk-2/_final"),  # a stale marker of a crashed final publish
        ("create", f"pre/job-1/chk-2/committables-1-{storage.writer.run}-0.arrow"),  # durable first
        ("create", KEY),
    ]
    assert ref.location.endswith(KEY)
    assert storage.latest() == make_meta(2)


@pytest.mark.parametrize("service", SERVICES)
def test_transient_reads_are_retried_and_then_a_storage_error_not_corruption(
    service: str, make_meta: MakeMeta
) -> None:
    script = Script()
    storage = _storage(service, script)
    ref = storage.publish(make_meta(2))
    script.queued["get"] = [_answers(service)["transient"]()]
    assert storage.load(ref) == make_meta(2)
    script.queued["get"] = [_answers(service)["transient"]() for _ in range(3)]
    with pytest.raises(CheckpointStorageError, match="after 3 attempts") as info:
        storage.load(ref)
    assert type(info.value) is CheckpointStorageError


@pytest.mark.parametrize("service", SERVICES)
def test_a_refused_driver_claim_is_a_storage_error(service: str) -> None:
    script = Script()
    storage = _storage(service, script)
    script.queued["create"] = [_answers(service)["refused"]()]
    with pytest.raises(CheckpointStorageError, match="cannot claim driver epoch 1"):
        storage.create_driver_epoch(1, b"me")
    assert storage.create_driver_epoch(1, b"me")
    assert not storage.create_driver_epoch(1, b"another driver")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (_azure_error(ResourceExistsError, 409, "BlobAlreadyExists"), ObjectExists),
        (_azure_error(ResourceModifiedError, 412, StorageErrorCode.CONDITION_NOT_MET), ObjectExists),
        (_azure_error(HttpResponseError, 409, StorageErrorCode.BLOB_ALREADY_EXISTS), ObjectExists),
        (_azure_error(ResourceNotFoundError, 404, "ContainerNotFound"), ObjectMissing),
        (_azure_error(HttpResponseError, 500, "InternalError"), TransientStoreError),
        (_azure_error(HttpResponseError, 503, "ServerBusy"), TransientStoreError),
        (_azure_error(HttpResponseError, 429, ""), TransientStoreError),
        (_azure_error(HttpResponseError, 408, "OperationTimedOut"), TransientStoreError),
        (ServiceRequestError("connection refused"), TransientStoreError),
        (ServiceResponseError("connection reset"), TransientStoreError),
        (_azure_error(ClientAuthenticationError, 403, "AuthenticationFailed"), StoreRefused),
        (_azure_error(HttpResponseError, 403, "AuthorizationPermissionMismatch"), StoreRefused),
        (CredentialUnavailableError("DefaultAzureCredential failed to retrieve a token"), StoreRefused),
        (_azure_error(HttpResponseError, 400, "InvalidHeaderValue"), StoreRefused),
        (_azure_error(HttpResponseError, 409, "ContainerBeingDeleted"), StoreRefused),
    ],
)
def test_azure_answers_are_classified(error: BaseException, kind: type) -> None:
    mapped = azure_blob.classify(error)
    assert type(mapped) is kind
    assert "\n" not in str(mapped)


def test_azure_refusals_name_the_role_and_the_settings() -> None:
    denied = str(azure_blob.classify(_azure_error(HttpResponseError, 403, "AuthorizationPermissionMismatch")))
    assert "Storage Blob Data Contributor" in denied and "AZURE_STORAGE_SAS_TOKEN" in denied
    nothing = str(azure_blob.classify(CredentialUnavailableError("no identity")))
    assert "no Azure credential could be obtained" in nothing and "DefaultAzureCredential" in nothing
    assert azure_blob.classify(ValueError("?")) is None


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (api.PreconditionFailed("conditionNotMet"), ObjectExists),
        (api.Conflict("conflict"), ObjectExists),
        (api.NotFound("No such object"), ObjectMissing),
        (api.TooManyRequests("rate"), TransientStoreError),
        (api.InternalServerError("backend"), TransientStoreError),
        (api.BadGateway("gw"), TransientStoreError),
        (api.ServiceUnavailable("busy"), TransientStoreError),
        (api.GatewayTimeout("slow"), TransientStoreError),
        (api.from_http_status(408, "slow"), TransientStoreError),
        (requests.ConnectionError("refused"), TransientStoreError),
        (requests.Timeout("read timed out"), TransientStoreError),
        (auth.TransportError("metadata server"), TransientStoreError),
        (api.Forbidden("denied"), StoreRefused),
        (api.Unauthorized("who"), StoreRefused),
        (auth.RefreshError("invalid_grant"), StoreRefused),
        (auth.DefaultCredentialsError("none found"), StoreRefused),
        (api.BadRequest("bad"), StoreRefused),
    ],
)
def test_gcs_answers_are_classified(error: BaseException, kind: type) -> None:
    mapped = gcs.classify(error)
    assert type(mapped) is kind
    assert "\n" not in str(mapped)


def test_gcs_refusals_name_the_role_and_the_settings() -> None:
    denied = str(gcs.classify(api.Forbidden("denied")))
    assert "roles/storage.objectUser" in denied and "GOOGLE_APPLICATION_CREDENTIALS" in denied
    assert gcs.classify(ValueError("?")) is None


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("abfs://c@acct.dfs.core.windows.net/x", "TLS"),
        ("wasb://c@acct.blob.core.windows.net/x", "TLS"),
        ("abfss://acct.dfs.core.windows.net/x", "needs a container"),
        ("abfss://c@/x", "needs a container"),
        ("s3://b/x", "not an abfss"),
    ],
)
def test_bad_azure_locations_are_refused(location: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        azure_blob.parse_location(location)


def test_azure_locations_reach_the_blob_endpoint_of_their_account() -> None:
    adls = azure_blob.parse_location("abfss://fs@acct.dfs.core.windows.net/a/b")
    assert (adls.container, adls.account, adls.path) == ("fs", "acct", "a/b")
    assert adls.blob_url == "https://acct.blob.core.windows.net"
    china = azure_blob.parse_location("wasbs://c@acct.blob.core.chinacloudapi.cn/")
    assert china.blob_url == "https://acct.blob.core.chinacloudapi.cn"


def test_azure_credentials_come_from_the_environment_unless_given_and_stay_out_of_reprs() -> None:
    env = {"AZURE_STORAGE_KEY": "a2V5", "AZURE_STORAGE_SAS_TOKEN": "sv=1&sig=secret"}
    resolved = azure_blob.AzureStorageOptions().resolved(env)
    assert (resolved.account_key, resolved.sas_token) == ("a2V5", "sv=1&sig=secret")
    given = azure_blob.AzureStorageOptions(sas_token="sig=mine").resolved(env)
    assert (given.account_key, given.sas_token) == (None, "sig=mine")
    assert "secret" not in repr(resolved) and "a2V5" not in repr(resolved)


def test_an_azure_connection_string_of_another_account_is_refused() -> None:
    location = azure_blob.parse_location("abfss://c@acct.dfs.core.windows.net/x")
    options = azure_blob.AzureStorageOptions(
        connection_string="AccountName=other;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:1/other"
    )
    with pytest.raises(ConfigError, match="connection string is for account 'other'"):
        azure_blob.open_container(location, options)


def test_gcs_options_take_the_emulator_and_project_from_the_environment() -> None:
    env = {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443", "GOOGLE_CLOUD_PROJECT": "p"}
    resolved = gcs.GcsStorageOptions().resolved(env)
    assert (resolved.emulator_host, resolved.project) == ("http://127.0.0.1:4443", "p")
    store = gcs.open_bucket("b", resolved)
    assert store.uri("k") == "gs://b/k"
    with pytest.raises(ConfigError, match="not a gs://bucket"):
        gcs.parse_location("gs:///x")
