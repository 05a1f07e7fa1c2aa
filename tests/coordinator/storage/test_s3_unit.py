"""S3CheckpointStorage request logic against botocore's Stubber (no service; the real contract is
exercised against MinIO in tests/integration/test_checkpoint_storage_s3.py).

Covers what a healthy server cannot show: transient-error retries, and a conditional PUT that
answers 412 because our own earlier attempt had landed.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import Stubber
from support.checkpoints import NOT_PUBLISHED, PUBLISHED, UNKNOWN, publish_exit

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import FILE_MEDIA_TYPE, encode
from twophase.coordinator.storage.s3 import S3CheckpointStorage, is_transient
from twophase.sinks.errors import (
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    ConfigError,
    CorruptCheckpointError,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MakeMeta = Callable[..., CheckpointMetadata]
KEY = "pre/job-1/chk-2/_metadata"
RUN = "0badc0de"


def _manifest(meta: CheckpointMetadata) -> bytes:
    """The ``_metadata`` bytes the first publish of ``meta`` writes (format v3)."""
    return encode(meta, RUN, 0).manifest


@pytest.fixture
def client() -> S3Client:
    return boto3.client("s3", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")


@pytest.fixture
def stub(client: S3Client) -> Iterator[Stubber]:
    with Stubber(client) as s:
        yield s
        s.assert_no_pending_responses()


@pytest.fixture
def storage(client: S3Client) -> S3CheckpointStorage:
    s = S3CheckpointStorage("bkt", "/pre/", "job-1", client, retry_attempts=3, retry_max_wait_s=0)
    s.writer.run = RUN  # the driver run naming its committable files, fixed for exact requests
    return s


def _not_found(stub: Stubber, key: str) -> None:
    stub.add_client_error(
        "head_object", "404", http_status_code=404, expected_params={"Bucket": "bkt", "Key": key}
    )


def _body(data: bytes) -> dict[str, Any]:
    return {"Body": StreamingBody(io.BytesIO(data), len(data))}


def _expect_publish_prelude(stub: Stubber, meta: CheckpointMetadata) -> None:
    """The existence checks, the stale final marker's delete, then the committable files'
    conditional PUTs (format v3: durable before the manifest names them)."""
    _not_found(stub, KEY)
    _not_found(stub, "pre/job-1/savepoints/sp-2/_metadata")
    stub.add_response("delete_object", {}, {"Bucket": "bkt", "Key": "pre/job-1/chk-2/_final"})
    for name, data in encode(meta, RUN, 0).files:
        params = {"Bucket": "bkt", "Key": f"pre/job-1/chk-2/{name}", "Body": data, "IfNoneMatch": "*"}
        stub.add_response("put_object", {}, {**params, "ContentType": FILE_MEDIA_TYPE})


def _put_params(data: bytes) -> dict[str, Any]:
    return {"Bucket": "bkt", "Key": KEY, "Body": data, "IfNoneMatch": "*", "ContentType": "application/zlib"}


def test_publish_is_a_conditional_put(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    stub.add_response("put_object", {}, _put_params(_manifest(meta)))
    assert storage.publish(meta) == CheckpointRef(2, CheckpointKind.CHECKPOINT, f"s3://bkt/{KEY}")


def test_precondition_failed_means_the_id_exists(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    _expect_publish_prelude(stub, make_meta(2))
    stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412)
    with pytest.raises(CheckpointStorageError, match=f"exists already: s3://bkt/{KEY}"):
        storage.publish(make_meta(2))


def test_transient_errors_are_retried(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    stub.add_client_error("put_object", "SlowDown", http_status_code=503)
    stub.add_client_error("put_object", "InternalError", http_status_code=500)
    stub.add_response("put_object", {}, _put_params(_manifest(meta)))
    assert storage.publish(meta).checkpoint_id == 2


@pytest.mark.parametrize(("existing_is_ours", "succeeds"), [(True, True), (False, False)])
def test_412_after_a_retry_is_resolved_by_reading_back(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta, existing_is_ours: bool, succeeds: bool
) -> None:
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    # the first PUT landed but its answer was lost; the retry meets our own object
    stub.add_client_error("put_object", "ServiceUnavailable", http_status_code=503)
    stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412)
    existing = _manifest(meta) if existing_is_ours else b'{"other": 1}'
    stub.add_response("get_object", _body(existing), {"Bucket": "bkt", "Key": KEY})
    if succeeds:
        assert storage.publish(meta).checkpoint_id == 2
    else:
        with pytest.raises(CheckpointStorageError, match="exists already"):
            storage.publish(meta)


def test_retries_exhausted_is_a_storage_error_not_corruption(
    stub: Stubber, storage: S3CheckpointStorage
) -> None:
    for _ in range(3):
        stub.add_client_error("get_object", "SlowDown", http_status_code=503)
    ref = CheckpointRef(2, CheckpointKind.CHECKPOINT, f"s3://bkt/{KEY}")
    with pytest.raises(CheckpointStorageError, match="failed after 3 attempts") as info:
        storage.load(ref)
    assert not isinstance(info.value, CorruptCheckpointError)


def test_corrupt_object_names_the_uri(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    stub.add_response("get_object", _body(_manifest(make_meta(2))[:40]), {"Bucket": "bkt", "Key": KEY})
    with pytest.raises(CorruptCheckpointError, match=f"s3://bkt/{KEY}"):
        storage.load(CheckpointRef(2, CheckpointKind.CHECKPOINT, "ignored"))


def test_listing_parses_keys_numerically(stub: Stubber, storage: S3CheckpointStorage) -> None:
    keys = [
        "pre/job-1/chk-10/_metadata",
        "pre/job-1/chk-9/_metadata",
        "pre/job-1/chk-11/_final",
        "pre/job-1/chk-11/_metadata",
        "pre/job-1/chk-12/_final",  # crashed final publish: not visible
        "pre/job-1/savepoints/sp-3/_metadata",
        "pre/job-1/chk-012/_metadata",
        "pre/job-1/other/_metadata",
    ]
    stub.add_response(
        "list_objects_v2",
        {"Contents": [{"Key": k} for k in keys], "IsTruncated": False},
        {"Bucket": "bkt", "Prefix": "pre/job-1/"},
    )
    assert [(r.checkpoint_id, r.kind.value) for r in storage.list_checkpoints()] == [
        (3, "savepoint"),
        (9, "checkpoint"),
        (10, "checkpoint"),
        (11, "final"),
    ]


def test_is_transient_classification() -> None:
    def err(code: str, status: int) -> ClientError:
        response: Any = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(response, "Op")

    assert is_transient(EndpointConnectionError(endpoint_url="http://x"))
    assert is_transient(ReadTimeoutError(endpoint_url="http://x"))
    assert is_transient(err("SlowDown", 503))
    assert is_transient(err("Whatever", 502))
    assert is_transient(err("TooManyRequests", 429))
    assert is_transient(err("ConditionalRequestConflict", 409))
    for code, status in [
        ("PreconditionFailed", 412),
        ("NoSuchKey", 404),
        ("AccessDenied", 403),
        ("NotImplemented", 501),
    ]:
        assert not is_transient(err(code, status))
    assert not is_transient(ValueError("x"))


@pytest.mark.parametrize(
    ("bucket", "prefix", "job_id"),
    [("", "p", "j"), ("b/c", "p", "j"), ("b", "a/../b", "j"), ("b", "p", "a/b")],
)
def test_bad_configuration_refused(client: S3Client, bucket: str, prefix: str, job_id: str) -> None:
    with pytest.raises(ConfigError):
        S3CheckpointStorage(bucket, prefix, job_id, client)


def test_listing_follows_pagination(stub: Stubber, storage: S3CheckpointStorage) -> None:
    first = {"Bucket": "bkt", "Prefix": "pre/job-1/"}
    page1 = {"Contents": [{"Key": "pre/job-1/chk-1/_metadata"}], "IsTruncated": True}
    page1["NextContinuationToken"] = "t"
    page2 = {"Contents": [{"Key": "pre/job-1/chk-2/_metadata"}], "IsTruncated": False}
    stub.add_response("list_objects_v2", page1, first)
    stub.add_response("list_objects_v2", page2, {**first, "ContinuationToken": "t"})
    assert [r.checkpoint_id for r in storage.list_checkpoints()] == [1, 2]


def test_server_without_conditional_writes_fails_clearly(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    _expect_publish_prelude(stub, make_meta(2))
    stub.add_client_error("put_object", "NotImplemented", http_status_code=501)
    with pytest.raises(CheckpointStorageError, match="must support conditional writes"):
        storage.publish(make_meta(2))


def test_a_put_whose_retries_all_failed_transiently_has_an_unknown_outcome(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    """#14 scenario 4: any of the attempts may have landed while only its answer was lost."""
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    for _ in range(3):
        stub.add_client_error("put_object", "InternalError", http_status_code=500)
    with pytest.raises(CheckpointPublishUnknownError, match="may have landed"):
        storage.publish(meta)


