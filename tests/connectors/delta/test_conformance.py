"""The Delta sink passes the conformance kit (:mod:`twophase.sinks.conformance`): the real sink
(delta-rs) on a table in a local folder, one table commit per checkpoint (``txn`` action), read back
by delta-rs; a Parquet file no table version references lingers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance import SinkContract


class TestDeltaSinkContract(SinkContract[Path]):
    """Each life writes a new table under pytest's temporary folder."""

    max_examples = 8  # delta-rs commits cost tens of ms each

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.lives = 0

    def new_system(self) -> Path:
        self.lives += 1
        return self.root / f"table-{self.lives}"

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return DeltaSink("d", DeltaSinkConfig(table_uri=str(system)))

    def read_committed(self, system: Path) -> list[str]:
        if not (system / "_delta_log").exists():
            return []
        table = DeltaTable(str(system)).to_pyarrow_table(columns=["key"])
        return [str(k) for k in table.column("key").to_pylist()]

    def lingering(self, system: Path) -> list[str]:
        referenced = set(DeltaTable(str(system)).file_uris()) if (system / "_delta_log").exists() else set()
        return sorted(str(p) for p in system.rglob("*.parquet") if str(p) not in referenced)
