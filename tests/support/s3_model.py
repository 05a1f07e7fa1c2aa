"""An in-memory model of the S3 calls the S3 sink makes (a boto3 ``S3Client`` stand-in).

It keeps S3's multipart rules that matter to exactly-once: parts other than the last are at least
5 MiB, CompleteMultipartUpload needs every listed part's current ETag in ascending part order
(unlisted parts are dropped; numbers need not be contiguous), a completed or aborted upload
answers NoSuchUpload, re-uploading a part number replaces it. Tests inject errors per operation
(:meth:`S3Model.fail`). Real behaviour is covered by the MinIO integration tests.
"""

from __future__ import annotations

import hashlib
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

MIN_PART = 5 * 1024 * 1024


def client_error(code: str, status: int, op: str) -> ClientError:
    """A ClientError as botocore raises it."""
    response: Any = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, op)


@dataclass
class FakeUpload:
    key: str
    parts: dict[int, tuple[bytes, str]] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)


class _Paginator:
    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield self._fn(**kwargs)


class S3Model:
    """The subset of ``S3Client`` the S3 sink uses, in memory, for one or more buckets."""

    def __init__(self, buckets: tuple[str, ...] = ("bucket",)) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.uploads: dict[str, FakeUpload] = {}
        self.completed_uploads: set[str] = set()  # upload ids completed (not aborted)
        self.buckets = set(buckets)
        self.calls: list[str] = []
        self.failures: dict[str, list[BaseException]] = {}
        self._ids = itertools.count(1)

    # --- test controls -------------------------------------------------------------------------

    def fail(self, op: str, *errors: BaseException) -> None:
        """Make the next calls of ``op`` raise ``errors`` in order."""
        self.failures.setdefault(op, []).extend(errors)

    def _enter(self, op: str, bucket: str) -> None:
        self.calls.append(op)
        queued = self.failures.get(op)
        if queued:
            raise queued.pop(0)
        if bucket not in self.buckets:
            raise client_error("NoSuchBucket", 404, op)

    def object_keys(self, bucket: str = "bucket") -> list[str]:
        return sorted(k for b, k in self.objects if b == bucket)

    # --- S3 API --------------------------------------------------------------------------------

    def head_bucket(self, Bucket: str) -> dict[str, Any]:
        self._enter("head_bucket", Bucket)
        return {}

    def create_multipart_upload(self, Bucket: str, Key: str, **kwargs: Any) -> dict[str, Any]:
        self._enter("create_multipart_upload", Bucket)
        upload_id = f"upload-{next(self._ids)}"
        self.uploads[upload_id] = FakeUpload(key=Key, args=kwargs)
        return {"UploadId": upload_id, "Key": Key}

    def upload_part(
        self,
        Bucket: str,
        Key: str,
        UploadId: str,
        PartNumber: int,
        Body: bytes,
        ChecksumAlgorithm: str | None = None,
    ) -> dict[str, Any]:
        self._enter("upload_part", Bucket)
        upload = self.uploads.get(UploadId)
        if upload is None or upload.key != Key:
            raise client_error("NoSuchUpload", 404, "UploadPart")
        # as S3 and MinIO do: an upload created with a checksum algorithm refuses a part without it
        # (botocore before 1.36 sends none unless asked)
        if upload.args.get("ChecksumAlgorithm") not in (None, ChecksumAlgorithm):
            raise client_error("InvalidArgument", 400, "UploadPart")
        etag = '"' + hashlib.md5(Body).hexdigest() + '"'
        upload.parts[PartNumber] = (bytes(Body), etag)
        return {"ETag": etag}

    def complete_multipart_upload(
        self, Bucket: str, Key: str, UploadId: str, MultipartUpload: dict[str, Any]
    ) -> dict[str, Any]:
        self._enter("complete_multipart_upload", Bucket)
        upload = self.uploads.get(UploadId)
        if upload is None or upload.key != Key:
            raise client_error("NoSuchUpload", 404, "CompleteMultipartUpload")
        parts = MultipartUpload["Parts"]
        numbers = [p["PartNumber"] for p in parts]
        if numbers != sorted(set(numbers)):
            raise client_error("InvalidPartOrder", 400, "CompleteMultipartUpload")
        data = io.BytesIO()
        for i, p in enumerate(parts):
            stored = upload.parts.get(p["PartNumber"])
            if stored is None or stored[1] != p["ETag"]:
                raise client_error("InvalidPart", 400, "CompleteMultipartUpload")
            if i < len(parts) - 1 and len(stored[0]) < MIN_PART:
                raise client_error("EntityTooSmall", 400, "CompleteMultipartUpload")
            data.write(stored[0])
        del self.uploads[UploadId]
        self.completed_uploads.add(UploadId)
        self.objects[(Bucket, Key)] = data.getvalue()
        return {"ETag": '"complete"', "Key": Key}

    def abort_multipart_upload(self, Bucket: str, Key: str, UploadId: str) -> dict[str, Any]:
        self._enter("abort_multipart_upload", Bucket)
        if self.uploads.pop(UploadId, None) is None:
            raise client_error("NoSuchUpload", 404, "AbortMultipartUpload")
        return {}

    def put_object(self, Bucket: str, Key: str, Body: bytes, **kwargs: Any) -> dict[str, Any]:
        self._enter("put_object", Bucket)
        self.objects[(Bucket, Key)] = bytes(Body)
        return {"ETag": '"x"'}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self._enter("get_object", Bucket)
        if (Bucket, Key) not in self.objects:
            raise client_error("NoSuchKey", 404, "GetObject")
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self._enter("head_object", Bucket)
        if (Bucket, Key) not in self.objects:
            raise client_error("404", 404, "HeadObject")
        return {"ContentLength": len(self.objects[(Bucket, Key)])}

    def delete_objects(self, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        self._enter("delete_objects", Bucket)
        for obj in Delete["Objects"]:
            self.objects.pop((Bucket, obj["Key"]), None)
        return {}

    def _list_objects_v2(self, Bucket: str, Prefix: str = "") -> dict[str, Any]:
        self._enter("list_objects_v2", Bucket)
        return {
            "Contents": [{"Key": k} for b, k in sorted(self.objects) if b == Bucket and k.startswith(Prefix)]
        }

    def _list_multipart_uploads(self, Bucket: str) -> dict[str, Any]:
        self._enter("list_multipart_uploads", Bucket)
        return {"Uploads": [{"Key": u.key, "UploadId": uid} for uid, u in self.uploads.items()]}

    def _list_parts(self, Bucket: str, Key: str, UploadId: str) -> dict[str, Any]:
        self._enter("list_parts", Bucket)
        upload = self.uploads.get(UploadId)
        if upload is None or upload.key != Key:
            raise client_error("NoSuchUpload", 404, "ListParts")
        parts = [
            {"PartNumber": n, "ETag": etag, "Size": len(b)} for n, (b, etag) in sorted(upload.parts.items())
        ]
        return {"Parts": parts}

    def get_paginator(self, name: str) -> _Paginator:
        fns = {
            "list_parts": self._list_parts,
            "list_objects_v2": self._list_objects_v2,
            "list_multipart_uploads": self._list_multipart_uploads,
        }
        return _Paginator(fns[name])
