"""The soak's verdict on synthetic series (no Spark, no services): a flat series passes, a leaking
one fails with its figure's name, the interval widens with noise and segments are fitted apart."""

from __future__ import annotations

import math
import random

import pytest
from support.bench_modules import ROOT, load_benchmark

fit = load_benchmark("soak_fit", ROOT / "benchmarks" / "soak_fit.py")

RSS = "Python driver RSS MB"
EPOCH = "epoch ms (median per epoch)"


def minutes(n: int = 120) -> list[float]:
    return [float(m) for m in range(n)]


def test_a_flat_noisy_series_passes_and_its_interval_holds_zero() -> None:
    noise = random.Random(7)
    values = [300.0 + noise.gauss(0, 0.5) for _ in minutes()]
    slope = fit.fit(RSS, 0, minutes(), values, fit.THRESHOLDS[RSS])
    assert slope.low < 0 < slope.high and not slope.grows


def test_a_leak_of_two_mb_an_hour_fails_with_the_figures_name() -> None:
    noise = random.Random(7)
    values = [300.0 + 2.0 * m / 60 + noise.gauss(0, 0.5) for m in minutes()]
    (grown,) = fit.growing([fit.fit(RSS, 1, minutes(), values, fit.THRESHOLDS[RSS])])
    assert 1.5 < grown.per_hour < 2.5 and grown.low > 1.0
    assert grown.line().startswith("Python driver RSS MB (segment 1): +2")


def test_the_upper_bound_decides_so_a_noisy_short_series_fails() -> None:
    noise = random.Random(3)
    values = [300.0 + noise.gauss(0, 20) for _ in minutes(6)]
    slope = fit.fit(RSS, 0, minutes(6), values, fit.THRESHOLDS[RSS])
    assert slope.high > 1.0 and slope.grows


def test_the_interval_is_students_t_on_the_standard_error() -> None:
    from scipy import stats

    xs, ys = [0.0, 60.0, 120.0, 180.0], [1.0, 3.0, 2.0, 5.0]
    slope = fit.fit(RSS, 0, xs, ys, fit.THRESHOLDS[RSS])
    ref = stats.linregress([x / 60 for x in xs], ys)
    half = stats.t.ppf(0.975, 2) * ref.stderr
    assert slope.per_hour == pytest.approx(ref.slope)
    assert (slope.low, slope.high) == pytest.approx((ref.slope - half, ref.slope + half))


def test_a_relative_threshold_scales_with_the_mean() -> None:
    rising = [1000.0 + 150.0 * m / 60 for m in minutes()]  # +15 % an hour
    assert fit.fit(EPOCH, 0, minutes(), rising, fit.THRESHOLDS[EPOCH]).grows
    slow = [1000.0 + 50.0 * m / 60 for m in minutes()]  # +5 % an hour
    assert not fit.fit(EPOCH, 0, minutes(), slow, fit.THRESHOLDS[EPOCH]).grows


def test_too_few_points_grow_and_reported_figures_never_do() -> None:
    short = fit.fit(RSS, 0, [0.0, 1.0], [1.0, 1.0], fit.THRESHOLDS[RSS])
    assert short.grows and math.isinf(short.high)
    delta = fit.THRESHOLDS["Delta log bytes"]
    assert not fit.fit("Delta log bytes", 0, minutes(), [m * 1e6 for m in minutes()], delta).grows


def test_segments_are_fitted_apart_after_their_own_warm_up() -> None:
    # a saw-tooth across the restart: each driver flat at its own level after a warm-up climb
    before = [(0, m, 200.0 + (50.0 - 10 * m if m < 5 else 0.0)) for m in minutes(60)]
    after = [(1, m, 400.0 + (50.0 if m < 65 else 0.0)) for m in [60.0 + m for m in minutes(60)]]
    slopes = fit.fit_segments({RSS: before + after}, warm_up_min=5.0)
    assert [(s.segment, s.samples, s.grows) for s in slopes] == [(0, 55, False), (1, 55, False)]
    assert fit.fit(RSS, 0, [m for _, m, _ in before + after], [v for *_, v in before + after],
                   fit.THRESHOLDS[RSS]).grows  # fmt: skip


def test_a_figure_is_fitted_only_from_its_settled_minute_and_never_if_it_never_settles() -> None:
    filling = [(0, m, 1000.0 * min(m, 40.0)) for m in minutes(60)]
    assert fit.fit_segments({RSS: filling}, warm_up_min=5.0)[0].grows
    settled = fit.fit_segments({RSS: filling}, warm_up_min=5.0, settled_at={RSS: 40.0})[0]
    assert (settled.samples, settled.grows) == (20, False)
    never = fit.fit_segments({RSS: filling}, warm_up_min=5.0, settled_at={RSS: math.inf})[0]
    assert (never.samples, never.grows) == (0, True)


def test_every_figure_the_soak_samples_has_a_threshold_with_a_reason() -> None:
    driver = load_benchmark("soak_driver", ROOT / "benchmarks" / "soak_driver.py")
    assert set(driver.FIGURES) == set(fit.THRESHOLDS)
    assert all(t.reason for t in fit.THRESHOLDS.values())


def test_percentiles_report_p99() -> None:
    got = fit.percentiles([float(v) for v in range(1, 101)])
    assert got == {"n": 100, "p50": 50.5, "p99": 99.0, "max": 100.0}
    assert fit.percentiles([])["n"] == 0
