"""The soak's pure parts: the exact read-back, the rows Spark's checkpoint says were produced, the
samples' round trip, the Delta log's count since its checkpoint, a maintenance round, and the
verdict on synthetic samples (no Spark, no services)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from support.bench_modules import ROOT, load_benchmark

from twophase.integration.jobs.flights_base_sinks import SINK_NAMES

soak = load_benchmark("soak", ROOT / "benchmarks" / "soak.py")
driver = load_benchmark("soak_driver", ROOT / "benchmarks" / "soak_driver.py")


def sample(segment: int, minute: float, rss: float = 300.0, commit_ms: float = 100.0) -> Any:
    """A Sample (Any: the benchmark module is loaded from its file, untyped here)."""
    process = soak.Process(rss_mb=rss, threads=10, fds=30)
    return soak.Sample(
        segment=segment, minute=minute, epochs=int(minute * 30), epochs_in_window=30,
        records=int(minute * 6000),
        write_ms=800.0, persist_ms=8.0, commit_ms=commit_ms, epoch_ms=1100.0, python=process, jvm=process,
        jvm_old_gen_mb=120.0, jvm_collections=int(minute), checkpoint_bytes=12000, checkpoint_files=2,
        spark_checkpoint_bytes=100000, kafka_ids=64, kafka_open=0, delta_log_bytes=int(minute * 1000),
        delta_log_files=10, delta_log_since_checkpoint=int(minute) % 100, load_1m=1.0,
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


def test_the_rows_produced_are_the_last_committed_and_planned_batches_offsets_times_the_rate(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "spark"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    for batch, seconds in ((0, 3), (1, 9), (2, 14)):
        meta = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{seconds}")
    for batch in (0, 1):  # batch 2 was planned, never committed: Spark replays it
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    produced = soak.rows_produced(pafs.LocalFileSystem(), str(checkpoint), 200)
    assert (produced.committed, produced.planned) == (9 * 200, 14 * 200)
    # a drained final batch is in the sinks before Spark's commit log: the planned rows are due
    assert produced.expected(highest=9 * 200) == 14 * 200
    assert produced.expected(highest=9 * 200 - 1) == 9 * 200
    assert produced.expected(highest=None) == 9 * 200
    empty = soak.rows_produced(pafs.LocalFileSystem(), str(tmp_path / "none"), 200)
    assert (empty.committed, empty.planned) == (0, 0)


def test_a_sample_survives_its_json_line() -> None:
    s = sample(1, 3.0)
    assert soak.loaded(json.dumps(dataclasses.asdict(s))) == s


def test_the_delta_log_counts_commits_after_its_newest_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    for v in range(12):
        (log / f"{v:020d}.json").write_text("{}")
    (log / f"{10:020d}.checkpoint.parquet").write_bytes(b"x")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 10}))
    size, files, since = driver.delta_log(pafs.LocalFileSystem(), str(tmp_path))
    assert (files, since) == (14, 1) and size > 0


def test_a_maintenance_round_compacts_at_the_default_retention_or_sets_one(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "table")
    for i in range(5):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    default = soak.maintain(uri, None)
    assert (default["files_removed"], default["files_added"], default["vacuumed"]) == (5, 1, 0)
    assert DeltaTable(uri).metadata().configuration == {}  # Delta's defaults: nothing vacuumed yet
    for i in range(5, 7):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    done = soak.maintain(uri, soak.Retention(files_min=0, log_min=30))
    assert (done["files_removed"], done["files_added"], done["vacuumed"]) == (3, 1, 8)
    table = DeltaTable(uri)
    assert table.metadata().configuration == {
        "delta.deletedFileRetentionDuration": "interval 0 minutes",
        "delta.logRetentionDuration": "interval 30 minutes",
    }
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(7))
    assert len(list((tmp_path / "table").glob("*.parquet"))) == 1


def test_the_verdict_names_a_leaking_figure_and_an_inexact_sink(tmp_path: Path) -> None:
    flat = [sample(0, m) for m in range(0, 30)] + [sample(1, m) for m in range(31, 60)]
    leaking = [sample(0, m) for m in range(0, 30)] + [sample(1, m, rss=300.0 + m) for m in range(31, 60)]
    epochs = [
        {
            "segment": s.segment,
            "minute": s.minute,
            "batch_id": int(s.minute * 30),
            "epoch_ms": 1000.0 + s.minute,
            "commit_ms": 100.0,
        }
        for s in flat
    ]
    read_back = [{"sink": "kafka", "exact": True, "lingering": 0}]
    result = {
        "job": "j",
        "minutes": 59,
        "records": 1,
        "partitions": 64,
        "killed_at_minute": 30,
        "read_back": read_back,
    }
    passed = soak.judge(tmp_path, flat, epochs, result, warm_up_min=5.0, draw=False)
    assert passed["failures"] == []
    assert passed["latency_ms"]["commit_ms"]["all"]["p99"] == 100.0
    assert passed["latency_ms"]["epoch_ms"]["segment 0"]["n"] == 25
    assert "| Python driver RSS MB | 1 | 24 |" in (tmp_path / "table.md").read_text()
    bad = {**result, "read_back": [{"sink": "delta", "exact": False, "lingering": 2}]}
    failed = soak.judge(tmp_path, leaking, epochs, bad, warm_up_min=5.0, draw=False)
    assert [f.split(" (")[0] for f in failed["failures"]] == [
        "Python driver RSS MB",
        "JVM driver RSS MB",
        "sink delta is not exact: {'sink': 'delta', 'exact': False, 'lingering': 2}",
        "sink delta left 2 lingering",
    ]


def test_a_maintenance_round_before_the_first_commit_skips_and_a_failure_comes_back_as_text(
    tmp_path: Path,
) -> None:
    assert soak.maintain(str(tmp_path / "none"), None) == {"skipped": "no table yet"}
    (tmp_path / "broken" / "_delta_log").mkdir(parents=True)
    (tmp_path / "broken" / "_delta_log" / f"{0:020d}.json").write_text("not json\n")
    failed = soak.maintenance_round(str(tmp_path / "broken"), None, None)
    assert list(failed) == ["error"] and failed["error"]


def test_spark_checkpoint_bytes_are_fitted_only_once_spark_retains_a_bounded_window() -> None:
    # Spark keeps every batch's offsets and commits until batch minBatchesToRetain (100), then a
    # window: the first soak's 10-minute warm-up ended long before, so a bounded figure "grew"
    epochs = [{"segment": 0, "minute": m, "batch_id": 3 * m} for m in range(60)]
    assert soak.spark_checkpoint_settled(epochs) == 34.0
    assert soak.spark_checkpoint_settled(epochs[:30]) == float("inf")
    filling = [
        dataclasses.replace(sample(0, m), spark_checkpoint_bytes=1000 * min(3 * m, 100)) for m in range(60)
    ]
    fitted = {s.figure: s for s in soak.slopes(filling, 10.0, epochs)}
    settled = fitted["Spark checkpoint bytes"]
    assert (settled.samples, settled.grows) == (26, False)
    unsettled = {s.figure: s for s in soak.slopes(filling, 10.0, epochs[:30])}["Spark checkpoint bytes"]
    assert (unsettled.samples, unsettled.grows) == (0, True)
    assert {s.figure: s for s in soak.slopes(filling, 10.0)}["Spark checkpoint bytes"].grows


def test_the_time_figures_are_fitted_through_every_epoch_not_one_median_a_sample() -> None:
    samples = [sample(0, m) for m in range(40)]  # the samples' commit medians: flat
    epochs = [
        {"segment": 0, "minute": float(m), "batch_id": 7 * m + k, "commit_ms": 100.0 + m + k % 2}
        for m in range(40)
        for k in range(7)
    ]
    fitted = {s.figure: s for s in soak.slopes(samples, 10.0, epochs)}
    commit = fitted["commit ms (median per epoch)"]
    assert commit.samples == 7 * 30 and commit.per_hour == pytest.approx(60.0)
    assert fitted["epoch ms (median per epoch)"].samples == 30  # not logged per epoch here: the samples


def test_the_process_figures_are_the_floors_of_the_interval_s_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = iter([(400.0, 30, 90, 50.0), (380.0, 33, 60, 55.0), (390.0, 31, 70, 40.0), (500.0, 40, 99, 60.0)])
    monkeypatch.setattr(driver.Process, "of", classmethod(lambda cls, pid: cls(*next(reads))))
    floors = driver.Floors(1)
    floors.poll()
    floors.poll()
    assert floors.take() == driver.Process(380.0, 30, 60, 40.0)  # the take polls once more
    assert floors.take() == driver.Process(500.0, 40, 99, 60.0)  # a new interval


def test_a_process_s_rss_of_mapped_files_is_read_apart() -> None:
    me = driver.Process.of(os.getpid())
    assert 0 < me.rss_file_mb < me.rss_mb  # this interpreter's libraries are mapped files
    raw = {**dataclasses.asdict(sample(0, 1.0)), "python": {"rss_mb": 3.0, "threads": 1, "fds": 2}}
    old = driver.loaded(json.dumps(raw))
    assert old.python.rss_file_mb == 0.0  # samples from before it was read still load


def test_the_python_driver_s_native_heaps_are_read_apart() -> None:
    import pyarrow as pa

    held = pa.array(range(1_000_000))  # 8 MB in pyarrow's pool
    heap = driver.python_heap()
    assert heap["arrow"] >= 7.6 and heap["C heap in use"] > 0 and heap["C heap free"] >= 0
    del held


def test_the_python_driver_gives_back_what_it_no_longer_uses() -> None:
    driver.release_python_memory()  # gc, pyarrow's pool, malloc_trim where glibc has it: no error


NMT_SUMMARY = """
Native Memory Tracking:

