"""Which IAM action an S3 refusal is about, so that an ``AccessDenied`` reads as what to allow.

A refused request reaches the project in three shapes: a botocore ``ClientError`` (boto3: the S3
sink, checkpoint storage, the Delta sink's deletes), a per-key entry of a ``DeleteObjects``
answer, and the text of an ``OSError`` (pyarrow's S3 file system writing Delta data files;
delta-rs reading and committing the Delta log). Each is turned into
:class:`~twophase.sinks.errors.S3AccessDeniedError` naming the IAM action of the operation (see
:data:`OPERATION_ACTIONS`) and the ``s3://`` key. Nothing secret is in any of them: S3's
answers carry no credentials, and the request URLs in delta-rs's messages are unsigned.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from twophase.sinks.errors import S3AccessDeniedError, TlsCertificateError

OPERATION_ACTIONS: Mapping[str, str] = {
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "CopyObject": "s3:PutObject",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "ListParts": "s3:ListMultipartUploadParts",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "GetBucketLocation": "s3:GetBucketLocation",
}
"""S3 operation → the IAM action that allows it (AWS's documented mapping; MinIO follows it)."""

DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "403"})
"""Error codes of a refusal for lack of permission (``403``: a HEAD, whose answer has no body)."""


def iam_action(operation: str) -> str:
    """The IAM action of an S3 operation (``"ListParts"`` → ``"s3:ListMultipartUploadParts"``);
    an unknown operation gives ``"s3:<operation>"``."""
    return OPERATION_ACTIONS.get(operation, f"s3:{operation}")


def _code(exc: BaseException) -> tuple[str, int]:
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", 0
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def is_access_denied(exc: BaseException) -> bool:
    """Whether ``exc`` is a botocore ``ClientError`` refusing for lack of permission."""
    code, status = _code(exc)
    return code in DENIED_CODES or (status == 403 and code in ("", "Forbidden"))


def access_denied(exc: BaseException, bucket: str, key: str = "") -> S3AccessDeniedError | None:
    """The typed error for a botocore ``ClientError`` that refused for lack of permission, else
    ``None``.

    Args:
        exc: the error.
        bucket: the bucket of the request.
        key: its key, or the prefix of a listing (``""``: the bucket itself).
    """
    if not is_access_denied(exc):
        return None
    code, status = _code(exc)
    operation = str(getattr(exc, "operation_name", "") or "request")
    detail = (
        code
        if code and code != str(status)
        else f"HTTP {status} without a reason: the permission is missing or the credentials are invalid"
    )
    return S3AccessDeniedError(iam_action(operation), s3_uri(bucket, key), operation, detail)


def denied_delete(bucket: str, errors: list[Any], not_sent: Sequence[str] = ()) -> S3AccessDeniedError | None:
    """The typed error for the first per-key ``AccessDenied`` of a ``DeleteObjects`` answer's
    ``Errors``, else ``None``. It lists what is left: every key of ``Errors`` and ``not_sent`` (the
    keys of later batches, never sent)."""
    for entry in errors:
        if isinstance(entry, Mapping) and entry.get("Code") in DENIED_CODES:
            left = [str(e.get("Key", "")) for e in errors if isinstance(e, Mapping)] + list(not_sent)
            return S3AccessDeniedError(
                "s3:DeleteObject",
                s3_uri(bucket, str(entry.get("Key", ""))),
                "DeleteObjects",
                left=tuple(s3_uri(bucket, key) for key in left),
            )
    return None


# pyarrow (AWS SDK for C++): "When <doing> for key 'k' in bucket 'b': AWS Error ACCESS_DENIED
# during <Operation> operation: ..." ("for bucket 'b'" for bucket calls)
_ARROW_DENIED = re.compile(r"AWS Error ACCESS_DENIED during (\w+) operation")
_ARROW_KEY = re.compile(r"key '([^']*)' in bucket '([^']*)'")
_ARROW_BUCKET = re.compile(r"bucket '([^']*)'")
# delta-rs (object_store): "Error performing <METHOD> <url> in ..." after a privileges or
# 403 message
_RS_DENIED = re.compile(r"lacked the necessary privileges|403 Forbidden|AccessDenied")
_RS_REQUEST = re.compile(r"Error performing (GET|PUT|HEAD|DELETE|POST) (\S+)")
_RS_ACTIONS = {
    "PUT": "s3:PutObject",
    "GET": "s3:GetObject",
    "HEAD": "s3:GetObject",
    "DELETE": "s3:DeleteObject",
}


