"""The soak's verdict (issue #44 item 5): a least-squares slope with a 95 % confidence interval
for every sampled figure, each against the threshold stated here, and the epochs' p99.

A figure *grows* when the upper bound of its slope's confidence interval is above its threshold:
a pass then says that, with 95 % confidence, the figure grows by less than the threshold an hour.
A noisy figure over a short run has a wide interval and can fail although it is flat; the remedy
is a longer run, not a looser threshold.

The driver restart cuts every run in two *segments* (``Sample.segment``), and each is fitted
apart, after its own warm-up: the restart starts a new Python process and a new JVM, so every
process figure (RSS, old generation, threads, descriptors) begins again from a fresh process's
value, and one line through both segments would fit that saw-tooth, not the growth within a
process. Storage figures do not restart, but fitting them by segment as well keeps one rule, and a
growth that lasts shows in both segments.

Pure functions over plain numbers (no Spark, no services): ``make test`` feeds them synthetic
series (``tests/benchmarks/test_soak_fit.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
"""Two-sided confidence of every slope's interval."""


@dataclass(frozen=True)
class Threshold:
    """How fast a figure may grow, per hour, and why.

    Attributes:
        per_hour: the largest tolerated growth an hour, in the figure's unit, or — ``relative`` —
            as a fraction of the segment's mean (0.10: 10 % of its mean an hour). ``None``: the
            figure is fitted and reported, never gated.
        relative: ``per_hour`` is a fraction of the mean, not an amount.
        reason: why this threshold (or why none).
    """

    per_hour: float | None
    relative: bool
    reason: str

    def limit(self, mean: float) -> float | None:
        """The tolerated growth an hour, in the figure's unit, for a segment of this ``mean``."""
        if self.per_hour is None:
            return None
        return self.per_hour * abs(mean) if self.relative else self.per_hour


_LEAK = (
    "a driver meant to run for weeks: 1 MB an hour is 24 MB a day, 170 MB a week (the issue's own "
    "example); a leak per epoch (about a thousand an hour) or per sample shows far above it"
)
_POOL = (
    "a leak per epoch, per task or per restart of a client shows as hundreds an hour; pools that "
    "grow and shrink with the load (delta-rs's tokio runtime, py4j's callback threads) move by a few"
)
_TIME = (
    "a cost that grows with what the job has done (a table, a log, a checkpoint that is read whole) "
    "showed as +39 % in an hour in the first soak; 10 % an hour is 2.4× in a day. The machine's "
    "load moves these too: run it on a quiet machine (the load is sampled)"
)
_STORAGE = (
    "retained_checkpoints and Spark's minBatchesToRetain bound them: a flat series with the "
    "epochs' own variation; growth means state kept for every epoch"
)

