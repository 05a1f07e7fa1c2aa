"""The Kafka open benchmark's figures (no broker)."""

from __future__ import annotations

from support.bench_modules import ROOT, load_benchmark

bench = load_benchmark("bench_kafka_open", ROOT / "benchmarks" / "bench_kafka_open.py")


def test_figures_count_the_opens_that_waited_for_the_coordinator_timer() -> None:
    ms = [20.0, 22.0, 510.0, 19.0, 21.0, 530.0, 18.0, 20.0, 20.0, 23.0]
    assert bench.figures(ms) == {
        "n": 10,
        "median_ms": 20.5,
        "mean_ms": 120.3,
        "p90_ms": 510.0,
        "max_ms": 530.0,
        "over_300_ms": 2,
    }


def test_every_librdkafka_variant_states_its_metadata_calls_and_settings() -> None:
    assert bench.VARIANTS["default"] == (0, {})
    assert bench.VARIANTS["metadata_twice_backoff_10"] == (2, {"reconnect.backoff.ms": 10})