Total: reserved=3052316KB, committed=1370512KB
-                 Java Heap (reserved=1048576KB, committed=1048576KB)
                            (mmap: reserved=1048576KB, committed=1048576KB)

-                     Class (reserved=1056953KB, committed=49721KB)
                            (classes #8212)
-                    Thread (reserved=60674KB, committed=6438KB)
                            (thread #59)
-                      Code (reserved=250421KB, committed=37589KB)
-        Arena Chunk (reserved=182KB, committed=182KB)
"""


def test_native_memory_is_read_by_category_and_summed_outside_the_heap() -> None:
    categories = driver.parse_native_memory(NMT_SUMMARY)
    assert categories == {"Java Heap": 1024.0, "Class": 48.6, "Thread": 6.3, "Code": 36.7, "Arena Chunk": 0.2}
    assert driver.outside_heap(categories) == 91.8
    assert driver.parse_native_memory("Native memory tracking is not enabled") == {}


def test_the_census_folds_digits_and_keeps_the_most_frequent() -> None:
    names = ["Executor task launch worker for task 1.0", "Executor task launch worker for task 12.0"]
    names += ["rpc-server-3-1", "rpc-server-3-2", "rpc-server-4-1", "main"]
    assert driver.census(names, top=2) == {"rpc-server-#-#": 3, "Executor task launch worker for task #.#": 2}
    objects = driver.python_objects()
    assert objects.total() > 0 and objects["dict"] > 0


def test_the_growth_names_the_types_that_rose_most_since_the_first_sample() -> None:
    first = Counter({"dict": 100, "list": 50, "Epoch": 3})
    now = Counter({"dict": 90, "list": 52, "Epoch": 403, "Span": 7})
    assert driver.growth(first, now) == {"Epoch": 400, "Span": 7, "list": 2}
    assert driver.growth(first, now, top=1) == {"Epoch": 400}


def test_a_sample_line_from_before_the_diagnosis_fields_still_loads() -> None:
    raw = dataclasses.asdict(sample(0, 1.0))
    newer = ("commit_ms_by_sink", "jvm_native_mb", "python_objects", "python_types", "jvm_thread_names")
    for field in (*newer, "jvm_block_store_mb", "python_growth"):
        del raw[field]
    assert soak.loaded(json.dumps(raw)) == sample(0, 1.0)


def test_the_heap_is_gated_without_the_block_store_whose_broadcasts_come_and_go() -> None:
    # the 2026-12-06 soak's heap: a 300 MB saw-tooth of broadcasts over a flat rest
    samples = [
        dataclasses.replace(sample(1, m), jvm_old_gen_mb=300.0 + b, jvm_block_store_mb=b)
        for m in range(15, 60)
        for b in [float(300 * (m % 3 == 0))]
    ]
    fitted = {s.figure: s for s in soak.slopes(samples, warm_up_min=10.0, epochs=[])}
    rest = fitted["JVM old generation after GC, less the block store MB"]
    assert rest.per_hour == pytest.approx(0.0, abs=1e-9) and not rest.grows
    assert fitted["JVM old generation after GC MB"].limit is None  # reported, not gated
    assert driver.beside_blocks(sample(0, 1.0)) == 120.0  # a sample from before: the whole old generation


def test_each_sink_s_commit_time_is_fitted_through_every_epoch() -> None:
    samples = [sample(0, m) for m in range(40)]
    epochs = [
        {
            "segment": 0,
            "minute": float(m),
            "batch_id": m,
            "commit_ms": 300.0,
            "commit_ms_delta": 100.0 + 2.0 * m,
        }
        for m in range(40)
    ]
    fitted = {(s.figure, s.segment): s for s in soak.slopes(samples, 10.0, epochs)}
    delta = fitted[("commit ms delta (median per epoch)", 0)]
    assert delta.per_hour == pytest.approx(120.0) and delta.grows
    assert not fitted[("commit ms (median per epoch)", 0)].grows
    assert driver.SINKS == SINK_NAMES
