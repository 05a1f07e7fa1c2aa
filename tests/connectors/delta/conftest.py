"""Fixtures of the Delta sink's unit tests: local tables in tmp paths, a way to run one checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from support.delta import local_write

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig

JOB = "job-1"

WriteCheckpoint = Callable[..., list[DeltaCommittable]]


@pytest.fixture
def table_path(tmp_path: Path) -> str:
    return str(tmp_path / "table")


@pytest.fixture
def make_sink(table_path: str) -> Callable[..., DeltaSink]:
    def make(name: str = "delta", **overrides: object) -> DeltaSink:
        options: dict[str, object] = {"table_uri": table_path, **overrides}
        return DeltaSink(name, DeltaSinkConfig(**options))  # type: ignore[arg-type]

    return make


@pytest.fixture
def write_checkpoint() -> WriteCheckpoint:
    """Run the executor side of one checkpoint (:func:`support.delta.local_write.write_checkpoint`),
    as job ``JOB`` unless told otherwise."""

    def write(
        sink: DeltaSink,
        checkpoint_id: int,
        partitions: Sequence[Sequence[pa.RecordBatch]],
        job_id: str = JOB,
        attempt: int = 0,
    ) -> list[DeltaCommittable]:
        return local_write.write_checkpoint(sink, checkpoint_id, partitions, job_id, attempt)

    return write


def _files_under(root: str) -> set[str]:
    base = Path(root)
    if not base.exists():
        return set()
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


@pytest.fixture
def files_under() -> Callable[[str], set[str]]:
    """Every data file under a root (relative paths), outside ``_delta_log``."""
    return _files_under
