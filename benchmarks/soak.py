"""The soak: the flights job's three sinks on an endless stream for hours, with a driver restart
in the middle, judged by the slope of every figure (issues #29 item 5 and #44 item 5).

A streaming job runs for weeks in production, so this measures how its cost grows with time, and
fails when something grows. The stream is the flights job's
(:func:`~twophase.integration.jobs.flights.enrich` on January 2013's flights), fed continuously by
Spark's ``rate`` source in ``--partitions`` partitions (64 by default: 64 subtasks an epoch, each
with its own Kafka transaction and its own S3 and Delta files): row ``v`` is flight ``v mod n`` of
the month, with ``flight_id = soak-<v>``, so every id is unique and the read-back is exact. A
``processingTime`` trigger runs it into the real Kafka, MinIO and Delta sinks, with twophase's
checkpoints, Spark's checkpoint and the Delta table all on S3 (MinIO), the table at Delta's default
retention.

**The restart.** The job runs in a driver process of its own (``benchmarks/soak_driver.py``).
Halfway (half of ``--minutes`` or of ``--epochs``, whichever comes first) the soak kills it —
SIGKILL to its process group: Python, its JVM and the Python workers die at once, in whatever
epoch they were — and starts a second driver, which restores the job from the ``s3://`` checkpoint
(re-commit, abort lingering, Spark replays the open batch from its ``s3a://`` checkpoint) and runs
until ``--minutes`` have passed or ``--epochs`` epochs are done in all; then it stops with a drain
(the final checkpoint, FLIP-147).

**The read-back.** Spark's last committed batch says how many rows the rate source produced
(its offset is seconds since the query was created, times ``--rows-per-second``); every sink is
read back by a reader that is not its writer (a ``read_committed`` consumer, pyarrow's S3 dataset,
deltalake) and must hold exactly ``soak-0 … soak-<rows-1>``, each once; lingering state is counted.

**The verdict.** Each driver samples itself every ``--sample-s`` seconds
(:class:`~benchmarks.soak_driver.Sample`: latency medians, each sink's commit time, both
processes' RSS, threads and open descriptors, the JVM's old generation after GC from its
management beans and, of it, Spark's block store (gated without it: the micro-batches' broadcasts
come and go there), its native memory by Native Memory Tracking category, the checkpoints' and the
Delta log's bytes on S3, the Kafka ids; and, to say what grows when something does, the Python
driver's objects by type and the JVM's threads by name) and logs every epoch. The driver JVM is
set as a long-running streaming job sets it (``soak_driver.DRIVER_CONF``: the heap committed at
start, Spark's status store bounded to 100 jobs, stages and SQL executions). Every figure gets a slope with a
95 % confidence interval per segment (``benchmarks/soak_fit.py``, where each threshold and its
reason is stated); the soak exits non-zero naming every figure whose slope's upper bound is above
its threshold, and when a sink is not exact. p50, p99 and the maximum of epoch and commit times
come from every epoch after warm-up.

With ``--maintain-every-min``, the table is maintained as a production Delta table is, by a
process of its own beside the job: OPTIMIZE (compaction), then VACUUM and log cleanup at the
table's retention (Delta's defaults — 7 days of removed files, 30 days of log — unless
``--retention-min`` and ``--log-retention-min`` set it). Each maintenance's figures go to
``maintenance.jsonl``.

``make soak`` (services up first); ``python -m benchmarks.soak --help`` for the settings. Writes
``samples.jsonl``, ``epochs.jsonl``, ``result.json`` (read-back, percentiles, slopes), the plot
``soak.png`` (matplotlib) and ``table.md`` (the slopes) to ``--out``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from benchmarks import common, soak_fit
from benchmarks.soak_driver import FIGURES, SINKS, Process, Sample, loaded, s3_path, sink_commit_figure

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
    from twophase.integration.jobs.flights_spec import FlightsJobSpec

__all__ = ["FIGURES", "Process", "Sample"]

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
BUCKET = "twophase-soak"
MONTH_GLOB = "flights-2013-01-*.parquet"
"""The month whose flights the rate source cycles through (27,004 flights)."""


@dataclass(frozen=True)
class Retention:
    """How long a maintained table keeps removed data files and log entries, minutes."""

    files_min: int
    log_min: int

    def properties(self) -> dict[str, str]:
        """The Delta table properties (Delta PROTOCOL.md, "Table properties") that say so."""
        return {
            "delta.deletedFileRetentionDuration": f"interval {self.files_min} minutes",
            "delta.logRetentionDuration": f"interval {self.log_min} minutes",
        }


def maintain(
    table_uri: str, retention: Retention | None, storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    """One round of table maintenance (run in its own process): set ``retention`` if given and
    not set (``None``: Delta's defaults), OPTIMIZE (compact), VACUUM (removed files older than the
    table's retention), and expire old log entries. Returns what it did: files compacted and
    added, files vacuumed, seconds."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    started = time.monotonic()
    try:
        table = DeltaTable(table_uri, storage_options=storage_options)
    except TableNotFoundError:  # the job has not committed its first epoch yet
        return {"skipped": "no table yet"}
    if retention is not None:
        wanted = retention.properties()
        if any(table.metadata().configuration.get(k) != v for k, v in wanted.items()):
            table.alter.set_table_properties(wanted)
    compacted = table.optimize.compact()
    vacuumed = table.vacuum(dry_run=False)  # the table's deletedFileRetentionDuration
    table.cleanup_metadata()
    return {
        "version": table.version(),
        "files_removed": compacted.get("numFilesRemoved", 0),
        "files_added": compacted.get("numFilesAdded", 0),
        "vacuumed": len(vacuumed),
        "seconds": round(time.monotonic() - started, 2),
    }


def maintenance_round(
    table_uri: str, retention: Retention | None, storage_options: dict[str, str] | None
) -> dict[str, Any]:
    """:func:`maintain` in the maintainer's process, a failure returned as ``{"error": ...}``:
    delta-rs's exceptions do not pickle back to the soak, and a failed round is a finding to
    report (the soak fails on it), not a reason to leave the job's driver running unattended."""
    try:
        return maintain(table_uri, retention, storage_options)
    except Exception as e:  # any: reported whole to the parent process, which fails the soak
        return {"error": f"{type(e).__name__}: {e}"}


def month_table(spec: FlightsJobSpec, scratch: Path) -> tuple[str, int]:
    """January's flights with a ``slot`` column 0..n-1, as one Parquet file under ``scratch``;
    returns its path and ``n``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from twophase.integration.jobs.flights_cluster import input_locations

    flights_dir, _, _ = input_locations(spec)
    paths = sorted(Path(flights_dir).glob(MONTH_GLOB))
    table = pa.concat_tables(pq.read_table(p) for p in paths)
    table = table.append_column("slot", pa.array(range(table.num_rows), pa.int64()))
    path = scratch / "month.parquet"
    pq.write_table(table, path)
    return str(path), table.num_rows


@dataclass(frozen=True)
class Produced:
    """The rows the rate source produced, from Spark's checkpoint (no ramp-up: a batch's end
    offset, seconds since the query was created, times the rows per second).

    Attributes:
        committed: up to the last batch in Spark's commit log.
        planned: up to the last batch in its offset log. A drain's final checkpoint commits the
            last batch to the sinks before Spark records it in its commit log (a restart would
            replay it and twophase would find it committed), so the sinks hold either.
    """

    committed: int
    planned: int

    def expected(self, highest: int | None) -> int:
        """The rows every sink must hold, given the highest ``soak-<v>`` any sink holds: the
        planned rows if a sink holds a row beyond the committed ones, else the committed rows."""
        return self.planned if highest is not None and highest >= self.committed else self.committed


def rows_produced(fs: pafs.FileSystem, spark_checkpoint: str, rows_per_second: int) -> Produced:
    """The rows the rate source produced by Spark's last committed and last planned batches
    (``commits/<n>``, ``offsets/<n>``, whose last line is the rate source's offset);
    ``spark_checkpoint`` is a path of ``fs``; no batch counts as 0 rows (a job killed and drained
    before its first batch committed).
    """
    import pyarrow.fs as pafs

    def batches(folder: str) -> list[int]:
        infos = fs.get_file_info(pafs.FileSelector(f"{spark_checkpoint}/{folder}", allow_not_found=True))
        return [int(i.base_name) for i in infos if i.base_name.isdigit()]

    def rows(batch: int) -> int:
        with fs.open_input_stream(f"{spark_checkpoint}/offsets/{batch}") as f:
            return int(f.read().decode().strip().splitlines()[-1]) * rows_per_second

    committed, planned = batches("commits"), batches("offsets")
    return Produced(rows(max(committed)) if committed else 0, rows(max(planned)) if planned else 0)


def exact(name: str, ids: Sequence[str], total: int) -> dict[str, Any]:
    """One sink's read-back against ``soak-0 .. soak-<total-1>``, each exactly once."""
    expected = {f"soak-{v}" for v in range(total)}
    seen = set(ids)
    return {
        "sink": name,
        "records": len(ids),
        "duplicates": len(ids) - len(seen),
        "missing": len(expected - seen),
        "unexpected": len(seen - expected),
        "exact": len(ids) == total and seen == expected,
    }


def read_back(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, produced: Produced
) -> tuple[int, list[dict[str, Any]]]:
    """Every sink's ``flight_id``s, each with a reader that is not its writer (a ``read_committed``
    consumer, pyarrow's S3 dataset, deltalake), against the rows ``produced`` (the same total for
    all three), and what each left lingering. Returns the total and the sinks' reports."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from twophase.integration.jobs.flights_base_sinks import DELTA_SINK, KAFKA_SINK, S3_SINK, build_sinks
    from twophase.integration.readback import read_topic
    from twophase.integration.verify import lingering_items, s3_filesystem

    kafka = [
        json.loads(r.value or b"{}")["flight_id"]
        for r in read_topic(endpoints.kafka_bootstrap, spec.topic, "read_committed", 600.0)
    ]
    import pyarrow.fs as pafs
    from deltalake.exceptions import TableNotFoundError

    fs = s3_filesystem(endpoints)
    prefix = f"{spec.bucket}/{spec.s3_prefix.strip('/')}"
    s3: list[str] = []
    if fs.get_file_info(prefix).type != pafs.FileType.NotFound:  # nothing committed: no prefix at all
        files = ds.dataset(prefix, filesystem=fs, partitioning="hive").to_table(columns=["flight_id"])
        s3 = files.column("flight_id").to_pylist()
    options = build_sinks(spec, endpoints)[2].config.delta_storage_options()
    try:
        delta = DeltaTable(spec.delta_uri, storage_options=options).to_pyarrow_table(columns=["flight_id"])
        in_delta = delta.column("flight_id").to_pylist()
    except TableNotFoundError:  # nothing committed: no table
        in_delta = []
    ids = {
        KAFKA_SINK: kafka,
        S3_SINK: s3,
        DELTA_SINK: in_delta,
    }
    numbers = [
        int(i.removeprefix("soak-"))
        for found in ids.values()
        for i in found
        if i.removeprefix("soak-").isdigit()
    ]
    total = produced.expected(max(numbers, default=None))
    reports = [exact(sink, found, total) for sink, found in ids.items()]
    for report in reports:
        report["lingering"] = len(lingering_items(spec, endpoints, report["sink"]).items)
    return total, reports


SPARK_RETAINED_BATCHES = 100
"""``spark.sql.streaming.minBatchesToRetain`` (Spark's default; the soak does not set it): until
the job's batch of this id, Spark's checkpoint keeps every batch's offsets and commits."""


def spark_checkpoint_settled(
    epochs: Sequence[dict[str, Any]], retained: int = SPARK_RETAINED_BATCHES
) -> float:
    """The minute the first epoch of Spark batch ``retained`` or later was logged: from then on
    Spark's checkpoint holds a bounded window of batches; ``math.inf`` if the run never got there."""
    return min(
        (float(e["minute"]) for e in epochs if e.get("batch_id") is not None and e["batch_id"] >= retained),
        default=math.inf,
    )


EPOCH_FIGURES = {
    "write ms (median per epoch)": "write_ms",
    "persist ms (median per epoch)": "persist_ms",
    "commit ms (median per epoch)": "commit_ms",
    "epoch ms (median per epoch)": "epoch_ms",
    **{sink_commit_figure(sink): f"commit_ms_{sink}" for sink in SINKS},
}
"""The time figures, fitted through every epoch's own time (``epochs.jsonl``, each at its sample's
minute) rather than one median a sample: about 7 points a minute instead of 1, so an interval
about 2.6 times narrower for the same run."""


def slopes(
    samples: Sequence[Sample], warm_up_min: float, epochs: Sequence[dict[str, Any]] = ()
) -> list[soak_fit.Slope]:
    """Every figure's slope per segment after each segment's warm-up (``soak_fit``): the time
    figures through every epoch (:data:`EPOCH_FIGURES`), the others through the samples; Spark's
    checkpoint bytes only once it holds its retained batches (:func:`spark_checkpoint_settled`)."""
    series = {
        name: [(s.segment, s.minute, float(figure(s))) for s in samples] for name, figure in FIGURES.items()
    }
    for name, field in EPOCH_FIGURES.items():  # every epoch's own time, where the log has it
        logged = [(int(e["segment"]), float(e["minute"]), float(e[field])) for e in epochs if field in e]
        if logged:
            series[name] = logged
    settled = {"Spark checkpoint bytes": spark_checkpoint_settled(epochs)}
    return soak_fit.fit_segments(series, warm_up_min, settled)


def latencies(
    epochs: Sequence[dict[str, Any]], samples: Sequence[Sample], warm_up_min: float
) -> dict[str, Any]:
    """p50, p99 and maximum of epoch and commit times, ms, over every epoch after its segment's
    warm-up: per segment and in all."""
    starts = {seg: min(s.minute for s in samples if s.segment == seg) for seg in {s.segment for s in samples}}
    kept = [e for e in epochs if e["segment"] in starts and e["minute"] >= starts[e["segment"]] + warm_up_min]
    out: dict[str, Any] = {}
    for field in ("epoch_ms", "commit_ms"):
        out[field] = {"all": soak_fit.percentiles([e[field] for e in kept])}
        for seg in sorted(starts):
            out[field][f"segment {seg}"] = soak_fit.percentiles(
                [e[field] for e in kept if e["segment"] == seg]
            )
    return out


def table(fitted: Sequence[soak_fit.Slope]) -> str:
    """A Markdown table: each figure's slope an hour per segment, its interval, limit and verdict."""
    rows = [
        "| figure | segment | samples | mean | slope an hour | 95 % interval | limit an hour | verdict |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for s in fitted:
        limit = "—" if s.limit is None else f"{s.limit:,.3g}"
        verdict = "reported" if s.limit is None else ("**grows**" if s.grows else "flat")
        rows.append(
            f"| {s.figure} | {s.segment} | {s.samples} | {s.mean:,.1f} | {s.per_hour:+,.3g} | "
            f"[{s.low:+,.3g}, {s.high:+,.3g}] | {limit} | {verdict} |"
        )
    return "\n".join(rows) + "\n"


def plot(samples: Sequence[Sample], path: Path, title: str) -> None:
    """Every figure against minutes, one panel each, a line per segment, as a PNG (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = -(-len(FIGURES) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 3 * rows), sharex=True)
    segments = sorted({s.segment for s in samples})
    for ax, (name, figure) in zip(axes.flat, FIGURES.items(), strict=False):
        for seg in segments:
            mine = [s for s in samples if s.segment == seg]
            ax.plot([s.minute for s in mine], [figure(s) for s in mine], linewidth=1, label=f"driver {seg}")
        ax.set_title(name, fontsize=9)
        # from 0, with headroom: a flat line at its maximum would sit on the panel's frame
        finite = [v for v in (figure(s) for s in samples) if math.isfinite(v)]
        ax.set_ylim(0, max([*finite, 0.0]) * 1.1 or 1.0)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(FIGURES) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


@dataclass(frozen=True)
class Settings:
    """A soak's settings (the command's options and their defaults; see the module docstring).

    Attributes:
        minutes / epochs: it stops at whichever comes first; the restart is at half of either.
        rows_per_second: the rate source's rows per second.
        partitions: the rate source's partitions (subtasks per epoch).
        trigger_ms: the ``processingTime`` trigger, ms.
        sample_s: seconds between samples.
        warm_up_min: minutes of each segment left out of the slopes and percentiles.
        maintain_every_min: minutes between Delta table maintenances; ``None``: never.
        retention: what a maintained table keeps; ``None``: Delta's defaults.
    """

    minutes: float
    epochs: int
    rows_per_second: int
    partitions: int
    trigger_ms: int
    sample_s: float
    warm_up_min: float
    maintain_every_min: float | None
    retention: Retention | None


class Drivers:
    """Starts the soak's driver processes (``benchmarks/soak_driver.py``), each in its own
    process group, pointed at the services by ``TWOPHASE_*`` variables."""

    def __init__(self, out: Path, work: Path, env: dict[str, str], common_args: list[str]) -> None:
        self._out = out
        self._work = work
        self._env = env
        self._args = common_args

    def start(self, segment: int, until: float, epochs: int) -> subprocess.Popen[bytes]:
        """Start driver ``segment``, to stop at ``until`` (Unix time) or after ``epochs`` epochs."""
        command = [sys.executable, "-m", "benchmarks.soak_driver", "--segment", str(segment)]
        command += ["--until", str(until), "--epochs", str(epochs), *self._args]
        with (self._out / f"driver-{segment}.log").open("ab") as driver_log:
            return subprocess.Popen(
                command,
                cwd=REPO,
                env=self._env,
                stdout=driver_log,
                stderr=driver_log,
                start_new_session=True,  # its own group: driver, JVM and workers die together
            )


def last_sample(out: Path, segment: int) -> Sample | None:
    """The newest sample ``segment``'s driver wrote, if any."""
    path = out / "samples.jsonl"
    if not path.exists():
        return None
    mine = [
        s for s in (loaded(line) for line in path.read_text().splitlines() if line) if s.segment == segment
    ]
    return mine[-1] if mine else None


def soak(out: Path, settings: Settings) -> dict[str, Any]:
    """Run the soak; see the module docstring. Returns the result written to ``result.json``.

    Raises:
        click.ClickException: a driver ended before its time, or did not finish.
    """
    from twophase.integration.jobs.flights import FlightsEndpoints, build_sinks
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.services import kafka_service, s3_service
    from twophase.integration.services.launcher import given_env
    from twophase.integration.spark import SCRATCH_ENV
    from twophase.integration.verify import s3_filesystem

    env = common.machine()
    run_id = f"soak_{uuid.uuid4().hex[:8]}"
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("samples.jsonl", "epochs.jsonl", "maintenance.jsonl", "segment-0.json", "segment-1.json"):
        (out / stale).unlink(missing_ok=True)
    work = out / run_id
    work.mkdir()
    with kafka_service() as bootstrap, s3_service() as s3:
        endpoints = FlightsEndpoints(bootstrap, s3)
        s3.ensure_bucket(BUCKET)
        spec = FlightsJobSpec(
            job_id=run_id,
            work_dir=str(work / "job"),
            bucket=BUCKET,
            checkpoint_uri=f"s3://{BUCKET}/checkpoints/{run_id}",
            spark_checkpoint_uri=f"s3a://{BUCKET}/spark-checkpoints/{run_id}",
            delta_uri=f"s3://{BUCKET}/delta/{run_id}",
        )
        spec.save()
        month, n = month_table(spec, work)
        delta_options = build_sinks(spec, endpoints)[2].config.delta_storage_options()
        child_env = {
            **os.environ,
            **given_env(bootstrap, s3),
            "PYSPARK_PYTHON": sys.executable,
            SCRATCH_ENV: str(work / "spark-scratch"),  # what the killed driver leaves stays with the run
        }
        started = time.time()
        end = started + settings.minutes * 60
        args = ["--work-dir", spec.work_dir, "--out", str(out), "--started", str(started)]
        args += ["--month", month, "--flights", str(n), "--rows-per-second", str(settings.rows_per_second)]
        args += ["--partitions", str(settings.partitions), "--trigger-ms", str(settings.trigger_ms)]
        args += ["--sample-s", str(settings.sample_s)]
        drivers = Drivers(out, work, child_env, args)
        maintainer = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        rounds = (out / "maintenance.jsonl").open("w")
        maintenance: Future[dict[str, Any]] | None = None
        maintenance_errors: list[str] = []
        every = settings.maintain_every_min
        next_maintenance = time.monotonic() + (every or 0) * 60

        def tend_table() -> None:
            nonlocal maintenance, next_maintenance
            if maintenance is not None and maintenance.done():
                done = {"minute": round((time.time() - started) / 60, 2), **maintenance.result()}
                if "error" in done:
                    maintenance_errors.append(
                        f"Delta maintenance at minute {done['minute']}: {done['error']}"
                    )
                rounds.write(json.dumps(done) + "\n")
                rounds.flush()
                log.info("soak maintenance: %s", done)
                maintenance = None
            if every and maintenance is None and time.monotonic() >= next_maintenance:
                maintenance = maintainer.submit(
                    maintenance_round, spec.delta_uri, settings.retention, delta_options
                )
                next_maintenance += every * 60

        first = drivers.start(0, end, settings.epochs)
        second: subprocess.Popen[bytes] | None = None
        try:
            restart_at = started + settings.minutes * 60 / 2
            while True:  # the first driver until half the time or half the epochs, then kill -9
                if first.poll() is not None:
                    raise click.ClickException(
                        f"soak driver 0 ended by itself ({first.returncode}): see driver-0.log"
                    )
                sample = last_sample(out, 0)
                if time.time() >= restart_at or (sample is not None and sample.epochs >= settings.epochs / 2):
                    break
                tend_table()
                time.sleep(2.0)
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            killed = last_sample(out, 0)
            killed_at = round((time.time() - started) / 60, 2)
            log.info(
                "soak: driver 0 killed at minute %.1f after %s epochs", killed_at, killed and killed.epochs
            )
            second = drivers.start(1, end, max(1, settings.epochs - (killed.epochs if killed else 0)))
            while second.poll() is None:
                tend_table()
                time.sleep(2.0)
            if second.returncode != 0:
                raise click.ClickException(f"soak driver 1 failed ({second.returncode}): see driver-1.log")
            if maintenance is not None:
                maintenance.result()
                tend_table()
        finally:  # the soak failed: no driver of it goes on running unattended
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        maintainer.shutdown(wait=True)
        rounds.close()
        fs = s3_filesystem(endpoints)
        produced = rows_produced(fs, s3_path(spec.spark_checkpoint), settings.rows_per_second)
        total, reports = read_back(spec, endpoints, produced)
    samples = [loaded(line) for line in (out / "samples.jsonl").read_text().splitlines() if line]
    epochs = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines() if line]
    finished = json.loads((out / "segment-1.json").read_text())
    result = {
        **common.load_at_end(env),
        "job": run_id,
        "minutes": samples[-1].minute if samples else 0.0,
        "killed_at_minute": killed_at,
        "epochs": {"driver 0 (killed)": killed.epochs if killed else 0, "driver 1": finished["epochs"]},
        "records": total,
        "produced": dataclasses.asdict(produced),
        "rows_per_second": settings.rows_per_second,
        "partitions": settings.partitions,
        "trigger_ms": settings.trigger_ms,
        "drain_s": finished["drain_s"],
        "maintain_every_min": every,
        "retention_min": dataclasses.asdict(settings.retention) if settings.retention else "Delta's defaults",
        "read_back": reports,
        "maintenance_errors": maintenance_errors,
    }
    return judge(out, samples, epochs, result, settings.warm_up_min)


def judge(
    out: Path,
    samples: Sequence[Sample],
    epochs: Sequence[dict[str, Any]],
    result: dict[str, Any],
    warm_up_min: float,
    draw: bool = True,
) -> dict[str, Any]:
    """Fit the slopes, take the percentiles, write ``result.json``, ``soak.png`` (unless not
    ``draw``: matplotlib takes a minute on a busy machine) and ``table.md``; returns the result
    with ``latency_ms``, ``old_generation_mb``, ``slopes`` and ``failures`` (one line per growing
    figure or inexact sink)."""
    fitted = slopes(samples, warm_up_min, epochs)
    old_gen = [s.jvm_old_gen_mb for s in samples]
    failures = [s.line() for s in soak_fit.growing(fitted)]
    failures += [f"sink {r['sink']} is not exact: {r}" for r in result.get("read_back", []) if not r["exact"]]
    failures += list(result.get("maintenance_errors", []))
    failures += [
        f"sink {r['sink']} left {r['lingering']} lingering"
        for r in result.get("read_back", [])
        if r["lingering"]
    ]
    result = {
        **result,
        "latency_ms": latencies(epochs, samples, warm_up_min),
        "old_generation_mb": {"first": old_gen[0], "last": old_gen[-1], "max": max(old_gen)}
        if old_gen
        else {},
        "slopes": [dataclasses.asdict(s) | {"grows": s.grows} for s in fitted],
        "failures": failures,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    title = (
        f"soak {result['job']}: {result['minutes']:.0f} min, {result['records']:,} records, "
        f"{result['partitions']} partitions, driver killed at minute {result['killed_at_minute']:.0f}"
    )
    if draw:
        plot(samples, out / "soak.png", title)
    (out / "table.md").write_text(table(fitted))
    return result


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("build/soak"), show_default=True)
@click.option("--minutes", type=float, default=120.0, show_default=True, help="stop after this long …")
@click.option("--epochs", type=int, default=5000, show_default=True, help="… or after this many epochs")
@click.option("--rows-per-second", type=int, default=200, show_default=True)
@click.option(
    "--partitions", type=click.IntRange(min=1), default=64, show_default=True, help="subtasks per epoch"
)
@click.option("--trigger-ms", type=int, default=500, show_default=True, help="processingTime trigger")
@click.option("--sample-s", type=float, default=60.0, show_default=True)
@click.option(
    "--warm-up-min",
    type=float,
    default=10.0,
    show_default=True,
    help="left out of each segment's fit (Spark's checkpoint also until its 100th batch)",
)
@click.option(
    "--maintain-every-min", type=float, default=None, help="OPTIMIZE and VACUUM the Delta table this often"
)
@click.option("--retention-min", type=int, default=None, help="removed files kept (default: Delta's, 7 days)")
@click.option(
    "--log-retention-min", type=int, default=None, help="log entries kept (default: Delta's, 30 days)"
)
@click.option("--rejudge", is_flag=True, help="only fit, plot and tabulate --out's files again")
def main(
    out: Path, retention_min: int | None, log_retention_min: int | None, rejudge: bool, **options: Any
) -> None:
    """Run the soak (issue #44 item 5), print its result, and exit 1 naming what grows."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if (retention_min is None) != (log_retention_min is None):
        raise click.UsageError(
            "give both --retention-min and --log-retention-min, or neither (Delta's defaults)"
        )
    if rejudge:
        samples = [loaded(line) for line in (out / "samples.jsonl").read_text().splitlines() if line]
        epochs = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines() if line]
        result = judge(
            out, samples, epochs, json.loads((out / "result.json").read_text()), options["warm_up_min"]
        )
    else:
        retention = (
            Retention(retention_min, log_retention_min)
            if retention_min is not None and log_retention_min is not None
            else None
        )
        result = soak(out, Settings(**options, retention=retention))
    print(json.dumps({k: v for k, v in result.items() if k != "slopes"}, indent=2))
    print((out / "table.md").read_text())
    if result["failures"]:
        raise click.ClickException("the soak fails:\n  " + "\n  ".join(result["failures"]))


if __name__ == "__main__":
    main()
