"""The Flink comparison's pure parts (issue #44 item 1): the plan check that refuses Python
operators, the steady-state window between row markers, end of input to visible from offsets, the
matched checkpoint interval, the ratio table; and the Java job's columns against the twophase
job's (no engine, no service)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.bench_modules import ROOT, load_benchmark

analysis = load_benchmark("bench_flink_analysis", ROOT / "benchmarks" / "flink" / "analysis.py")
Sample = analysis.Sample
JAVA = ROOT / "benchmarks" / "flink" / "java" / "twophase" / "bench" / "FlightsFlink.java"

JVM_PLAN = """== Optimized Execution Plan ==
Sink(table=[default_catalog.default_database.kafka_out], fields=[flight_id, ...])
+- Calc(select=[flight_id, airline_of(carrier) AS airline, local_to_instant(year, ...) AS sched_dep_at])
   +- TableSourceScan(table=[[default_catalog, default_database, flights_in]], fields=[flight_id, ...])
"""


def test_a_plan_all_in_the_jvm_passes() -> None:
    analysis.check_plan(JVM_PLAN)


@pytest.mark.parametrize("operator", ["PythonCalc", "PythonCorrelate", "PythonGroupAggregate"])
def test_a_plan_with_a_python_operator_is_refused(operator: str) -> None:
    plan = JVM_PLAN.replace("+- Calc(", f"+- {operator}(")
    with pytest.raises(analysis.PythonOnFlinkPathError, match=operator):
        analysis.check_plan(plan)


def test_markers_are_shares_of_the_input() -> None:
    assert analysis.markers(1000, 0.2, 0.95) == (200, 950)
    for bad in ((0.5, 0.5), (-0.1, 0.5), (0.2, 1.5)):
        with pytest.raises(ValueError):
            analysis.markers(1000, *bad)


def kafka_run() -> list[object]:
    """A Kafka writer: 100 rows per checkpoint every second, 1.5 CPU-s per second, 3 partitions
    (three commit markers per checkpoint in the HW; the watcher takes them off the LSO), the last
    100 rows written at t=10.2 and committed at t=10.9."""
    samples = []
    for i in range(10):  # t = 0.0, 0.5, ..., 4.5 s: one commit per second
        t = i * 0.5
        committed = 100 * (i // 2)
        samples.append(Sample(t, hw=committed + 3 * (i // 2), lso=committed, cpu_s=1.5 * t))
    samples += [
        Sample(10.0, hw=903, lso=900, cpu_s=15.0),
        Sample(10.2, hw=1003, lso=900, cpu_s=15.3),  # the last records in the log, not committed
        Sample(10.5, hw=1003, lso=900, cpu_s=15.6),
        Sample(10.9, hw=1006, lso=1000, cpu_s=16.0),  # committed (markers taken off the LSO)
    ]
    return samples


def test_steady_window_between_markers() -> None:
    w = analysis.steady_window(kafka_run(), ["kafka"], 100, 400)
    assert w.seconds == pytest.approx(3.0)  # first sample at 100 (t=1.0) to the first at 400 (t=4.0)
    assert w.rows == 300
    assert w.rows_per_s == pytest.approx(100.0)
    assert w.checkpoints == 3  # three steps of the visible count
    assert w.rows_per_checkpoint == pytest.approx(100.0)
    assert w.cpu_s == pytest.approx(4.5)
    assert w.cpu_s_per_million_rows == pytest.approx(15_000.0)
    assert w.as_dict()["cpu_cores_busy"] == 1.5
    assert w.started_at == 1.0
    assert w.holds(2.5) and w.holds(4.0) and not w.holds(4.5)  # the engine's checkpoints in it


def test_steady_window_s3_files_and_bytes() -> None:
    samples = [
        Sample(0.0, s3_rows=0, s3_files=0, s3_bytes=0),
        Sample(1.0, s3_rows=500, s3_files=4, s3_bytes=4_000),
        Sample(1.5, s3_rows=500, s3_files=4, s3_bytes=4_000),
        Sample(2.0, s3_rows=1000, s3_files=8, s3_bytes=8_000),
        Sample(2.5, s3_rows=1000, s3_files=8, s3_bytes=8_000),
        Sample(3.0, s3_rows=1500, s3_files=12, s3_bytes=12_000),
    ]
    w = analysis.steady_window(samples, ["s3"], 500, 1500)
    assert (w.rows, w.files, w.checkpoints) == (1000, 8, 2)
    assert w.files_per_checkpoint == 4.0
    assert w.bytes_per_file == 1000.0


def test_a_checkpoint_committed_across_two_samples_counts_once() -> None:
    samples = [
        Sample(0.0, s3_rows=0),
        Sample(1.0, s3_rows=100),
        Sample(1.9, s3_rows=100),
        Sample(2.0, s3_rows=150),  # the second checkpoint's first files...
        Sample(2.1, s3_rows=200),  # ...and the rest
        Sample(2.2, s3_rows=200),
        Sample(2.3, s3_rows=210),  # a straggler within merge_s of the run
        Sample(2.9, s3_rows=210),
        Sample(3.0, s3_rows=300),
    ]
    w = analysis.steady_window(samples, ["s3"], 100, 300)
    assert (w.rows, w.checkpoints) == (200, 2)


def test_both_sinks_count_what_both_show() -> None:
    s = Sample(1.0, hw=120, lso=100, s3_rows=80)
    assert s.visible(["kafka", "s3"]) == 80
    assert s.visible(["kafka"]) == 100


def test_steady_window_refuses_unreached_or_coinciding_markers() -> None:
    with pytest.raises(ValueError, match="never made"):
        analysis.steady_window(kafka_run(), ["kafka"], 100, 5000)
    with pytest.raises(ValueError, match="one sample"):
        analysis.steady_window(kafka_run(), ["kafka"], 150, 190)


def test_end_of_input_to_visible_from_offsets() -> None:
    latency = analysis.end_of_input_to_visible_ms(kafka_run(), ["kafka"], 1000)
    assert latency == {"kafka": pytest.approx(700.0)}  # in the log at 10.2, visible at 10.9
    assert analysis.end_of_input_to_visible_ms(kafka_run(), ["s3"], 1000) == {"s3": None}
    assert analysis.end_of_input_to_visible_ms(kafka_run(), ["kafka"], 5000) == {"kafka": None}


def test_quiet_output() -> None:
    run = kafka_run()
    assert not analysis.quiet(run, 0.5)  # committed at 10.9: the HW moved within the last 0.5 s
    settled = [*run, Sample(11.5, hw=1006, lso=1000), Sample(12.0, hw=1006, lso=1000)]
    assert analysis.quiet(settled, 1.0)
    assert not analysis.quiet(settled, 2.0)
    assert not analysis.quiet(run[:2], 3.0)  # the samples span less than that


def test_first_visible_since_submission() -> None:
    assert analysis.first_visible_s(kafka_run(), ["kafka"], since=-2.0) == 3.0  # t=1.0
    assert analysis.first_visible_s([Sample(1.0)], ["kafka"], since=0.0) is None


def test_matched_interval_gives_the_records_per_checkpoint() -> None:
    assert analysis.matched_interval_ms(100_000, 50_000.0) == 2000
    assert analysis.matched_interval_ms(1_000, 50_000.0) == 100  # the floor
    with pytest.raises(ValueError):
        analysis.matched_interval_ms(100_000, 0.0)


def test_ratio_table() -> None:
    rates = {
        "twophase_kafka": [200.0, 300.0],
        "flink_kafka": [100.0, 300.0],
        "flink_kafka_pooling": [200.0, 150.0],
        "twophase_s3": [100.0],
    }
    ratios = analysis.ratios(rates)
    assert set(ratios) == {"kafka", "kafka, Flink pooled ids"}  # S3's Flink side did not run
    assert ratios["kafka"] == {"ratio": 1.25, "per_round_min": 1.0, "per_round_max": 2.0}
    assert ratios["kafka, Flink pooled ids"]["ratio"] == pytest.approx(250 / 175, abs=1e-3)


def test_the_staged_writers_are_paired_with_flink_s_writers_of_their_sink() -> None:
    rates = {
        "twophase_kafka_staged": [300.0],
        "flink_kafka": [200.0],
        "twophase_s3_staged": [90.0],
        "flink_s3": [100.0],
    }
    ratios = analysis.ratios(rates)
    assert ratios["kafka, twophase's JVM writer"]["ratio"] == 1.5
    assert ratios["s3, Spark's Parquet writer"]["ratio"] == 0.9
    assert {"kafka", "s3"}.isdisjoint(ratios)  # the Python pass's writers did not run


def test_spark_s_own_sink_is_set_against_flink_and_twophase_as_the_engine_s_floor() -> None:
    rates = {"twophase_kafka": [40.0], "twophase_kafka_staged": [45.0], "spark_kafka": [50.0]}
    rates |= {"flink_kafka": [100.0]}
    ratios = analysis.ratios(rates)
    assert ratios["kafka: Spark's own sink (at least once) ÷ Flink"]["ratio"] == 0.5
    assert ratios["kafka: twophase ÷ Spark's own sink"]["ratio"] == 0.8
    assert ratios["kafka: twophase's JVM writer ÷ Spark's own sink"]["ratio"] == 0.9
    assert bench_flink.WRITERS["spark_kafka"] == ("spark", "kafka")
    assert "transaction.timeout.ms" not in bench_flink.SPARK_KAFKA_PRODUCER
    assert bench_flink.SPARK_KAFKA_PRODUCER["batch.size"] == bench_flink.FLINK_BATCH_SIZE


def test_markdown_of_a_run() -> None:
    window = analysis.steady_window(kafka_run(), ["kafka"], 100, 400).as_dict()
    result = {
        "ratios": {"kafka": {"ratio": 1.25, "per_round_min": 1.0, "per_round_max": 2.0}},
        "per_round": {
            "twophase_kafka": [
                {
                    "window": window,
                    "plan_s": 0.5,
                    "deploy_s": 1.0,
                    "first_visible_s": None,
                    "end_of_input_to_visible_ms": {"kafka": 700.0},
                }
            ]
        },
    }
    lines = analysis.markdown(result).splitlines()
    assert lines[2] == "| kafka | 1.25 | 1.00–2.00 |"
    assert lines[-1] == (
        "| twophase_kafka | 1 | 100 | 15000.0 | 1.50 | 100 | 0.0 | 0 | 0.50 | 1.00 | – | kafka 700.0 |"
    )


def test_the_java_job_writes_the_twophase_jobs_columns() -> None:
    from twophase.integration.jobs.flights import TYPED_COLUMNS
    from twophase.integration.jobs.flights_data import FLIGHT_SCHEMA

    text = JAVA.read_text()

    def columns(array: str) -> tuple[str, ...]:
        body = text.split(f"static final String[][] {array} = {{", 1)[1].split("};", 1)[0]
        return tuple(re.findall(r'\{"(\w+)", "[^"]+"\}', body))

    assert columns("OUTPUT") == TYPED_COLUMNS
    assert columns("INPUT") == tuple(FLIGHT_SCHEMA.names)


bench_flink = load_benchmark("bench_flink", ROOT / "benchmarks" / "bench_flink.py")


def measured(writer: str, rows_per_s: float) -> object:
    window = analysis.Window(
        seconds=10.0, rows=int(rows_per_s * 10), cpu_s=5.0, checkpoints=2, files=0, bytes=0
    )
    return bench_flink.Measured(writer, window, 0.5, 1.0, 2.0, {"kafka": 100.0})


def test_the_report_sets_only_rounds_every_writer_finished_against_each_other() -> None:
    # twophase's round 2 failed: round 1 and 3 are paired, round 2 of Flink is listed, not counted
    per_round = {
        "twophase_kafka": {1: measured("twophase_kafka", 200.0), 3: measured("twophase_kafka", 300.0)},
        "flink_kafka": {
            1: measured("flink_kafka", 100.0),
            2: measured("flink_kafka", 900.0),
            3: measured("flink_kafka", 300.0),
        },
    }
    failures = [{"writer": "twophase_kafka", "round": 2, "error": "TimeoutError('not visible')"}]
    opts = bench_flink.Options(writers=("twophase_kafka", "flink_kafka"))
    result = bench_flink.report(opts, {"load_1m": 0.5}, per_round, failures, complete=False)
    assert result["rounds_in_ratios"] == [1, 3]
    assert result["ratios"]["kafka"] == {"ratio": 1.25, "per_round_min": 1.0, "per_round_max": 2.0}
    assert [r["round"] for r in result["per_round"]["flink_kafka"]] == [1, 2, 3]
    text = analysis.markdown(result)
    assert "| twophase_kafka | 2 | TimeoutError('not visible') |" in text
    assert text.endswith("(cut short: the rounds measured so far)")


def test_a_flink_jvm_that_says_nothing_is_killed() -> None:
    import subprocess
    import time
    from pathlib import Path

    engine = load_benchmark("bench_flink_engine", ROOT / "benchmarks" / "flink" / "engine.py")
    job = engine.FlinkJob(build=None, request={}, work_dir=Path("/nonexistent"), env={})
    job._proc = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, text=True)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"said nothing for 0\.5 s and was killed"):
        job._reply("planned", timeout_s=0.5)
    assert time.monotonic() - started < 10 and not job.alive()


class _Offsets:
    """A stand-in for confluent-kafka's AdminClient's ``list_offsets``: each call answers the
    next of ``answers`` (partition → offset) at either isolation level."""

    def __init__(self, *answers: dict[int, int]) -> None:
        self._answers = list(answers)

    def list_offsets(self, spec: Any, isolation_level: Any, request_timeout: float) -> dict[Any, Any]:
        from concurrent.futures import Future

        answer = self._answers.pop(0)
        out = {}
        for tp in spec:
            done: Future[Any] = Future()
            done.set_result(type("Offset", (), {"offset": answer[tp.partition]})())
            out[tp] = done
        return out


@pytest.mark.parametrize(("transactional", "visible"), [(True, 98), (False, 100)])
def test_the_watcher_takes_commit_markers_off_only_a_transactional_topic(
    transactional: bool, visible: int
) -> None:
    watcher = load_benchmark("bench_flink_watcher", ROOT / "benchmarks" / "flink" / "watcher.py")
    watch = watcher.Watch([1], [], None, 2, None, None, transactional)
    watch.topic, watch._admin = "t", _Offsets({0: 50, 1: 50}, {0: 50, 1: 50})  # HW, then LSO
    assert watch._offsets() == (100, visible)  # one rise of each partition's LSO: one marker each
