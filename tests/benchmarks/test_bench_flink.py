"""The Flink comparison's pure parts: input sizing, cadence matching, log counting, ratios, and
the Flink job's SQL text (no Flink, no services)."""

from __future__ import annotations

import pytest
from support.bench_modules import ROOT, load_benchmark

bench = load_benchmark("bench_flink", ROOT / "benchmarks" / "bench_flink.py")
job = load_benchmark("flights_flink", ROOT / "benchmarks" / "flink" / "flights_flink.py")


def test_input_days_and_batches() -> None:
    assert bench.input_days(1.0) == 365
    assert bench.input_days(0.0192) == 7
    assert bench.input_days(0.0) == 1
    assert bench.input_days(5.0) == 365
    assert bench.files_per_trigger(365) == 31  # the demo's year in 12 micro-batches
    assert bench.files_per_trigger(7) == 1
    assert bench.files_per_trigger(14) == 2


def test_matched_interval_is_the_twophase_micro_batch_time() -> None:
    assert bench.matched_interval_ms(2000.4) == 2000
    assert bench.matched_interval_ms(35.0) == 200  # the floor
    with pytest.raises(ValueError):
        bench.matched_interval_ms(0.0)


def test_completed_checkpoints_counts_only_that_job() -> None:
    mine, other = "a" * 32, "b" * 32
    text = "\n".join(
        [
            f"INFO CheckpointCoordinator [] - Completed checkpoint 1 for job {mine} (3242 bytes, ...).",
            f"INFO CheckpointCoordinator [] - Triggering checkpoint 2 for job {mine}.",
            f"INFO CheckpointCoordinator [] - Completed checkpoint 2 for job {mine} (3242 bytes, ...).",
            f"INFO CheckpointCoordinator [] - Completed checkpoint 1 for job {other} (3242 bytes, ...).",
        ]
    )
    assert bench.completed_checkpoints(text, mine) == 2
    assert bench.completed_checkpoints(text, "c" * 32) == 0


def test_sink_ratios_twophase_over_flink() -> None:
    times = {"twophase_kafka": [2.0, 4.0], "flink_kafka": [4.0, 4.0], "twophase_s3": [1.0], "flink_s3": [3.0]}
    ratios = bench.sink_ratios(times)
    assert set(ratios) == {"kafka", "s3"}  # "all" did not run
    assert ratios["kafka"]["ratio"] == pytest.approx(4.0 / 3.0, abs=1e-3)
    assert ratios["s3"]["ratio"] == 3.0


def test_visibility_latency() -> None:
    assert bench.Visibility(10.0, 10.25).final_commit_ms == 250.0
    assert bench.Visibility(10.0, None).final_commit_ms is None


def test_flink_sql_text() -> None:
    assert job.sql_string("Martha's Vineyard") == "'Martha''s Vineyard'"
    assert job.with_options({"format": "parquet"}) == "WITH ('format' = 'parquet')"
    assert job.columns_ddl((("flight_id", "STRING"), ("month", "INT"))) == "`flight_id` STRING, `month` INT"
    select = job.enriched_select()
    for name, _ in job.TYPED_COLUMNS:  # every column of the twophase job's record
        assert name in select


def test_flink_columns_match_the_twophase_job() -> None:
    from twophase.integration.jobs.flights import TYPED_COLUMNS
    from twophase.integration.jobs.flights_data import FLIGHT_SCHEMA

    assert tuple(n for n, _ in job.TYPED_COLUMNS) == TYPED_COLUMNS
    assert tuple(n for n, _ in job.INPUT_COLUMNS) == tuple(FLIGHT_SCHEMA.names)


def test_markdown_table_of_a_saved_run() -> None:
    check = {"sink": "kafka", "records": 10, "exactly_once": True, "left_open": 0}
    run = {
        "rows": 10,
        "per_round": {
            "twophase_kafka": [
                {"wall_s": 2.0, "checkpoints": 3, "end_of_input_to_visible_ms": 300.0, "checks": [check]}
            ],
            "flink_kafka": [
                {
                    "wall_s": 4.0,
                    "checkpoints": 2,
                    "end_of_input_to_visible_ms": 900.0,
                    "checks": [{**check, "left_open": 1}],
                }
            ],
        },
    }
    table = bench.markdown(run).splitlines()
    assert len(table) == 3  # header, rule, one row: the sink sets that did not run are left out
    assert table[2] == "| kafka | 1 | 2.0 (5) | 4.0 (2) | 2.00 | 3 / 2 | 300.0 / 900.0 | FAILED |"
