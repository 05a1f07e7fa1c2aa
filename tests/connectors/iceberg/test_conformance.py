"""The Iceberg sink passes the conformance kit (:mod:`twophase.sinks.conformance`): its real code
(Parquet data files, one fast-append snapshot per checkpoint whose summary records the checkpoint,
the history check that answers ALREADY_COMMITTED, lingering cleanup of unreferenced files) against
the model of an Iceberg catalog and its object storage (``support.iceberg_model``)."""

from __future__ import annotations

from typing import Any

from pyiceberg.exceptions import NoSuchTableError
from support.iceberg_model import WAREHOUSE, IcebergModel

from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance import SinkContract

TABLE = ("lake", "events")
CONFIG = IcebergSinkConfig(
    table="lake.events",
    catalog_uri="http://model-catalog",
    warehouse=WAREHOUSE,
    create_table=True,
    target_file_rows=3,
    commit_backoff_max_ms=0,
    connect_backoff_ms=0,
    lingering_grace_ms=0,  # no task of the kit runs beside a cleanup
)


class TestIcebergSinkContract(SinkContract[IcebergModel]):
    """Each life on a new catalog model; the sink's ``validate`` creates the table."""

    max_examples = 8  # pyiceberg's metadata writes cost tens of ms each

    def new_system(self) -> IcebergModel:
        self.catalog = IcebergModel()
        return self.catalog

    def make_sink(self, system: IcebergModel) -> TwoPhaseCommitSink[Any, Any]:
        return IcebergSink("i", CONFIG, catalog_factory=system.connect)

    def executor_copy(self, sink: TwoPhaseCommitSink[Any, Any]) -> TwoPhaseCommitSink[Any, Any]:
        copy = self.make_sink(self.catalog)  # the model does not pickle
        copy.validate(self.batch([]).schema)
        return copy

    def read_committed(self, system: IcebergModel) -> list[str]:
        if TABLE not in system.tables:
            return []
        return list(system.records(TABLE, "key").elements())

    def lingering(self, system: IcebergModel) -> list[str]:
        try:
            return system.unreferenced_data_files(TABLE)
        except NoSuchTableError:
            return []