def test_a_put_refused_for_good_is_a_plain_failure(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    stub.add_client_error("put_object", "AccessDenied", http_status_code=403)
    with pytest.raises(CheckpointStorageError) as info:
        storage.publish(meta)
    assert not isinstance(info.value, CheckpointPublishUnknownError)


def test_a_412_after_a_retry_whose_read_back_keeps_failing_has_an_unknown_outcome(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    """#26 item 1 (seen on MinIO): the first PUT lands but is answered with an error, the retry
    gets 412, and the read-back that decides "is it ours?" keeps failing. That was a plain
    CheckpointStorageError: the coordinator aborted the transactions of a visible checkpoint."""
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    stub.add_client_error("put_object", "InternalError", http_status_code=500)
    stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412)
    for _ in range(3):
        stub.add_client_error("get_object", "SlowDown", http_status_code=503)
    with pytest.raises(CheckpointPublishUnknownError):
        storage.publish(meta)


def _ok_put(stub: Stubber, meta: CheckpointMetadata) -> None:
    stub.add_response("put_object", {}, _put_params(_manifest(meta)))


def _errors(*codes: tuple[str, int]) -> Callable[[Stubber, CheckpointMetadata], None]:
    def script(stub: Stubber, meta: CheckpointMetadata) -> None:
        for code, status in codes:
            stub.add_client_error("put_object", code, http_status_code=status)

    return script


def _then(
    *scripts: Callable[[Stubber, CheckpointMetadata], None],
) -> Callable[[Stubber, CheckpointMetadata], None]:
    def script(stub: Stubber, meta: CheckpointMetadata) -> None:
        for each in scripts:
            each(stub, meta)

    return script


def _retry_412_then_read(*reads: bytes | tuple[str, int]) -> Callable[[Stubber, CheckpointMetadata], None]:
    def script(stub: Stubber, meta: CheckpointMetadata) -> None:
        stub.add_client_error("put_object", "ServiceUnavailable", http_status_code=503)
        stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412)
        for read in reads:
            if isinstance(read, bytes):
                body = _manifest(meta) if read == b"ours" else read
                stub.add_response("get_object", _body(body), {"Bucket": "bkt", "Key": KEY})
            else:
                stub.add_client_error("get_object", read[0], http_status_code=read[1])

    return script


