"""Fixtures of the PostgreSQL sink's real-database tests.

- ``postgres`` (:class:`~twophase.integration.services.postgres.PostgresServer`): a native
  PostgreSQL for the whole session (temporary folder, free port, random password,
  ``max_prepared_transactions`` 64), stopped and deleted at the session's end. Tests may restart it.
- ``reader``: a plain psycopg connection (autocommit) to read back with: never the sink's code.
- ``table``: a fresh table name per test, created by the test itself.
- ``make_sink``: a :class:`PostgresSink` on ``postgres`` for a table, with config overrides.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.integration.services.postgres import PostgresServer, postgres_server

_COUNTER = itertools.count()

MakeSink = Callable[..., PostgresSink]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A native PostgreSQL 15+ for the whole session."""
    with postgres_server(max_prepared_transactions=64) as server:
        yield server


@pytest.fixture
def reader(postgres: PostgresServer) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A plain autocommit connection for reading back (not the sink's)."""
    postgres.start()  # a test may have stopped it
    with psycopg.connect(autocommit=True, **postgres.endpoint.connect_kwargs()) as conn:
        yield conn


@pytest.fixture
def table() -> str:
    """A table name unique within the session."""
    return f"t_{next(_COUNTER)}"


@pytest.fixture
def make_sink(postgres: PostgresServer, table: str) -> MakeSink:
    """``make_sink(name="pg", **config_overrides)``: a sink on the session's server and ``table``."""

    def make(name: str = "pg", **overrides: Any) -> PostgresSink:
        fields: dict[str, Any] = {**postgres.endpoint.sink_fields(), "table": table, "connect_attempts": 2}
        fields.update(overrides)
        return PostgresSink(name, PostgresSinkConfig(**fields))

    return make
