"""Fixtures of the S3 sink integration tests: a fresh bucket per test on the real ``s3_endpoint``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from support.s3.buckets import fresh_bucket

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
    with fresh_bucket(s3, "s3sink") as name:
        yield name


@pytest.fixture
def make_config(s3_endpoint: S3Endpoint, bucket: str) -> Callable[..., S3SinkConfig]:
    """``make_config(**fields)`` → an S3SinkConfig for ``bucket`` on the test endpoint."""

    def make(**fields: Any) -> S3SinkConfig:
        fields.setdefault("bucket", bucket)
        fields.setdefault("prefix", "warehouse/out")
        fields.setdefault("retry_initial_backoff_ms", 50)
        return s3_endpoint.sink_config(**fields)

    return make