def denied_in_message(exc: BaseException, path_style: bool = True) -> S3AccessDeniedError | None:
    """The typed error for a refusal reported as text by pyarrow's S3 file system or delta-rs,
    else ``None``.

    Args:
        exc: the error (an ``OSError`` or a delta-rs error).
        path_style: delta-rs's URLs put the bucket first in the path (as for MinIO).
    """
    text = str(exc)
    arrow = _ARROW_DENIED.search(text)
    if arrow is not None:
        operation = arrow.group(1)
        keyed = _ARROW_KEY.search(text)
        if keyed is not None:
            uri = s3_uri(keyed.group(2), keyed.group(1))
        else:
            named = _ARROW_BUCKET.search(text)
            uri = s3_uri(named.group(1)) if named is not None else "s3://?"
        return S3AccessDeniedError(iam_action(operation), uri, operation)
    if _RS_DENIED.search(text) is None:
        return None
    request = _RS_REQUEST.search(text)
    if request is None:
        return None
    method, url = request.groups()
    parts = urlsplit(url)
    path = unquote(parts.path).lstrip("/")
    if path_style:
        bucket, _, key = path.partition("/")
    else:
        bucket, key = (parts.hostname or "?").split(".", 1)[0], path
    if method == "GET" and "list-type=2" in parts.query:
        prefix = next((unquote(q[7:]) for q in parts.query.split("&") if q.startswith("prefix=")), "")
        return S3AccessDeniedError("s3:ListBucket", s3_uri(bucket, prefix), "ListObjectsV2")
    if method == "POST" and "delete" in parts.query:
        return S3AccessDeniedError("s3:DeleteObject", s3_uri(bucket, key), "DeleteObjects")
    if method == "POST":
        operation = "CompleteMultipartUpload" if "uploadId" in parts.query else "CreateMultipartUpload"
        return S3AccessDeniedError("s3:PutObject", s3_uri(bucket, key), operation)
    operation = {"PUT": "PutObject", "GET": "GetObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}[
        method
    ]
    return S3AccessDeniedError(_RS_ACTIONS[method], s3_uri(bucket, key), operation)


_CERTIFICATE_REFUSED = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|Hostname mismatch|self[- ]signed certificate"
)
_CERTIFICATE_REASON = re.compile(r"certificate verify failed: ([^(\]]+)")
CA_BUNDLE_ENV = "AWS_CA_BUNDLE"
"""The standard AWS variable naming the CA bundle every boto3 client of the project trusts."""


def certificate_refused(exc: BaseException) -> TlsCertificateError | None:
    """The typed error for a TLS handshake that refused the S3 server's certificate (botocore's
    ``SSLError``: ``CERTIFICATE_VERIFY_FAILED``), else ``None``. Such a refusal is permanent, not
    an outage: the CA the client trusts (``AWS_CA_BUNDLE``) did not sign the server's certificate.
    """
    text = str(exc)
    if _CERTIFICATE_REFUSED.search(text) is None:
        return None
    kwargs: Any = getattr(exc, "kwargs", None)
    url = str(kwargs.get("endpoint_url", "")) if isinstance(kwargs, Mapping) else ""
    parts = urlsplit(url)
    endpoint = f"{parts.scheme}://{parts.netloc}" if parts.netloc else "the S3 endpoint"
    reason = _CERTIFICATE_REASON.search(text)
    detail = "certificate verify failed" + (f": {reason.group(1).strip()}" if reason else "")
    return TlsCertificateError(endpoint, CA_BUNDLE_ENV, os.environ.get(CA_BUNDLE_ENV) or None, detail)


def s3_uri(bucket: str, key: str = "") -> str:
    """``s3://bucket/key`` (``s3://bucket`` for an empty key)."""
    return f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
