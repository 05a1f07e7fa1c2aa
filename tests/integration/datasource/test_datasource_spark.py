"""The facade on real Spark (local[2]): ``writeStream.format("twophase-jsonl")`` is exactly-once.

In-process runs use the shared session; crash runs use their own process
(:mod:`support.datasource.streamscript`) so that ``TWOPHASE_FAULT`` exits are real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.datasource.streamscript import SINK, start_query
from support.exactly_once.support import make_input
from support.file_sink import read_committed, staging_files

from twophase.coordinator.storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

JOB = "ds"
REPO = Path(__file__).resolve().parents[3]
SCRIPT = "support.datasource.streamscript"


def committed(root: Path) -> Counter[int]:
    """The multiset of ids a downstream reader sees."""
    return Counter(int(r["id"]) for r in read_committed(root / "out", SINK))


def assert_exactly_once(root: Path, expected: list[int]) -> None:
    got, want = committed(root), Counter(expected)
    assert got == want, f"missing {sorted(want - got)[:5]}..., duplicated {sorted(got - want)[:5]}..."
    assert staging_files(root / "out", JOB, SINK) == []


def latest_position(root: Path) -> tuple[int, dict[str, object]]:
    latest = open_storage(str(root / "chk"), JOB).latest()
    assert latest is not None and latest.source_position is not None
    return latest.checkpoint_id, dict(latest.source_position)


def run(spark: SparkSession, root: Path, **kwargs: object) -> str:
    query = start_query(spark, root, JOB, **kwargs)  # type: ignore[arg-type]
    query.awaitTermination()
    return str(query.id)


def test_available_now_writes_the_input_exactly_once(spark_ds: SparkSession, tmp_path: Path) -> None:
    expected = make_input(tmp_path, files=4, rows_per_file=50)
    query_id = run(spark_ds, tmp_path)
    assert_exactly_once(tmp_path, expected)
    # one checkpoint per batch; its id follows Spark's batch id and it holds the query's position
    checkpoint_id, position = latest_position(tmp_path)
    assert (checkpoint_id, position) == (4, {"engine": "spark", "query_id": query_id, "batch_id": 3})
    # one committed file per batch (one partition each), named by its checkpoint
    files = sorted(p.name.split("-")[0] for p in (tmp_path / "out" / "data" / SINK).iterdir())
    assert files == ["c1", "c2", "c3", "c4"]


def test_rerun_with_the_same_checkpoint_writes_nothing_twice(spark_ds: SparkSession, tmp_path: Path) -> None:
    expected = make_input(tmp_path, files=2, rows_per_file=30)
    run(spark_ds, tmp_path)
    first = sorted(p.name for p in (tmp_path / "out" / "data" / SINK).iterdir())
    run(spark_ds, tmp_path)  # nothing new: no batch, nothing written
    assert sorted(p.name for p in (tmp_path / "out" / "data" / SINK).iterdir()) == first
    assert_exactly_once(tmp_path, expected)
    expected += make_input(tmp_path, files=2, rows_per_file=30, start=1000)
    run(spark_ds, tmp_path, files_per_trigger=2)  # only the new files, in one batch
    assert_exactly_once(tmp_path, expected)
    assert latest_position(tmp_path)[0] == 3


def test_async_progress_tracking_is_refused(spark_ds: SparkSession, tmp_path: Path) -> None:
    make_input(tmp_path, files=1, rows_per_file=10)
    # Spark 4.2 refuses it itself for non-Kafka sinks at start(); the facade's own check (see
    # test_datasource_config) covers Spark versions that would not
    with pytest.raises(Exception, match=r"(?i)async ?progress ?tracking"):
        run(spark_ds, tmp_path, options={"asyncProgressTrackingEnabled": "true"})
    assert committed(tmp_path) == Counter()
    assert open_storage(str(tmp_path / "chk"), JOB).latest() is None


def test_another_spark_checkpoint_is_refused(spark_ds: SparkSession, tmp_path: Path) -> None:
    expected = make_input(tmp_path, files=1, rows_per_file=10)
    run(spark_ds, tmp_path)
    # a new Spark checkpoint location would replay the stream from the start: refused in the tasks
    (tmp_path / "spark").rename(tmp_path / "spark-old")
    with pytest.raises(Exception, match="different engine checkpoint"):
        run(spark_ds, tmp_path)
    assert_exactly_once(tmp_path, expected)


def run_script(root: Path, fault: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_FAULT")}
    env["PYSPARK_PYTHON"] = sys.executable
    if fault:
        env["TWOPHASE_FAULT"] = fault
        env["TWOPHASE_FAULT_STATE"] = str(root / "fault-state")  # counted across Spark's workers
    return subprocess.run(
        [sys.executable, "-m", SCRIPT, "--root", str(root), "--job", JOB, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.chaos
@pytest.mark.parametrize(
    "fault", [pytest.param(f, marks=pytest.mark.long) for f in ("after_persist:2", "before_persist:2")]
)
def test_driver_side_crash_then_rerun_is_exactly_once(tmp_path: Path, fault: str) -> None:
    expected = make_input(tmp_path, files=3, rows_per_file=40)
    crashed = run_script(tmp_path, fault)
    # the commit worker died in batch 1 (checkpoint 2); Spark failed the query before its commit log
    assert crashed.returncode == 1, crashed.stdout[-2000:] + crashed.stderr[-4000:]
    assert not (tmp_path / "spark" / "commits" / "1").exists()
    checkpoint_id, _ = latest_position(tmp_path)
    if fault.startswith("after_persist"):
        # checkpoint 2 is durable: Spark's abort() after the failed commit must not abort it. The
        # abort worker restores, which may already re-commit it (a durable checkpoint's promise),
        # so batch 1 is either still staged or committed, never lost and never twice.
        assert checkpoint_id == 2
        staged = len(staging_files(tmp_path / "out", JOB, SINK))
        assert (staged, len(committed(tmp_path))) in [(1, 40), (0, 80)]
    else:
        assert checkpoint_id == 1
        assert len(committed(tmp_path)) == 40
    # whole input files (Spark orders files of equal modification time freely), each id once
    assert set(committed(tmp_path)) <= set(expected) and set(committed(tmp_path).values()) == {1}
    rerun = run_script(tmp_path, None)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-4000:]
    assert_exactly_once(tmp_path, expected)
    assert latest_position(tmp_path)[0] == 3


@pytest.mark.chaos
def test_killed_task_is_retried_and_its_leftovers_aborted(tmp_path: Path) -> None:
    expected = make_input(tmp_path, files=2, rows_per_file=40)
    # the first attempt of batch 0's task dies after writing; local[2,4] retries it (attempt 1)
    done = run_script(tmp_path, "mid_write", "--master", "local[2,4]")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert_exactly_once(tmp_path, expected)  # attempt 0's staging file was aborted as lingering
    names = sorted(p.name for p in (tmp_path / "out" / "data" / SINK).iterdir())
    assert [n.split("-")[:3] for n in names] == [["c1", "p0", "a1"], ["c2", "p0", "a0"]]
    # every task reaching the point counts (batch 0 attempts 0 and 1, batch 1); only the 1st fired
    hits = sorted(p.name for p in (tmp_path / "fault-state").iterdir())
    assert hits == ["mid_write.1", "mid_write.2", "mid_write.3"]
