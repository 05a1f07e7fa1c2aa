"""The model-based protocol test's world: :class:`~support.world.World`'s Kafka,
S3, Delta and checkpoint storage, plus a PostgreSQL server (:mod:`support.postgres_model`) and an
Iceberg catalog with its object storage (:mod:`support.iceberg_model`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pyiceberg.exceptions import NoSuchTableError

from support.iceberg_model import FOREIGN, IcebergModel
from support.postgres_model import PostgresModel
from support.world import World


@dataclass
class ModelWorld(World):
    """:class:`World` plus ``postgres``, the PostgreSQL server's prepared transactions and table,
    on the same clock (ms), and ``iceberg``, the Iceberg catalog and storage holding table
    ``iceberg_table``."""

    postgres: PostgresModel = field(init=False)
    iceberg: IcebergModel = field(default_factory=IcebergModel)
    iceberg_table: tuple[str, ...] = ("lake", "events")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.postgres = PostgresModel(clock=self.clock)

    def postgres_records(self) -> Counter[str]:
        """Rows a reader of the target table sees (its key column), as a multiset."""
        return self.postgres.committed_rows()

    def iceberg_records(self) -> Counter[str]:
        """Keys a reader of the Iceberg table's current snapshot sees, as a multiset, without the
        other writer's rows (:meth:`iceberg_foreign_records`); empty before the table exists."""
        return Counter({k: n for k, n in self._iceberg_rows().items() if not k.startswith(FOREIGN)})

    def iceberg_foreign_records(self) -> Counter[str]:
        """The other writer's rows in the Iceberg table's current snapshot, as a multiset."""
        return Counter({k: n for k, n in self._iceberg_rows().items() if k.startswith(FOREIGN)})

    def _iceberg_rows(self) -> Counter[str]:
        if self.iceberg_table not in self.iceberg.tables:
            return Counter()
        return self.iceberg.records(self.iceberg_table, "key")

    def lingering(self, s3_prefix: str) -> dict[str, list[str]]:
        """:meth:`World.lingering`, plus ``postgres``: prepared transactions (``pg_prepared_xacts``)
        of any twophase job; ``iceberg``: data files no snapshot of the table references."""
        out = super().lingering(s3_prefix)
        out["postgres"] = self.postgres.prepared_gids("twophase.")
        try:
            out["iceberg"] = self.iceberg.unreferenced_data_files(self.iceberg_table)
        except NoSuchTableError:
            out["iceberg"] = []
        return out
