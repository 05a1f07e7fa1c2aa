"""The model-based protocol test's world: :class:`~twophase.coordinator.testing.world.World`'s Kafka,
S3, Delta and checkpoint storage, plus a PostgreSQL server (:mod:`support.postgres_model`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from support.postgres_model import PostgresModel
from twophase.coordinator.testing.world import World


@dataclass
class ModelWorld(World):
    """:class:`World` plus ``postgres``, the PostgreSQL server's prepared transactions and table,
    on the same clock (ms)."""

    postgres: PostgresModel = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.postgres = PostgresModel(clock=self.clock)

    def postgres_records(self) -> Counter[str]:
        """Rows a reader of the target table sees (its key column), as a multiset."""
        return self.postgres.committed_rows()

    def lingering(self, s3_prefix: str) -> dict[str, list[str]]:
        """:meth:`World.lingering`, plus ``postgres``: prepared transactions (``pg_prepared_xacts``)
        of any twophase job."""
        out = super().lingering(s3_prefix)
        out["postgres"] = self.postgres.prepared_gids("twophase.")
        return out
