"""The pure arithmetic of the Flink comparison (no engine, no service): the refusal of a Flink plan
with Python operators, the steady-state window between two row markers of the watcher's samples,
end of input to visible from the sink topic's offsets, and the ratio table.

The watcher (:mod:`benchmarks.flink.watcher`) samples, every few tens of milliseconds, what the
sinks have made visible and what the engine's process tree has spent: a :class:`Sample`. Rows
visible in Kafka are the sum of the sink topic's last stable offsets (a transaction's commit
marker takes one offset per partition it wrote: the watcher takes one off per rise of a partition's
LSO); rows visible on S3 are the row counts of the committed Parquet files'
footers. A writer's steady state is the stretch between the first sample at or past ``lo`` rows
visible and the first at or past ``hi``: its rows, seconds, CPU-seconds, checkpoints (steps of the
visible count), and for S3 the files and bytes made visible in it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PYTHON_OPERATOR = re.compile(r"\b(Python\w*|StreamExecPython\w*|PythonCalc|PythonCorrelate)\b")
"""Operator names of Flink's Python runtime in an EXPLAIN text (``PythonCalc``,
``PythonGroupAggregate``, ``PythonCorrelate``, ...)."""


class PythonOnFlinkPathError(RuntimeError):
    """A Flink plan holds a Python operator: the comparison is meant to run Flink all in the JVM."""


def check_plan(plan: str) -> None:
    """Refuse a Flink EXPLAIN text that names any Python operator.

    Raises:
        PythonOnFlinkPathError: naming the operators found.
    """
    found = sorted(set(PYTHON_OPERATOR.findall(plan)))
    if found:
        raise PythonOnFlinkPathError(
            f"the Flink plan runs Python ({', '.join(found)}): use Flink SQL or the Java functions "
            "of benchmarks/flink/java instead"
        )


@dataclass(frozen=True)
class Sample:
    """One watcher sample.

    Attributes:
        t: ``time.time()`` of the sample, s.
        hw / lso: the sums over the sink topic's partitions of the high watermarks, and of the
            last stable offsets less the commit markers (0 without a Kafka sink).
        s3_rows / s3_files / s3_bytes: rows, files and bytes of the committed Parquet files under
            the run's prefix (0 without an S3 sink).
        cpu_s: CPU-seconds (user + system, reaped children included) of the engine's process tree.
    """

    t: float
    hw: int = 0
    lso: int = 0
    s3_rows: int = 0
    s3_files: int = 0
    s3_bytes: int = 0
    cpu_s: float = 0.0

    def visible(self, sinks: Sequence[str]) -> int:
        """Rows visible in every one of ``sinks`` (the least of them)."""
        counts = [self.lso if s == "kafka" else self.s3_rows for s in sinks]
        return min(counts) if counts else 0


@dataclass(frozen=True)
class Window:
    """A writer's steady state between two markers.

    Attributes:
        seconds: from the first sample at ``lo`` rows to the first at ``hi``.
        rows: rows made visible in it.
        cpu_s: CPU-seconds the engine's process tree spent in it.
        checkpoints: checkpoints committed in it: runs of rising samples of the first sink's
            visible count (a checkpoint's commits, one per subtask and file, may straddle
            samples), a rise within ``merge_s`` of the previous one taken as the same run.
        files / bytes: S3 files and bytes committed in it (0 without an S3 sink).
        started_at: ``time.time()`` of its first sample.
    """

    seconds: float
    rows: int
    cpu_s: float
    checkpoints: int
    files: int
    bytes: int
    started_at: float = 0.0

    def holds(self, t: float) -> bool:
        """Whether ``time.time()`` value ``t`` falls in the window."""
        return self.started_at <= t <= self.started_at + self.seconds

    @property
    def rows_per_s(self) -> float:
        """Steady throughput, rows/s."""
        return self.rows / self.seconds

    @property
    def rows_per_checkpoint(self) -> float:
        """Rows per committed checkpoint."""
        return self.rows / max(self.checkpoints, 1)

    @property
    def files_per_checkpoint(self) -> float:
        """S3 files per committed checkpoint."""
        return self.files / max(self.checkpoints, 1)

    @property
    def bytes_per_file(self) -> float:
        """Mean S3 file size, bytes (0 without files)."""
        return self.bytes / self.files if self.files else 0.0

    @property
    def cpu_s_per_million_rows(self) -> float:
        """CPU-seconds per million rows."""
        return self.cpu_s * 1e6 / self.rows

    def as_dict(self) -> dict[str, float]:
        """The window and its derived figures, rounded, for the JSON report."""
        return {
            "seconds": round(self.seconds, 3),
            "rows": self.rows,
            "rows_per_s": round(self.rows_per_s, 1),
            "cpu_s": round(self.cpu_s, 2),
            "cpu_s_per_million_rows": round(self.cpu_s_per_million_rows, 2),
            "cpu_cores_busy": round(self.cpu_s / self.seconds, 2),
            "checkpoints": self.checkpoints,
            "rows_per_checkpoint": round(self.rows_per_checkpoint, 1),
            "files": self.files,
            "files_per_checkpoint": round(self.files_per_checkpoint, 2),
            "bytes_per_file": round(self.bytes_per_file),
        }


def markers(rows: int, warm_up: float, end: float) -> tuple[int, int]:
    """The steady window's row markers: after ``warm_up`` and up to ``end`` (shares of ``rows``).

    Raises:
        ValueError: not ``0 <= warm_up < end <= 1``.
    """
    if not 0 <= warm_up < end <= 1:
        raise ValueError(f"need 0 <= warm_up < end <= 1, got {warm_up} and {end}")
    return round(rows * warm_up), round(rows * end)


def _first_at(samples: Sequence[Sample], sinks: Sequence[str], rows: int) -> int:
    for i, s in enumerate(samples):
        if s.visible(sinks) >= rows:
            return i
    raise ValueError(f"the writer never made {rows:,} rows visible in {', '.join(sinks)}")


def steady_window(
    samples: Sequence[Sample], sinks: Sequence[str], lo: int, hi: int, merge_s: float = 0.3
) -> Window:
    """The steady state between the first sample with ``lo`` rows visible and the first with
    ``hi`` (see the module docstring).

    Raises:
        ValueError: a marker was never reached, or both fall on the same sample.
    """
    a, b = _first_at(samples, sinks, lo), _first_at(samples, sinks, hi)
    if b <= a:
        raise ValueError(f"markers {lo:,} and {hi:,} fell on one sample: sample more often or widen them")
    first, last = samples[a], samples[b]
    # a checkpoint's commits (one per sink, subtask and file) land in one sample or in a run of
    # rising samples: a rise starts a new checkpoint only after a sample without one and more
    # than ``merge_s`` after the previous rise
    own = sinks[:1]
    steps, last_rise, rising = 0, float("-inf"), False
    for i in range(a + 1, b + 1):
        rose = samples[i].visible(own) > samples[i - 1].visible(own)
        if rose:
            steps += not rising and samples[i].t - last_rise > merge_s
            last_rise = samples[i].t
        rising = rose
    return Window(
        seconds=last.t - first.t,
        rows=last.visible(sinks) - first.visible(sinks),
        cpu_s=last.cpu_s - first.cpu_s,
        checkpoints=steps,
        files=last.s3_files - first.s3_files,
        bytes=last.s3_bytes - first.s3_bytes,
        started_at=first.t,
    )


def quiet(samples: Sequence[Sample], seconds: float) -> bool:
    """Whether the sinks' output (high watermarks, files) stayed the same for the last ``seconds``
    of ``samples`` (False while they span less)."""
    if not samples or samples[-1].t - samples[0].t < seconds:
        return False
    last = samples[-1]
    return all((s.hw, s.s3_files) == (last.hw, last.s3_files) for s in samples if s.t >= last.t - seconds)


def first_visible_s(samples: Sequence[Sample], sinks: Sequence[str], since: float) -> float | None:
    """Seconds from ``since`` (the job's submission) to the first row visible in every sink."""
    for s in samples:
        if s.visible(sinks) > 0:
            return round(s.t - since, 3)
    return None


def end_of_input_to_visible_ms(samples: Sequence[Sample], sinks: Sequence[str], rows: int) -> dict[str, Any]:
    """End of input to visible, from the sink topic's offsets (needs a Kafka sink).

    End of input: the first sample from which the high watermark stays at the value it has
    before the last commit (every record of the input is in the log, the last transaction still
    open: HW > LSO). Visible: the first sample with at least ``rows`` visible in each sink (for S3,
    the Parquet files' rows). Resolution: the sampling interval.

    Returns:
        sink → ms (None when not measurable: no Kafka sink, or never visible).
    """
    out: dict[str, Any] = dict.fromkeys(sinks)
    if "kafka" not in sinks:
        return out
    try:
        done = _first_at(samples, ["kafka"], rows)
    except ValueError:
        return out
    before = samples[done - 1] if done > 0 else samples[done]
    start = done - 1
    while start > 0 and samples[start - 1].hw == before.hw and samples[start - 1].hw > samples[start - 1].lso:
        start -= 1
    end_of_input = samples[max(start, 0)].t
    for sink in sinks:
        try:
            out[sink] = round((samples[_first_at(samples, [sink], rows)].t - end_of_input) * 1000, 1)
        except ValueError:
            out[sink] = None
    return out


def matched_interval_ms(rows_per_checkpoint: int, rows_per_s: float, floor_ms: int = 100) -> int:
    """Flink's checkpoint interval for ``rows_per_checkpoint`` at its measured ``rows_per_s``.

    Raises:
        ValueError: a non-positive rate or row count.
    """
    if rows_per_s <= 0 or rows_per_checkpoint <= 0:
        raise ValueError(f"need positive rows and rate, got {rows_per_checkpoint} and {rows_per_s}")
    return max(floor_ms, round(rows_per_checkpoint * 1000 / rows_per_s))


PAIRS: dict[str, tuple[str, str]] = {
    "kafka": ("twophase_kafka", "flink_kafka"),
    "kafka, Flink pooled ids": ("twophase_kafka", "flink_kafka_pooling"),
    "kafka, twophase's JVM writer": ("twophase_kafka_staged", "flink_kafka"),
    "kafka, JVM writer, Flink pooled ids": ("twophase_kafka_staged", "flink_kafka_pooling"),
    "s3": ("twophase_s3", "flink_s3"),
    "s3, Spark's Parquet writer": ("twophase_s3_staged", "flink_s3"),
    "all": ("twophase_all", "flink_all"),
    "kafka: Spark's own sink (at least once) ÷ Flink": ("spark_kafka", "flink_kafka"),
    "kafka: twophase ÷ Spark's own sink": ("twophase_kafka", "spark_kafka"),
    "kafka: twophase's JVM writer ÷ Spark's own sink": ("twophase_kafka_staged", "spark_kafka"),
}
"""Ratio rows: label → (first writer, second writer): twophase ÷ Flink unless the label says
otherwise (``spark_kafka``, Spark's own at-least-once sink, is the engine's floor, no peer)."""


def ratios(rates: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """First ÷ second steady throughput per pair of :data:`PAIRS` (twophase ÷ Flink: > 1 when
    twophase is faster): the ratio of the
    median rates, and the range of per-round ratios (round i against round i: they ran back to
    back). Pairs with a writer that did not run are left out."""
    out: dict[str, dict[str, float]] = {}
    for label, (ours, theirs) in PAIRS.items():
        if rates.get(ours) and rates.get(theirs):
            per_round = [o / t for o, t in zip(rates[ours], rates[theirs], strict=False)]
            out[label] = {
                "ratio": round(statistics.median(rates[ours]) / statistics.median(rates[theirs]), 3),
                "per_round_min": round(min(per_round), 3),
                "per_round_max": round(max(per_round), 3),
            }
    return out


def markdown(result: Mapping[str, Any]) -> str:
    """The report's tables: ratios, then per writer and round the steady window's figures."""
    lines = [
        "| sinks | twophase ÷ Flink, or as named (median) | per round |",
        "|---|---|---|",
    ]
    for label, r in result["ratios"].items():
        lines.append(f"| {label} | {r['ratio']:.2f} | {r['per_round_min']:.2f}–{r['per_round_max']:.2f} |")
    lines += [
        "",
        "| writer | round | rows/s | CPU-s per 1M rows | cores busy | rows per checkpoint | files per "
        "checkpoint | bytes per file | plan s | deploy s | first visible s | end of input → visible ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for writer, rounds in result["per_round"].items():
        for i, r in enumerate(rounds, start=1):
            w = r["window"]
            visible = ", ".join(
                f"{k} {v if v is not None else '–'}" for k, v in r["end_of_input_to_visible_ms"].items()
            )
            lines.append(
                f"| {writer} | {r.get('round', i)} | {w['rows_per_s']:,.0f} | "
                f"{w['cpu_s_per_million_rows']:.1f} | "
                f"{w['cpu_cores_busy']:.2f} | {w['rows_per_checkpoint']:,.0f} | "
                f"{w['files_per_checkpoint']:.1f} | "
                f"{w['bytes_per_file']:,.0f} | {_s(r.get('plan_s'))} | {_s(r.get('deploy_s'))} | "
                f"{_s(r.get('first_visible_s'))} | {visible} |"
            )
    failures = result.get("failures") or []
    if failures:
        lines += ["", "| failed writer | round | error |", "|---|---|---|"]
        lines += [f"| {f['writer']} | {f['round']} | {f['error'][:200]} |" for f in failures]
    if not result.get("complete", True):
        lines += ["", "(cut short: the rounds measured so far)"]
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"
