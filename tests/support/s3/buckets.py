"""A fresh S3 bucket for one test on a real S3 server (MinIO), emptied and removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@contextmanager
def fresh_bucket(s3: S3Client, prefix: str) -> Iterator[str]:
    """A new bucket named ``<prefix>-<12 hex digits>``; afterwards its pending multipart uploads
    are aborted, its objects deleted and the bucket removed (what a sink left goes with it)."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield name
    for upload in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)
