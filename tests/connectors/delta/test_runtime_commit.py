"""The REAL Delta sink driven by the job runtime: the executor side through
``twophase.coordinator.run.fanout.write_subtasks``, the driver side through ``JobRuntime`` (via the
deterministic
harness, which also simulates the driver crash). The runtime must commit each checkpoint of the
sink with ONE ``commit_checkpoint`` call, so the table gets ONE Delta commit per checkpoint holding
every partition's files and ``txn(appId=<job>:<sink>, version=<checkpoint>)``, and a restore after a
crash between persist and notify commits the checkpoint exactly once."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from support.harness import TwoPhaseHarness

from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
from twophase.connectors.delta.internal import naming
from twophase.connectors.delta.internal.lingering import META_APP_ID, META_CHECKPOINT
from twophase.coordinator.run.epoch import Epoch
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.sinks import CheckpointCommitSink

pytestmark = pytest.mark.delta

JOB = "delta-runtime-job"
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
PARTITIONS = 3


def pos(n: int) -> dict[str, object]:
    return {"engine": "spark", "query_id": "q1", "batch_id": n}


def partition_batches(epoch: int, partition: int) -> list[pa.RecordBatch]:
    """Two batches of 2 rows each; ids are unique across epochs and partitions."""
    base = epoch * 1000 + partition * 100
    return [
        pa.record_batch(
            [pa.array([base + b * 10 + i for i in range(2)], pa.int64()), pa.array([f"e{epoch}"] * 2)],
            schema=SCHEMA,
        )
        for b in range(2)
    ]


def expected_ids(epochs: list[int]) -> list[int]:
    return sorted(
        int(i)
        for n in epochs
        for p in range(PARTITIONS)
        for b in partition_batches(n, p)
        for i in b.column("id").to_pylist()
    )


def run_epoch(h: TwoPhaseHarness, n: int) -> Epoch:
    """Trigger checkpoint n's epoch, write every partition with fanout (as a Spark task would) and
    acknowledge the encoded committables; completing is left to the caller."""
    epoch = h.begin_epoch(PARTITIONS, pos(n))
    partitions = [partition_batches(n, p) for p in range(PARTITIONS)]
    for ack in h.write_partitions(epoch.plan(), partitions):
        epoch.acknowledge(Acknowledgement.from_row(ack.to_row()))  # as collected from Arrow rows
    return epoch


def table_ids(path: str) -> list[int]:
    ids: list[int] = DeltaTable(path).to_pyarrow_table().column("id").to_pylist()
    return sorted(ids)


def test_runtime_commits_one_delta_commit_per_checkpoint_exactly_once_across_a_crash(tmp_path: Any) -> None:
    path = str(tmp_path / "table")
    sink = DeltaSink("events", DeltaSinkConfig(table_uri=path))
    assert isinstance(sink, CheckpointCommitSink)
    sink.validate(SCHEMA)
    h = TwoPhaseHarness([sink], job_id=JOB)
    h.restore()

    h.complete(run_epoch(h, 1))  # checkpoint 1: persisted and committed
    assert table_ids(path) == expected_ids([1])

    h.crash_at("after_persist")  # checkpoint 2 is durable, the driver dies before notify
    epoch2 = run_epoch(h, 2)
    h.expect_crash(lambda: h.complete(epoch2))
    assert table_ids(path) == expected_ids([1])  # not committed yet
    assert DeltaTable(path).transaction_version(f"{JOB}:events") == 1

    result = h.restart_process()  # a new driver: recover_and_commit_checkpoint(2, all 3 committables)
    assert result is not None and (result.checkpoint_id, result.recommitted) == (2, PARTITIONS)
    assert h.runtime.replay_check(pos(2))  # Spark replays batch 2: skipped, committed already
    h.runtime.finish()
    assert h.runtime.state is JobState.FINISHED

    assert table_ids(path) == expected_ids([1, 2])  # exactly the input, once
    table = DeltaTable(path)
    history = sorted(table.history(), key=lambda e: int(e["version"]))
    assert [e["version"] for e in history] == [0, 1]  # ONE commit per checkpoint
    assert [e.get(META_CHECKPOINT) for e in history] == [1, 2]
    assert {e.get(META_APP_ID) for e in history} == {f"{JOB}:events"}
    assert table.transaction_version(f"{JOB}:events") == 2
    # the table holds every partition's file of each checkpoint, and nothing else
    names = [naming.parse_data_file_name(f.rsplit("/", 1)[-1]) for f in table.file_uris()]
    assert sorted((n.checkpoint_id, n.partition) for n in names if n is not None) == [
        (c, p) for c in (1, 2) for p in range(PARTITIONS)
    ]
    # transactions counted one by one: checkpoint 1 by the first driver, checkpoint 2 on recovery
    first, second = h.runtimes
    assert (first.committer_metrics.committed, second.committer_metrics.committed) == (PARTITIONS, PARTITIONS)
