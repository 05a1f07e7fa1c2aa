"""Delta's txn(appId, version) idempotency and checkpoint ids that would start again.

The table records, per appId ``<job>:<sink>``, the highest checkpoint id committed. Checkpoint ids
restart at 1 whenever the job's checkpoint storage is empty; if they did, every commit of the new
run would answer ALREADY_COMMITTED and its data would be dropped silently (#14 scenario 2).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from support.harness import TwoPhaseHarness

from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
from twophase.coordinator.run.runtime_config import CleanupMode, RuntimeConfig
from twophase.coordinator.storage.local import LocalCheckpointStorage
from twophase.sinks.errors import JobError

pytestmark = pytest.mark.delta

JOB = "orders"


def rows(n: int) -> list[list[pa.RecordBatch]]:
    return [[pa.record_batch({"id": pa.array([n * 10 + p for p in range(2)], pa.int64())})]]


def pos(n: int, query: str = "q1") -> dict[str, object]:
    return {"engine": "spark", "query_id": query, "batch_id": n}


def run(
    table: str, checkpoint_dir: Path, epochs: list[int], *, savepoint: str | None = None, query: str = "q1",
    config: RuntimeConfig | None = None,
) -> TwoPhaseHarness:  # fmt: skip
    h = TwoPhaseHarness(
        [DeltaSink("table", DeltaSinkConfig(table_uri=table))],
        job_id=JOB,
        storage=LocalCheckpointStorage(checkpoint_dir, JOB),  # type: ignore[arg-type]
        config=config,
    )
    h.restore(savepoint)
    for n in epochs:
        h.write_epoch(rows(n), source_position=pos(n, query))
    return h


def ids(table: str) -> list[int]:
    return sorted(DeltaTable(table).to_pyarrow_table().column("id").to_pylist())


def test_a_fresh_checkpoint_directory_continues_above_the_tables_committed_ids(tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    run(table, tmp_path / "chk-a", [1, 2]).runtime.finish()
    assert ids(table) == [10, 11, 20, 21]
    h = run(table, tmp_path / "chk-b", [3], query="q2")  # the same job name, a new checkpoint dir
    h.runtime.finish()
    assert ids(table) == [10, 11, 20, 21, 30, 31]  # the new run's data is committed, not skipped
    assert DeltaTable(table).transaction_version(f"{JOB}:table") == 3  # 1, 2, then the new run's 3


def test_cancel_with_delete_then_a_new_run_commits_its_data(tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    cfg = RuntimeConfig(cancel_cleanup=CleanupMode.DELETE)
    run(table, tmp_path / "chk", [1, 2], config=cfg).runtime.cancel()
    h = run(table, tmp_path / "chk", [3], query="q2")
    h.runtime.finish()
    assert ids(table) == [10, 11, 20, 21, 30, 31]


def test_a_savepoint_restored_into_a_new_directory_commits_the_replayed_batches(tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    h = run(table, tmp_path / "chk-a", [1])
    savepoint = h.runtime.stop_with_savepoint(drain=False)
    run(table, tmp_path / "chk-a", [2], savepoint=savepoint.location).runtime.finish()
    # the user resumes the savepoint elsewhere: batch 2 is replayed, and must land again in every sink
    h = run(table, tmp_path / "chk-b", [2], savepoint=savepoint.location)
    h.runtime.finish()
    assert ids(table) == [10, 11, 20, 20, 21, 21]


def test_a_refused_checkpoint_id_names_the_tables_txn_version_when_storage_is_empty(tmp_path: Path) -> None:
    """#26 item 5: the refusal named "storage holds newer checkpoints" although storage was empty
    and the next id came from the Delta table's txn version."""
    table = str(tmp_path / "table")
    run(table, tmp_path / "chk-a", [1, 2, 3]).runtime.finish()  # txn version 3; the final checkpoint is 4
    h = run(table, tmp_path / "chk-b", [], query="q2")  # a fresh checkpoint directory
    with pytest.raises(JobError) as e:
        h.runtime.begin_epoch(2, pos(1, "q2"), checkpoint_id=1)
    message = str(e.value)
    assert "storage holds" not in message
    assert "sink 'table'" in message and "checkpoint 3" in message and "storage is empty" in message
