"""Fixtures of the Iceberg sink's unit tests: a SQLite catalog and a local-filesystem warehouse."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig

UTC = datetime.timezone.utc


def rows(start: int, count: int) -> pa.RecordBatch:
    """``count`` rows with ids from ``start``: two regions, three days."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "id": i,
                "region": "eu" if i % 2 else "us",
                "ts": datetime.datetime(2024, 1, 1 + i % 3, 12, tzinfo=UTC),
                "amount": float(i) / 4,
            }
            for i in range(start, start + count)
        ]
    )


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., IcebergSinkConfig]:
    def make(**overrides: Any) -> IcebergSinkConfig:
        values: dict[str, Any] = {
            "table": "db.orders",
            "catalog_uri": str(tmp_path / "catalog.db"),
            "warehouse": str(tmp_path / "warehouse"),
            "create_table": True,
            "partition_by": ("region", "day(ts)"),
            "lingering_grace_ms": 0,
            "commit_backoff_max_ms": 10,
        }
        values.update(overrides)
        return IcebergSinkConfig(**values)

    return make


@pytest.fixture
def sink(make_config: Callable[..., IcebergSinkConfig]) -> IcebergSink:
    s = IcebergSink("lake", make_config())
    s.validate(rows(0, 1).schema)
    return s