THRESHOLDS: Mapping[str, Threshold] = {
    "Python driver RSS MB": Threshold(1.0, False, _LEAK),
    "JVM driver RSS MB": Threshold(1.0, False, _LEAK),
    "JVM old generation after GC, less the block store MB": Threshold(
        1.0,
        False,
        "the JVM's live heap after the sampler's full collections (the old pool's collection "
        "usage) but Spark's block store, whose broadcasts come and go with the micro-batches: " + _LEAK,
    ),
    "JVM old generation after GC MB": Threshold(
        None,
        False,
        "the whole live heap, block store included: every micro-batch's broadcast relations stay in "
        "the block store until Spark's cleaner removes them, a saw-tooth of 300 MB in the 2026-12-06 "
        "soak that no 2-hour fit can judge at 1 MB an hour; gated without the block store",
    ),
    "JVM block store MB": Threshold(
        None,
        False,
        "Spark's storage memory in use, bounded by its unified memory manager (it spills to disk "
        "when full): reported, to show the saw-tooth the gated heap figure leaves out",
    ),
    "epoch ms (median per epoch)": Threshold(0.10, True, _TIME),
    "commit ms (median per epoch)": Threshold(0.10, True, _TIME),
    **{
        f"commit ms {sink} (median per epoch)": Threshold(
            0.10, True, "one sink's share of the commit time, to say which one grows: " + _TIME
        )
        for sink in ("kafka", "s3", "delta")
    },
    "write ms (median per epoch)": Threshold(0.10, True, _TIME),
    "persist ms (median per epoch)": Threshold(0.10, True, _TIME),
    "Python driver threads": Threshold(2.0, False, _POOL),
    "JVM driver threads": Threshold(2.0, False, _POOL),
    "Python driver open fds": Threshold(5.0, False, _POOL + "; sockets to S3 and Kafka come and go"),
    "JVM driver open fds": Threshold(5.0, False, _POOL + "; jars, sockets and shuffle files come and go"),
    "checkpoint storage bytes": Threshold(0.05, True, _STORAGE),
    "Spark checkpoint bytes": Threshold(
        0.05,
        True,
        _STORAGE + "; fitted only from the job's batch ``spark.sql.streaming.minBatchesToRetain`` on "
        "(100 by default: until then Spark keeps every batch's offsets and commits by design, which "
        "took 30 minutes in the first soak, longer than its warm-up)",
    ),
    "Kafka transactional ids": Threshold(
        1.0, False, "one pool of ids per sink, reused every epoch: new ids an hour mean a leak of producers"
    ),
    "Delta log commits since its checkpoint": Threshold(
        None,
        False,
        "a saw-tooth by design: the Delta committer writes a log checkpoint every "
        "delta.checkpointInterval commits (10 unless the table sets it)",
    ),
    "Delta log bytes": Threshold(
        None,
        False,
        "Delta's default retention keeps 30 days of log entries and 7 days of tombstones, so within "
        "hours the log grows with every commit by design; what that costs the job is gated as "
        "commit ms and epoch ms",
    ),
    "JVM native memory outside the heap MB": Threshold(
        None,
        False,
        "Native Memory Tracking's committed memory but the heap: what the JVM's RSS (gated) is made "
        "of, by category in the samples, to say what grows",
    ),
    "Python driver RSS of mapped files MB": Threshold(
        None,
        False,
        "of the RSS (gated), the pages of mapped files (RssFile: delta-rs's 100 MB library, "
        "pyarrow's): they come in as code paths first run, bounded by the files' size",
    ),
    "JVM driver RSS of mapped files MB": Threshold(
        None,
        False,
        "of the RSS (gated), the pages of mapped files (RssFile: libjvm, the JDK's modules)",
    ),
    "JVM code cache MB": Threshold(
        None,
        False,
        "of the RSS (gated), the JIT's compiled code (Native Memory Tracking's Code): it grows while "
        "the JVM still compiles, bounded by -XX:ReservedCodeCacheSize (240 MB by default)",
    ),
    "Python driver arrow memory MB": Threshold(
        None,
        False,
        "of the RSS (gated), what pyarrow's pool holds: the committables' columns between an "
        "epoch's pre-commit and its commit",
    ),
    "Python driver C heap in use MB": Threshold(
        None,
        False,
        "of the RSS (gated), glibc's allocated bytes (delta-rs's Rust side among them): live memory, "
        "where the rest of the RSS beside the mapped files is the allocators' free pages",
    ),
    "Python objects tracked": Threshold(
        None,
        False,
        "the Python driver's objects, by type in the samples, to say what grows if its RSS (gated) does",
    ),
    "machine load (1 min)": Threshold(None, False, "the machine, not the job: reported beside the figures"),
}
"""Every sampled figure's threshold, in one place, with its reason (slopes per hour)."""


