"""Opening the catalog: a catalog that refuses connections is retried with backoff, then named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog

from twophase.connectors.iceberg import IcebergSinkConfig
from twophase.connectors.iceberg.internal.catalog import open_catalog
from twophase.sinks.errors import ConfigError, ServiceUnavailableError


class FlakyFactory:
    """A catalog factory whose first ``refusals`` calls fail as a refused connection does."""

    def __init__(self, tmp_path: Path, refusals: int) -> None:
        self.tmp_path = tmp_path
        self.refusals = refusals
        self.calls = 0

    def __call__(self) -> Catalog:
        self.calls += 1
        if self.calls <= self.refusals:
            raise ConnectionRefusedError(111, "Connection refused: password=catalog-secret")
        return SqlCatalog("twophase", uri=f"sqlite:///{self.tmp_path / 'c.db'}")


def config(tmp_path: Path, **overrides: Any) -> IcebergSinkConfig:
    return IcebergSinkConfig(
        table="db.t",
        catalog_uri=str(tmp_path / "c.db"),
        catalog_password="catalog-secret",
        connect_backoff_ms=1,
        **overrides,
    )


def test_a_catalog_refusing_connections_is_retried_until_it_answers(tmp_path: Path) -> None:
    # a restart of the catalog's database while the job restores: the sink waits, as the
    # PostgreSQL sink does, rather than spending one of the job's restarts
    factory = FlakyFactory(tmp_path, refusals=2)
    with open_catalog(config(tmp_path, connect_attempts=3), factory) as catalog:
        assert catalog.list_namespaces() == []
    assert factory.calls == 3


def test_a_catalog_that_never_answers_is_one_redacted_line_after_every_attempt(tmp_path: Path) -> None:
    factory = FlakyFactory(tmp_path, refusals=10)
    with (
        pytest.raises(ServiceUnavailableError) as raised,
        open_catalog(config(tmp_path, connect_attempts=4), factory),
    ):
        pass
    assert factory.calls == 4
    message = str(raised.value)
    assert "after 4 attempts" in message and "Connection refused" in message
    assert "catalog-secret" not in message and "\n" not in message


@pytest.mark.parametrize(("name", "value"), [("connect_attempts", 0), ("connect_backoff_ms", -1)])
def test_connect_settings_are_checked(tmp_path: Path, name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=name):
        setting: dict[str, Any] = {name: value}
        IcebergSinkConfig(table="db.t", catalog_uri=str(tmp_path / "c.db"), **setting)
