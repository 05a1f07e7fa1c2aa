"""The object-store benchmark (issue #46): its exactness check and CPU figures (no services), and
the whole harness tiny against Azurite and fake-gcs-server (``long``: it starts both emulators and
Spark with hadoop-azure and the GCS connector)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.bench_modules import ROOT, load_benchmark

bench = load_benchmark("bench_object_stores", ROOT / "benchmarks" / "bench_object_stores.py")
common = bench.common


def rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i % 100 for i in ids], pa.int32()),
            "s": [f"row-{i}" for i in ids],
        }
    )


def test_exactly_the_input_passes_in_any_order() -> None:
    bench.check_exact(rows([3, 0, 2, 1, 4]), 5)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        (rows([0, 1, 2, 3]), "4 rows read back, 5 written"),
        (rows([0, 1, 2, 3, 3]), "ids are not 0..4 each once"),
        (rows([0, 1, 2, 3, 5]), "ids are not 0..4 each once"),
        (
            rows([0, 1, 2, 3, 4]).set_column(2, "s", pa.array(["row-0", "row-1", "row-2", "row-3", "x"])),
            "k or s",
        ),
    ],
)
def test_a_missing_repeated_or_wrong_row_is_named(table: pa.Table, says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        bench.check_exact(table, 5)


def test_cpu_medians_total_only_when_every_tree_was_measured() -> None:
    local = [
        {"driver": 2.0, "azurite": 1.0, "driver_thread": 0.5},
        {"driver": 4.0, "azurite": 0.0, "driver_thread": 0.7},
        {"driver": 3.0, "azurite": 3.0, "driver_thread": 0.6},
    ]
    assert common.cpu_medians(local) == {
        "cpu_s_driver": 3.0,
        "cpu_s_azurite": 1.0,
        "cpu_s_driver_thread": 0.6,
        "cpu_s_total": 4.0,  # per call 3, 4, 6
    }
    elsewhere = [{"driver": 2.0, "gcs": None, "driver_thread": 0.5}]
    assert common.cpu_medians(elsewhere)["cpu_s_total"] is None


def test_spark_output_names_its_committer() -> None:
    assert common.success_committer(b"") is None
    assert common.success_committer(b'{"committer": "ManifestCommitter"}') == "ManifestCommitter"


@pytest.mark.long
def test_the_harness_tiny_on_both_emulators(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every writer once at 20,000 rows: each run read back exactly by a reader that is not its
    writer (the harness raises otherwise), four Parquet objects each, the committers as named."""
    monkeypatch.setenv("TWOPHASE_BENCH_SCALE", str(20_000 / bench.ROWS))
    monkeypatch.setenv("TWOPHASE_BENCH_RUNS", "1")
    result = bench.run()
    assert result["rows"] == 20_000
    assert set(result["writers"]) == {
        "twophase_azure",
        "spark_abfs",
        "spark_abfs_manifest",
        "twophase_gcs",
        "spark_gs",
        "spark_gs_manifest",
    }
    for name, figures in result["writers"].items():
        assert figures["parquet_objects"] == [bench.PARTITIONS], name
        assert figures["cpu_s_driver"] > 0, name
    assert result["committers"]["spark_abfs"] is None
    assert result["committers"]["spark_gs"] is None
    assert result["committers"]["spark_abfs_manifest"]
    assert result["committers"]["spark_gs_manifest"]
    assert set(result["ratios"]) == {
        "twophase_azure / spark_abfs",
        "twophase_azure / spark_abfs_manifest",
        "twophase_gcs / spark_gs",
        "twophase_gcs / spark_gs_manifest",
    }


def test_cpu_of_a_worker_orphaned_mid_call_still_counts() -> None:
    """A shell starts a worker that burns 0.8 CPU-seconds and exits before it: the worker is
    orphaned (its time reaches no ancestor of ours) yet counts for the call, as Spark's Python
    workers do when their daemon goes first."""
    import subprocess
    import sys
    import time

    burn = "import time\nwhile time.process_time() < 0.8: pass\n"
    meter = common.CpuMeter({}, interval_s=0.05)

    def call() -> None:
        shell = subprocess.Popen(
            ["sh", "-c", f'{sys.executable} -c "{burn}" & echo $!; sleep 0.3'],
            text=True,
            stdout=subprocess.PIPE,
        )
        worker = int(shell.communicate()[0].strip())
        while subprocess.run(["kill", "-0", str(worker)], capture_output=True).returncode == 0:
            time.sleep(0.02)

    _, spent = meter.measured(call)
    assert spent["driver"] is not None and spent["driver"] >= 0.6


def test_metered_writers_report_each_call_s_cpu_as_the_single_sink_benchmarks_do() -> None:
    """``common.metered`` wraps every writer in the meter and keeps one figure per call;
    ``cpu_figures`` reports the Spark side and the total (bench_kafka, bench_delta)."""
    import time

    def burn(r: int) -> object:
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        return r

    writers, samples = common.metered(
        {"busy": burn, "idle": lambda r: r}, common.CpuMeter({}, interval_s=0.05)
    )
    assert [writers["busy"](0), writers["busy"](1), writers["idle"](2)] == [0, 1, 2]
    assert [len(samples["busy"]), len(samples["idle"])] == [2, 1]
    busy, idle = common.cpu_figures(samples["busy"]), common.cpu_figures(samples["idle"])
    assert busy["cpu_s_spark"] is not None and busy["cpu_s_spark"] >= 0.25
    assert idle["cpu_s_spark"] is not None and idle["cpu_s_spark"] < 0.2
    assert busy["cpu_s_total"] == busy["cpu_s_spark"]  # no service: the total is the Spark side
