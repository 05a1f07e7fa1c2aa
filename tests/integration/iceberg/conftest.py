"""Fixtures of the Iceberg sink's real-service tests: tables on MinIO, a SQLite catalog per test.

- ``make_config(**overrides)``: an :class:`IcebergSinkConfig` whose warehouse is a fresh prefix of
  the ``twophase-iceberg-it`` bucket on the session's MinIO (``s3_endpoint``) and whose catalog is
  a SQLite file in the test's temporary folder.
- ``postgres``: a native PostgreSQL for the whole session (the PostgreSQL sink's fixture pattern),
  for the PostgreSQL-catalog test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from twophase.connectors.iceberg import IcebergSinkConfig
from twophase.integration.services.postgres import PostgresServer, postgres_server
from twophase.integration.services.s3 import S3Endpoint

BUCKET = "twophase-iceberg-it"

MakeConfig = Callable[..., IcebergSinkConfig]


@pytest.fixture
def warehouse(s3_endpoint: S3Endpoint) -> str:
    """A fresh ``s3://`` warehouse prefix on the session's MinIO."""
    s3_endpoint.ensure_bucket(BUCKET)
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_config(s3_endpoint: S3Endpoint, warehouse: str, tmp_path: Path) -> MakeConfig:
    """``make_config(**overrides)``: the test's table on MinIO with a SQLite catalog."""

    def make(**overrides: Any) -> IcebergSinkConfig:
        values: dict[str, Any] = {
            "table": "db.orders",
            "catalog_uri": str(tmp_path / "catalog.db"),
            "warehouse": warehouse,
            "create_table": True,
            "partition_by": ("region", "day(ts)"),
            "storage_options": s3_endpoint.s3_options(),
            "lingering_grace_ms": 0,
            "commit_backoff_max_ms": 10,
        }
        values.update(overrides)
        return IcebergSinkConfig(**values)

    return make


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A native PostgreSQL 15+ for the whole session (the Iceberg SQL catalog's database)."""
    with postgres_server() as server:
        yield server
