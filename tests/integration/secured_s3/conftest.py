"""Fixtures of the secured-S3 tests (#27 items 5 and 6): a native MinIO over TLS with a CA made at
start-up, reached through ``AWS_CA_BUNDLE``, and least-privilege IAM users on one bucket.

The server is session-scoped (started once, stopped at the end of the session, its folder with
the keys removed). ``AWS_CA_BUNDLE`` is set for the session and restored afterwards; so is
``SSL_CERT_FILE``, which the Delta sink extends with ``AWS_CA_BUNDLE``'s CAs for delta-rs.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from twophase.connectors.s3 import RollingPolicy, S3SinkConfig
from twophase.integration.services import S3Endpoint
from twophase.integration.services.s3_tls import TlsMinioServer, least_privilege_policy, tls_minio_server

BUCKET = "twophase-secured"
NEVER_ROLL = RollingPolicy(max_file_bytes=10**12, rollover_interval_ms=None, inactivity_interval_ms=None)


def jsonl_config(endpoint: S3Endpoint, prefix: str, **retries: int) -> S3SinkConfig:
    """An S3 sink's JSON Lines files under ``prefix/files`` in ``BUCKET``, signed by ``endpoint``'s
    user, never rolled (each file spans checkpoints: tails and open uploads); ``retries``: the
    config's retry settings (``max_attempts``, ``retry_*_backoff_ms``)."""
    return S3SinkConfig(
        bucket=BUCKET,
        prefix=f"{prefix}/files",
        format="jsonl",
        json_column="v",
        rolling=NEVER_ROLL,
        storage_options=endpoint.s3_options(),
        **retries,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="session")
def tls_minio() -> Iterator[TlsMinioServer]:
    """MinIO over TLS for the whole session, with ``AWS_CA_BUNDLE`` naming its CA and ``BUCKET``."""
    with tls_minio_server() as server:
        patch = pytest.MonkeyPatch()
        patch.setenv("AWS_CA_BUNDLE", str(server.certificates.ca_bundle))
        if "SSL_CERT_FILE" in os.environ:  # the Delta sink extends it: restored at the end
            patch.setenv("SSL_CERT_FILE", os.environ["SSL_CERT_FILE"])
        else:
            patch.delenv("SSL_CERT_FILE", raising=False)
        try:
            server.endpoint.ensure_bucket(BUCKET)
            yield server
        finally:
            patch.undo()


@dataclass(frozen=True)
class JobUser:
    """A least-privilege IAM user of one job.

    Attributes:
        endpoint: the endpoint signing with the user's keys.
        prefix: the job's own prefix in ``BUCKET`` (the policy covers ``prefix/*``).
    """

    endpoint: S3Endpoint
    prefix: str


MakeUser = Callable[..., JobUser]


@pytest.fixture
def make_user(tls_minio: TlsMinioServer) -> Iterator[MakeUser]:
    """``make_user(actions=())`` → a fresh IAM user with the least-privilege policy on a fresh
    prefix (``actions``: a subset of the policy's actions; empty: all). Removed afterwards."""
    made: list[str] = []

    def make(actions: tuple[str, ...] = ()) -> JobUser:
        prefix = f"jobs/{uuid.uuid4().hex[:10]}"
        access = f"job-{uuid.uuid4().hex[:10]}"
        policy = least_privilege_policy(BUCKET, [prefix], actions)
        endpoint = tls_minio.add_user_with_policy(access, secrets.token_urlsafe(24), policy)
        made.append(access)
        return JobUser(endpoint, prefix)

    yield make
    for access in made:
        tls_minio.remove_user(access)
