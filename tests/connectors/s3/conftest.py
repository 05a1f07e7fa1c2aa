"""Fixtures of the S3 sink unit tests, on the in-memory S3 model (``support.s3_model``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import pytest
from botocore.exceptions import ClientError
from support.s3_model import S3Model, client_error

from twophase.connectors.s3 import S3Sink, S3SinkConfig

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


# --- fixtures ------------------------------------------------------------------------------------


class Clock:
    """A manual wall clock in ms."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def fake() -> S3Model:
    """An empty in-memory S3 with one bucket named ``bucket``."""
    return S3Model()


@pytest.fixture
def clock() -> Clock:
    """A manual clock the sinks made by ``make_sink`` read."""
    return Clock()


@pytest.fixture
def make_sink(fake: S3Model, clock: Clock) -> Callable[..., S3Sink]:
    """``make_sink(name="out", **config_fields)`` → an S3Sink on the fake, with fast retries."""

    def make(name: str = "out", **fields: Any) -> S3Sink:
        fields.setdefault("bucket", "bucket")
        fields.setdefault("prefix", "data/out")
        fields.setdefault("retry_initial_backoff_ms", 1)
        fields.setdefault("retry_max_backoff_ms", 2)
        return S3Sink(
            name, S3SinkConfig(**fields), client_factory=lambda _cfg: cast("S3Client", fake), clock=clock
        )

    return make


@pytest.fixture
def make_error() -> Callable[[str, int, str], ClientError]:
    """``make_error(code, status, op)`` → a botocore ClientError."""
    return client_error