@dataclass(frozen=True)
class Slope:
    """A least-squares line through one segment of one figure.

    Attributes:
        figure: the figure's name (a key of :data:`THRESHOLDS`).
        segment: the driver's segment (0 before the restart, 1 after).
        samples: points fitted; ``minutes``: their span.
        mean: the points' mean, in the figure's unit.
        per_hour / low / high: the slope an hour and its confidence interval (:data:`CONFIDENCE`).
        limit: the tolerated growth an hour (``None``: reported only).
    """

    figure: str
    segment: int
    samples: int
    minutes: float
    mean: float
    per_hour: float
    low: float
    high: float
    limit: float | None

    @property
    def grows(self) -> bool:
        """Whether the interval's upper bound is above the limit (too few points: it grows, since
        nothing says it does not)."""
        if self.limit is None:
            return False
        return not math.isfinite(self.high) or self.high > self.limit

    def line(self) -> str:
        """One line for the log and the exit message."""
        limit = "reported only" if self.limit is None else f"limit {self.limit:.4g}/h"
        return (
            f"{self.figure} (segment {self.segment}): {self.per_hour:+.4g}/h "
            f"[{self.low:+.4g}, {self.high:+.4g}] over {self.samples} samples, "
            f"{self.minutes:.0f} min; {limit}"
        )


def fit(
    figure: str, segment: int, minutes: Sequence[float], values: Sequence[float], threshold: Threshold
) -> Slope:
    """The slope an hour of ``values`` against ``minutes`` (scipy.stats.linregress) with its
    two-sided :data:`CONFIDENCE` interval (Student's t, ``n - 2`` degrees of freedom).

    Fewer than three points give an infinite interval (a line through two points has no error
    estimate); a constant series gives slope 0 with a zero-width interval.

    Raises:
        ValueError: ``minutes`` and ``values`` differ in length.
    """
    if len(minutes) != len(values):
        raise ValueError(f"{figure}: {len(minutes)} minutes for {len(values)} values")
    mean = float(np.mean(values)) if len(values) else 0.0
    span = (max(minutes) - min(minutes)) if minutes else 0.0
    limit = threshold.limit(mean)
    if len(values) < 3 or span <= 0:
        return Slope(figure, segment, len(values), span, mean, math.nan, -math.inf, math.inf, limit)
    if float(np.ptp(values)) == 0.0:  # constant: no growth, and linregress's error would be 0 / 0
        return Slope(figure, segment, len(values), span, mean, 0.0, 0.0, 0.0, limit)
    hours = np.asarray(minutes, dtype=float) / 60.0
    result = stats.linregress(hours, np.asarray(values, dtype=float))
    t = float(stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 2))
    half = t * float(result.stderr)
    slope = float(result.slope)
    return Slope(figure, segment, len(values), span, mean, slope, slope - half, slope + half, limit)


def fit_segments(
    series: Mapping[str, Sequence[tuple[int, float, float]]],
    warm_up_min: float,
    settled_at: Mapping[str, float] | None = None,
) -> list[Slope]:
    """Every figure's slope in every segment: ``series`` maps a figure to its
    ``(segment, minute, value)`` points; each segment's first ``warm_up_min`` minutes (from its
    own first point) are left out, and so is every point of a figure before its minute in
    ``settled_at`` (a figure that fills up to a bound the job reaches only later, such as Spark's
    checkpoint before its retained batches: ``math.inf`` when the run never got there, so nothing
    of it is fitted and it counts as growing).

    Raises:
        KeyError: a figure without a threshold in :data:`THRESHOLDS`.
    """
    slopes = []
    for figure, points in series.items():
        threshold = THRESHOLDS[figure]
        settled = (settled_at or {}).get(figure, -math.inf)
        for segment in sorted({p[0] for p in points}):
            mine = [(m, v) for s, m, v in points if s == segment]
            start = min(m for m, _ in mine)
            kept = [(m, v) for m, v in mine if m >= max(start + warm_up_min, settled)]
            slopes.append(fit(figure, segment, [m for m, _ in kept], [v for _, v in kept], threshold))
    return slopes


def growing(slopes: Sequence[Slope]) -> list[Slope]:
    """The slopes above their thresholds."""
    return [s for s in slopes if s.grows]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """Median, p99 and maximum of ``values`` (numpy's linear interpolation); zeros when empty."""
    if not values:
        return {"n": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    array = np.asarray(values, dtype=float)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(array, 50)), 1),
        "p99": round(float(np.percentile(array, 99)), 1),
        "max": round(float(array.max()), 1),
    }
