"""Fixtures of the S3 sink integration tests: a fresh bucket per test on the real ``s3_endpoint``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from twophase.connectors.s3 import S3SinkConfig
from twophase.integration.services import S3Endpoint

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@pytest.fixture
def s3(s3_endpoint: S3Endpoint) -> S3Client:
    """A plain boto3 client for checks (listing, reading back)."""
    return s3_endpoint.boto3_client()


@pytest.fixture
def bucket(s3: S3Client) -> Iterator[str]:
    """A fresh, empty bucket, emptied (uploads aborted, objects deleted) and removed afterwards."""
    name = f"s3sink-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield name
    for upload in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def make_config(s3_endpoint: S3Endpoint, bucket: str) -> Callable[..., S3SinkConfig]:
    """``make_config(**fields)`` → an S3SinkConfig for ``bucket`` on the test endpoint."""

    def make(**fields: Any) -> S3SinkConfig:
        fields.setdefault("bucket", bucket)
        fields.setdefault("prefix", "warehouse/out")
        fields.setdefault("retry_initial_backoff_ms", 50)
        return s3_endpoint.sink_config(**fields)

    return make