PUT_EXITS = {
    "the PUT succeeds": (_ok_put, PUBLISHED),
    "retried, then it succeeds": (
        _then(_errors(("SlowDown", 503)), _ok_put),
        PUBLISHED,
    ),
    "refused for good at once": (_errors(("AccessDenied", 403)), NOT_PUBLISHED),
    "no conditional writes": (_errors(("NotImplemented", 501)), NOT_PUBLISHED),
    "412 at once: another writer's": (_errors(("PreconditionFailed", 412)), NOT_PUBLISHED),
    "every attempt failed transiently": (_errors(*[("InternalError", 500)] * 3), UNKNOWN),
    "refused for good after a transient failure": (
        _errors(("InternalError", 500), ("AccessDenied", 403)),
        UNKNOWN,
    ),
    "412 after a retry, ours": (_retry_412_then_read(b"ours"), PUBLISHED),
    "412 after a retry, not ours": (_retry_412_then_read(b'{"other": 1}'), NOT_PUBLISHED),
    "412 after a retry, read-back keeps failing": (
        _retry_412_then_read(*[("SlowDown", 503)] * 3),
        UNKNOWN,
    ),
    "412 after a retry, read-back refused": (_retry_412_then_read(("AccessDenied", 403)), UNKNOWN),
    "412 after a retry, the object is gone": (_retry_412_then_read(("NoSuchKey", 404)), UNKNOWN),
}


@pytest.mark.parametrize("case", sorted(PUT_EXITS))
def test_every_exit_of_publish_is_published_not_published_or_unknown(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta, case: str
) -> None:
    """#26 item 1: every way out of publish is one of three, and each means what it says; any
    other error escaping would be treated as unknown by the coordinator."""
    meta = make_meta(2)
    _expect_publish_prelude(stub, make_meta(2))
    script, want = PUT_EXITS[case]
    script(stub, meta)
    assert publish_exit(lambda: storage.publish(meta)) == want


def test_publish_exits_before_the_put_are_not_published(
    stub: Stubber, storage: S3CheckpointStorage, make_meta: MakeMeta
) -> None:
    meta = make_meta(2)
    assert publish_exit(lambda: storage.publish(make_meta(2, job_id="other"))) == NOT_PUBLISHED  # wrong job
    stub.add_response("head_object", {}, {"Bucket": "bkt", "Key": KEY})  # the id exists
    assert publish_exit(lambda: storage.publish(meta)) == NOT_PUBLISHED
    for _ in range(3):  # the existence check keeps failing
        stub.add_client_error("head_object", "SlowDown", http_status_code=503)
    assert publish_exit(lambda: storage.publish(meta)) == NOT_PUBLISHED
    _not_found(stub, KEY)
    _not_found(stub, "pre/job-1/savepoints/sp-2/_metadata")
    stub.add_client_error("delete_object", "AccessDenied", http_status_code=403)  # the stale marker
    assert publish_exit(lambda: storage.publish(meta)) == NOT_PUBLISHED
