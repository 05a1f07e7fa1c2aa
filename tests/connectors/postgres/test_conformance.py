"""The PostgreSQL sink passes the conformance kit (:mod:`twophase.sinks.conformance`): its real code
(COPY into a transaction, PREPARE TRANSACTION, COMMIT PREPARED, the commit record that tells a
repeated commit from a lost one, lingering rollback) against the model of the server's prepared
transactions (``support.postgres_model``); an administrator's ROLLBACK PREPARED drops a
pre-committed transaction (the LOST check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from support.postgres_model import PostgresModel

from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.connectors.postgres.internal.schema import WritePlan
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance import SinkContract

CONFIG = PostgresSinkConfig(table="events", host="model", connect_attempts=3, connect_backoff_ms=1)


class ModelPostgresSink(PostgresSink):
    """The real sink; ``validate`` gives the write plan a real catalog would (the model has none)."""

    def validate(self, schema: pa.Schema) -> None:
        self.plan = WritePlan(("key",), ("text",))


class TestPostgresSinkContract(SinkContract[PostgresModel]):
    """Each life on a new server model."""

    def new_system(self) -> PostgresModel:
        self.server = PostgresModel()
        return self.server

    def make_sink(self, system: PostgresModel) -> TwoPhaseCommitSink[Any, Any]:
        return ModelPostgresSink("p", CONFIG, connector=system.connect)

    def executor_copy(self, sink: TwoPhaseCommitSink[Any, Any]) -> TwoPhaseCommitSink[Any, Any]:
        copy = self.make_sink(self.server)  # the model does not pickle
        copy.validate(self.batch([]).schema)
        return copy

    def read_committed(self, system: PostgresModel) -> list[str]:
        return list(system.committed_rows().elements())

    def lingering(self, system: PostgresModel) -> list[str]:
        return system.prepared_gids("twophase.")

    def lose(self, system: PostgresModel, committables: Sequence[Any]) -> bool:
        with system.lock:  # an administrator's ROLLBACK PREPARED
            for c in committables:
                del system.prepared[c.gid]
        return True
