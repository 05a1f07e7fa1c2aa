"""A refusal for lack of permission reads as the IAM action to allow and the key (#27 item 5),
whatever client reported it: botocore, a DeleteObjects answer, pyarrow's S3 file system or
delta-rs. The messages are the shapes those clients give (taken from runs against MinIO)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from twophase.connectors.s3 import S3SinkConfig
from twophase.connectors.s3.internal.uploads import S3Ops
from twophase.sinks.errors import ConfigError, S3AccessDeniedError
from twophase.sinks.internal.s3_access import access_denied, denied_delete, denied_in_message, iam_action


def client_error(code: str, status: int, operation: str) -> ClientError:
    body = {
        "Error": {"Code": code, "Message": "Access Denied."},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, operation)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("operation", "action"),
    [
        ("CreateMultipartUpload", "s3:PutObject"),
        ("UploadPart", "s3:PutObject"),
        ("CompleteMultipartUpload", "s3:PutObject"),
        ("HeadObject", "s3:GetObject"),
        ("AbortMultipartUpload", "s3:AbortMultipartUpload"),
        ("ListParts", "s3:ListMultipartUploadParts"),
        ("ListMultipartUploads", "s3:ListBucketMultipartUploads"),
        ("ListObjectsV2", "s3:ListBucket"),
        ("HeadBucket", "s3:ListBucket"),
        ("DeleteObjects", "s3:DeleteObject"),
    ],
)
def test_operations_map_to_their_iam_action(operation: str, action: str) -> None:
    assert iam_action(operation) == action


def test_a_client_error_names_action_and_key() -> None:
    error = access_denied(client_error("AccessDenied", 403, "AbortMultipartUpload"), "bkt", "jobs/a/part-1")
    assert isinstance(error, S3AccessDeniedError) and isinstance(error, ConfigError)
    assert error.action == "s3:AbortMultipartUpload" and error.uri == "s3://bkt/jobs/a/part-1"
    assert str(error).startswith("S3 denied s3:AbortMultipartUpload on s3://bkt/jobs/a/part-1 (")


def test_a_bare_403_says_it_may_be_the_credentials() -> None:
    error = access_denied(client_error("403", 403, "HeadObject"), "bkt", "k")
    assert error is not None and "credentials are invalid" in str(error)


@pytest.mark.parametrize("code", ["NoSuchKey", "SignatureDoesNotMatch", "InvalidAccessKeyId", "SlowDown"])
def test_other_errors_are_not_refusals(code: str) -> None:
    assert (
        access_denied(client_error(code, 403 if "Signature" in code else 404, "GetObject"), "b", "k") is None
    )


def test_a_delete_objects_entry() -> None:
    errors = [{"Key": "p/x", "Code": "NoSuchKey"}, {"Key": "p/tails/1.tail", "Code": "AccessDenied"}]
    error = denied_delete("bkt", errors)
    assert error is not None and error.action == "s3:DeleteObject" and error.uri == "s3://bkt/p/tails/1.tail"
    assert denied_delete("bkt", [{"Key": "p/x", "Code": "InternalError"}]) is None


def test_pyarrow_messages() -> None:
    keyed = OSError(
        "When initiating multiple part upload for key 'jobs/t/part-0.parquet' in bucket 'bkt': AWS Error "
        "ACCESS_DENIED during CreateMultipartUpload operation: Access Denied. (Request ID: 18EB)"
    )
    error = denied_in_message(keyed)
    assert (
        error is not None and error.action == "s3:PutObject" and error.uri == "s3://bkt/jobs/t/part-0.parquet"
    )
    bucket = OSError(
        "When getting information for bucket 'bkt': AWS Error ACCESS_DENIED during HeadBucket operation: "
        "No response body."
    )
    error = denied_in_message(bucket)
    assert error is not None and error.action == "s3:ListBucket" and error.uri == "s3://bkt"
    assert denied_in_message(OSError("AWS Error NETWORK_CONNECTION during HeadObject operation")) is None


def test_delta_rs_messages() -> None:
    get = OSError(
        "Kernel error -> The operation lacked the necessary privileges to complete for path "
        "jobs/t/_delta_log/_last_checkpoint\n  Error performing GET "
        "https://127.0.0.1:9000/bkt/jobs/t/_delta_log/_last_checkpoint in 5ms - Server returned non-2xx"
    )
    error = denied_in_message(get)
    assert error is not None and "\n" not in str(error)
    assert error.action == "s3:GetObject" and error.uri == "s3://bkt/jobs/t/_delta_log/_last_checkpoint"
    listing = OSError(
        "Generic S3 error: Error performing GET "
        "https://127.0.0.1:9000/bkt?list-type=2&prefix=jobs%2Ft%2F_delta_log%2F in 3ms - "
        "Client error with status 403 Forbidden: AccessDenied"
    )
    error = denied_in_message(listing)
    assert (
        error is not None and error.action == "s3:ListBucket" and error.uri == "s3://bkt/jobs/t/_delta_log/"
    )
    put = OSError(
        "Error performing PUT https://127.0.0.1:9000/bkt/jobs/t/_delta_log/00000000000000000001.json in 2ms "
        "- Client error with status 403 Forbidden"
    )
    error = denied_in_message(put)
    assert error is not None and error.action == "s3:PutObject"
    unreachable = OSError("Error performing GET https://127.0.0.1:9000/bkt/k - client error (Connect)")
    assert denied_in_message(unreachable) is None


def test_the_s3_sink_translates_with_the_key() -> None:
    ops = S3Ops(object(), S3SinkConfig(bucket="bucket", prefix="p"))  # type: ignore[arg-type]
    error = ops.translate(client_error("AccessDenied", 403, "UploadPart"), "upload part", "p/part-1.parquet")
    assert isinstance(error, S3AccessDeniedError)
    assert str(error).startswith(
        "S3 denied s3:PutObject on s3://bucket/p/part-1.parquet (UploadPart: AccessDenied)"
    )
    credentials = ops.translate(client_error("InvalidAccessKeyId", 403, "UploadPart"), "upload part", "p/x")
    assert type(credentials) is ConfigError and "check the credentials" in str(credentials)


def test_a_refused_delete_lists_what_it_left() -> None:
    """#45 item 8: a missing s3:DeleteObject left tails in S3 that the user was not told about."""
    errors = [{"Key": f"p/tails/{i}.tail", "Code": "AccessDenied"} for i in range(3)]
    error = denied_delete("bkt", errors, not_sent=[f"p/tails/{i}.tail" for i in range(3, 25)])
    assert error is not None and len(error.left) == 25 and error.left[0] == "s3://bkt/p/tails/0.tail"
    message = str(error)
    assert "\n" not in message
    assert "left behind (25): s3://bkt/p/tails/0.tail, s3://bkt/p/tails/1.tail" in message
    assert "s3://bkt/p/tails/19.tail and 5 more" in message and "20.tail" not in message


