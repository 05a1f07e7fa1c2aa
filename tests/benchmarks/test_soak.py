"""The soak's pure parts: the exact read-back, the first and last windows, the table, the
samples' round trip and the Delta log's count since its checkpoint (no Spark, no services)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from support.bench_modules import ROOT, load_benchmark

soak = load_benchmark("soak", ROOT / "benchmarks" / "soak.py")


def sample(minute: float, rss: float = 300.0, commit_ms: float = 100.0) -> Any:
    """A soak.Sample (Any: the benchmark module is loaded from its file, untyped here)."""
    process = soak.Process(rss_mb=rss, threads=10, fds=30)
    return soak.Sample(
        minute=minute, epochs=int(minute * 30), epochs_in_window=30, records=int(minute * 6000),
        write_ms=800.0, persist_ms=8.0, commit_ms=commit_ms, epoch_ms=1100.0, python=process, jvm=process,
        checkpoint_bytes=12000, checkpoint_files=2, spark_checkpoint_bytes=100000, kafka_ids=8,
        kafka_open=0, delta_log_bytes=1000, delta_log_files=10, delta_log_since_checkpoint=5, load_1m=1.0,
    )  # fmt: skip


def test_exact_counts_duplicates_missing_and_unexpected_ids() -> None:
    assert soak.exact("k", ["soak-0", "soak-1", "soak-2"], 3)["exact"] is True
    report = soak.exact("k", ["soak-0", "soak-0", "soak-7"], 3)
    assert (report["duplicates"], report["missing"], report["unexpected"], report["exact"]) == (
        1,
        2,
        1,
        False,
    )


def test_windows_are_an_hour_each_or_half_of_a_shorter_run() -> None:
    long_run = [sample(m) for m in range(1, 181)]
    first, last, span = soak.windows(long_run, warm_up_min=5.0)
    assert span == 60.0 and first[0].minute == 5 and first[-1].minute == 64 and last[0].minute == 121
    short = [sample(m) for m in range(1, 26)]
    first, last, span = soak.windows(short, warm_up_min=5.0)
    assert span == 10.0 and [s.minute for s in first][-1] == 14 and last[0].minute == 16


def test_the_table_puts_last_over_first() -> None:
    samples = [sample(m, rss=300.0 if m < 30 else 330.0) for m in range(1, 61)]
    row = next(
        line for line in soak.table(samples, 5.0).splitlines() if line.startswith("| Python driver RSS")
    )
    assert row == "| Python driver RSS MB | 300.0 | 330.0 | 1.10 |"


def test_a_sample_survives_its_json_line() -> None:
    s = sample(3.0)
    assert soak._loaded(json.dumps(dataclasses.asdict(s))) == s


def test_the_delta_log_counts_commits_after_its_newest_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    for v in range(12):
        (log / f"{v:020d}.json").write_text("{}")
    (log / f"{10:020d}.checkpoint.parquet").write_bytes(b"x")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 10}))
    size, files, since = soak.delta_log(str(tmp_path))
    assert (files, since) == (14, 1) and size > 0


def test_a_maintenance_round_compacts_vacuums_and_sets_the_retention_once(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "table")
    for i in range(5):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    done = soak.maintain(uri, soak.Retention(files_min=0, log_min=30))
    assert (done["files_removed"], done["files_added"], done["vacuumed"]) == (5, 1, 5)
    table = DeltaTable(uri)
    assert table.metadata().configuration == {
        "delta.deletedFileRetentionDuration": "interval 0 minutes",
        "delta.logRetentionDuration": "interval 30 minutes",
    }
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert len(list((tmp_path / "table").glob("*.parquet"))) == 1
    again = soak.maintain(uri, soak.Retention(files_min=0, log_min=30))
    assert again["files_removed"] == 0 and len(list((tmp_path / "table").glob("*.parquet"))) == 1