def test_a_refused_certificate_is_permanent_and_names_aws_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """#45 item 8: a wrong S3 CA file read as an outage, retried five times, naming neither."""
    from botocore.exceptions import SSLError

    from twophase.connectors.s3.internal.uploads import is_transient
    from twophase.sinks.errors import RefusedError, TlsCertificateError
    from twophase.sinks.internal.s3_access import certificate_refused

    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/other-ca.pem")
    refused = SSLError(
        endpoint_url="https://127.0.0.1:9000/bucket",
        error=Exception(
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate "
            "in certificate chain (_ssl.c:1006)"
        ),
    )
    assert not is_transient(refused)
    error = certificate_refused(refused)
    assert isinstance(error, TlsCertificateError) and isinstance(error, RefusedError)
    assert str(error) == (
        "the TLS certificate of https://127.0.0.1:9000 was not verified with "
        "AWS_CA_BUNDLE=/etc/other-ca.pem: certificate verify failed: self-signed certificate in "
        "certificate chain; set AWS_CA_BUNDLE to a PEM file holding the CA that signed the server's "
        "certificate"
    )
    reset = SSLError(endpoint_url="https://127.0.0.1:9000/b", error=Exception("EOF occurred"))
    assert certificate_refused(reset) is None and is_transient(reset)
