"""The soak: the flights job's three sinks on an endless stream for hours (issue #29 item 5).

A streaming job runs for hours in production, so this measures how its cost grows with time.
The stream is the flights job's (:func:`~twophase.integration.jobs.flights.enrich` on January
2013's flights), fed continuously by Spark's ``rate`` source: row ``v`` is flight ``v mod n`` of
the month, with ``flight_id = soak-<v>``, so every id is unique and the read-back is exact. A
``processingTime`` trigger runs it into the real Kafka, MinIO and Delta sinks (checkpoints on
local storage, retention as configured by default) until ``--minutes`` have passed or
``--epochs`` epochs are done, whichever comes first; then the job stops with a drain (the final
checkpoint, FLIP-147), each sink is read back by a reader that is not its writer and lingering
state is counted.

Every ``--sample-s`` seconds one :class:`Sample` is taken: the medians of the epochs completed
since the last sample (write, persist, commit), the Python driver's and the JVM driver's RSS,
threads and open file descriptors, the checkpoint storage's bytes, Spark's own checkpoint bytes,
the Kafka transactional ids the broker knows for the job, and the Delta log's size.

With ``--maintain-every-min``, the table is maintained as a production Delta table is, by a
process of its own beside the job: OPTIMIZE (compaction), then VACUUM, with
``delta.deletedFileRetentionDuration`` and ``delta.logRetentionDuration`` set once to
``--retention-min`` and ``--log-retention-min`` (its log checkpoints then expire old commits).
Each maintenance's figures go to ``maintenance.jsonl``.

``make soak`` (services up first); ``python -m benchmarks.soak --help`` for the settings. Writes
``samples.jsonl``, ``result.json``, the plot ``soak.png`` (matplotlib) and ``table.md`` (first
window's medians against the last window's) to ``--out``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from benchmarks import common

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from twophase.connectors.kafka.internal.admin import KafkaAdmin
    from twophase.coordinator.spark.handle import JobHandle
    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
    from twophase.integration.jobs.flights_spec import FlightsJobSpec

log = logging.getLogger(__name__)

BUCKET = "twophase-soak"
MONTH_GLOB = "flights-2013-01-*.parquet"
"""The month whose flights the rate source cycles through (27,004 flights)."""


@dataclass(frozen=True)
class Process:
    """One process's footprint from ``/proc/<pid>``: resident memory (MB), threads, open fds."""

    rss_mb: float
    threads: int
    fds: int

    @classmethod
    def of(cls, pid: int) -> Process:
        """Read ``/proc/<pid>/status`` and ``/proc/<pid>/fd``.

        Raises:
            OSError: the process is gone.
        """
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        return cls(
            rss_mb=round(int(fields["VmRSS"].split()[0]) / 1024, 1),
            threads=int(fields["Threads"]),
            fds=len(os.listdir(f"/proc/{pid}/fd")),
        )


@dataclass(frozen=True)
class Sample:
    """The figures of one sampling minute.

    Attributes:
        minute: minutes since the job started.
        epochs: epochs completed so far; ``epochs_in_window`` of them since the last sample.
        records: records written so far (each sink received all of them).
        write_ms / persist_ms / commit_ms / epoch_ms: medians over the window's epochs, ms.
        python / jvm: the driver's Python process and its JVM.
        checkpoint_bytes / checkpoint_files: twophase's checkpoint storage.
        spark_checkpoint_bytes: Spark's own checkpoint (offsets and commit logs).
        kafka_ids: transactional ids the brokers know for the job's Kafka sink (any state);
            ``kafka_open``: of them, those with a transaction open.
        delta_log_bytes / delta_log_files: the Delta table's ``_delta_log``;
            ``delta_log_since_checkpoint``: JSON commits after its newest log checkpoint.
    """

    minute: float
    epochs: int
    epochs_in_window: int
    records: int
    write_ms: float
    persist_ms: float
    commit_ms: float
    epoch_ms: float
    python: Process
    jvm: Process
    checkpoint_bytes: int
    checkpoint_files: int
    spark_checkpoint_bytes: int
    kafka_ids: int
    kafka_open: int
    delta_log_bytes: int
    delta_log_files: int
    delta_log_since_checkpoint: int
    load_1m: float


FIGURES: dict[str, Callable[[Sample], float]] = {
    "write ms (median per epoch)": lambda s: s.write_ms,
    "persist ms (median per epoch)": lambda s: s.persist_ms,
    "commit ms (median per epoch)": lambda s: s.commit_ms,
    "epoch ms (median per epoch)": lambda s: s.epoch_ms,
    "Python driver RSS MB": lambda s: s.python.rss_mb,
    "JVM driver RSS MB": lambda s: s.jvm.rss_mb,
    "Python driver threads": lambda s: s.python.threads,
    "JVM driver threads": lambda s: s.jvm.threads,
    "Python driver open fds": lambda s: s.python.fds,
    "JVM driver open fds": lambda s: s.jvm.fds,
    "checkpoint storage bytes": lambda s: s.checkpoint_bytes,
    "Spark checkpoint bytes": lambda s: s.spark_checkpoint_bytes,
    "Kafka transactional ids": lambda s: s.kafka_ids,
    "Delta log commits since its checkpoint": lambda s: s.delta_log_since_checkpoint,
    "Delta log bytes": lambda s: s.delta_log_bytes,
    "machine load (1 min)": lambda s: s.load_1m,
}
"""What the plot and the table show, by name."""


def tree_size(path: str) -> tuple[int, int]:
    """Bytes and files under a local ``path`` (0, 0 if it does not exist)."""
    size = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
                files += 1
            except FileNotFoundError:  # retention deleted it meanwhile
                continue
    return size, files


def delta_log(table: str) -> tuple[int, int, int]:
    """The Delta log's bytes, files and JSON commits after its newest log checkpoint (Delta
    PROTOCOL.md: ``_last_checkpoint`` names it)."""
    log_dir = Path(table) / "_delta_log"
    size, files = tree_size(str(log_dir))
    commits = [int(p.name.split(".")[0]) for p in log_dir.glob("*.json") if p.name.split(".")[0].isdigit()]
    last = log_dir / "_last_checkpoint"
    checkpoint = json.loads(last.read_text())["version"] if last.exists() else -1
    return size, files, sum(1 for c in commits if c > checkpoint)


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


def maintain(table_uri: str, retention: Retention) -> dict[str, Any]:
    """One round of table maintenance (run in its own process): set the retention if it is not
    set, OPTIMIZE (compact), VACUUM (removed files older than the retention), and expire old
    log entries. Returns what it did: files compacted and added, files vacuumed, seconds."""
    from deltalake import DeltaTable

    started = time.monotonic()
    table = DeltaTable(table_uri)
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


def soak_stream(
    spark: SparkSession, spec: FlightsJobSpec, month: str, n: int, rows_per_second: int
) -> DataFrame:
    """The endless flights stream: ``rate`` rows joined to the month's flight ``value mod n``,
    renamed ``soak-<value>``, then the flights job's enrichment (two partitions)."""
    from pyspark.sql import functions as F

    from twophase.integration.jobs.flights import enrich
    from twophase.integration.jobs.flights_data import FLIGHT_SCHEMA

    flights = spark.read.parquet(month)
    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .option("numPartitions", 2)
        .load()
        .select(F.col("value"), (F.col("value") % n).alias("slot"))
        .join(F.broadcast(flights), "slot")
        .withColumn("flight_id", F.concat(F.lit("soak-"), F.col("value").cast("string")))
        .select(*FLIGHT_SCHEMA.names)
    )
    return enrich(spark, stream, spec)


class Sampler:
    """Takes one :class:`Sample` of a running soak; owns the window's start (the epochs seen)."""

    def __init__(
        self, handle: JobHandle, spec: FlightsJobSpec, admin: KafkaAdmin, pattern: str, jvm_pid: int
    ) -> None:
        self._handle = handle
        self._spec = spec
        self._admin = admin
        self._pattern = pattern
        self._jvm_pid = jvm_pid
        self._seen = 0
        self._started = time.monotonic()

    def take(self) -> Sample:
        """The figures now; the latency medians are over the epochs since the previous call."""
        from twophase.connectors.kafka.internal.lingering import OPEN_STATES

        epochs = self._handle.metrics  # the newest RuntimeConfig.metrics_history epochs
        totals = self._handle.totals
        fresh = min(totals.epochs - self._seen, len(epochs))
        new = epochs[len(epochs) - fresh :]
        window = new or epochs[-1:]  # no epoch ended this minute: the latest one's figures
        self._seen = totals.epochs
        ids = self._admin.list_transactions([], self._pattern)
        checkpoint_bytes, checkpoint_files = tree_size(self._spec.checkpoint_dir)
        delta_bytes, delta_files, since = delta_log(self._spec.delta_uri)

        def median(field: str) -> float:
            return round(statistics.median(getattr(m, field) for m in window), 1) if window else 0.0

        return Sample(
            minute=round((time.monotonic() - self._started) / 60, 2),
            epochs=totals.epochs,
            epochs_in_window=len(new),
            records=totals.records,
            write_ms=median("write_ms"),
            persist_ms=median("persist_ms"),
            commit_ms=median("commit_ms"),
            epoch_ms=median("epoch_ms"),
            python=Process.of(os.getpid()),
            jvm=Process.of(self._jvm_pid),
            checkpoint_bytes=checkpoint_bytes,
            checkpoint_files=checkpoint_files,
            spark_checkpoint_bytes=tree_size(self._spec.spark_checkpoint)[0],
            kafka_ids=len({txn_id for txn_id, _, _ in ids}),
            kafka_open=len({txn_id for txn_id, _, state in ids if state in OPEN_STATES}),
            delta_log_bytes=delta_bytes,
            delta_log_files=delta_files,
            delta_log_since_checkpoint=since,
            load_1m=round(os.getloadavg()[0], 2),
        )


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


def read_back(spec: FlightsJobSpec, endpoints: FlightsEndpoints, total: int) -> list[dict[str, Any]]:
    """Every sink's ``flight_id``s, each with a reader that is not its writer (a ``read_committed``
    consumer, pyarrow's S3 dataset, deltalake), and what each left lingering."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from twophase.integration.jobs.flights_base_sinks import DELTA_SINK, KAFKA_SINK, S3_SINK
    from twophase.integration.readback import read_topic
    from twophase.integration.verify import lingering_items, s3_filesystem

    kafka = [
        json.loads(r.value or b"{}")["flight_id"]
        for r in read_topic(endpoints.kafka_bootstrap, spec.topic, "read_committed", 600.0)
    ]
    s3 = ds.dataset(
        f"{spec.bucket}/{spec.s3_prefix.strip('/')}", filesystem=s3_filesystem(endpoints), partitioning="hive"
    ).to_table(columns=["flight_id"])
    delta = DeltaTable(spec.delta_uri).to_pyarrow_table(columns=["flight_id"])
    reports = [
        exact(KAFKA_SINK, kafka, total),
        exact(S3_SINK, s3.column("flight_id").to_pylist(), total),
        exact(DELTA_SINK, delta.column("flight_id").to_pylist(), total),
    ]
    for report in reports:
        report["lingering"] = len(lingering_items(spec, endpoints, report["sink"]).items)
    return reports


def windows(samples: Sequence[Sample], warm_up_min: float) -> tuple[list[Sample], list[Sample], float]:
    """The first and the last window after warm-up: an hour each, or half the run's rest if it
    is shorter than two hours past the warm-up; returns both and the window's minutes."""
    warm = [s for s in samples if s.minute >= warm_up_min]
    if not warm:
        return [], [], 0.0
    span = min(60.0, (warm[-1].minute - warm[0].minute) / 2)
    first = [s for s in warm if s.minute < warm[0].minute + span]
    last = [s for s in warm if s.minute > warm[-1].minute - span]
    return first, last, span


def table(samples: Sequence[Sample], warm_up_min: float) -> str:
    """A Markdown table: each figure's median in the first and the last window, and their ratio."""
    first, last, span = windows(samples, warm_up_min)
    rows = [
        f"| figure | first {span:.0f} min after warm-up | last {span:.0f} min | last ÷ first |",
        "|---|---:|---:|---:|",
    ]
    for name, figure in FIGURES.items():
        a = statistics.median(figure(s) for s in first) if first else 0.0
        b = statistics.median(figure(s) for s in last) if last else 0.0
        rows.append(f"| {name} | {a:,.1f} | {b:,.1f} | {b / a if a else float('nan'):.2f} |")
    return "\n".join(rows) + "\n"


def plot(samples: Sequence[Sample], path: Path, title: str) -> None:
    """Every figure against minutes, one panel each, as a PNG (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = -(-len(FIGURES) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 3 * rows), sharex=True)
    minutes = [s.minute for s in samples]
    for ax, (name, figure) in zip(axes.flat, FIGURES.items(), strict=False):
        ax.plot(minutes, [figure(s) for s in samples], linewidth=1)
        ax.set_title(name, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(FIGURES) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _loaded(line: str) -> Sample:
    raw = json.loads(line)
    return Sample(**{**raw, "python": Process(**raw["python"]), "jvm": Process(**raw["jvm"])})


@dataclass(frozen=True)
class Settings:
    """A soak's settings (the command's options and their defaults; see the module docstring).

    Attributes:
        minutes / epochs: it stops at whichever comes first.
        rows_per_second: the rate source's rows per second.
        trigger_ms: the ``processingTime`` trigger, ms.
        sample_s: seconds between samples.
        maintain_every_min: minutes between Delta table maintenances; ``None``: never.
        retention: what a maintained table keeps.
    """

    minutes: float
    epochs: int
    rows_per_second: int
    trigger_ms: int
    sample_s: float
    maintain_every_min: float | None
    retention: Retention


def soak(out: Path, settings: Settings) -> dict[str, Any]:
    """Run the soak; see the module docstring. Returns the result written to ``result.json``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from twophase.connectors.kafka.internal import naming
    from twophase.connectors.kafka.internal.admin import KafkaAdmin
    from twophase.coordinator.job_lifecycle import JobState
    from twophase.integration.jobs.flights import (
        FlightsEndpoints,
        build_sinks,
        flights_spark_session,
        start_flights,
    )
    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.services import kafka_service, s3_service

    env = common.machine()
    run_id = f"soak_{uuid.uuid4().hex[:8]}"
    out.mkdir(parents=True, exist_ok=True)
    work = out / run_id
    work.mkdir()
    with kafka_service() as bootstrap, s3_service() as s3:
        endpoints = FlightsEndpoints(bootstrap, s3)
        s3.ensure_bucket(BUCKET)
        spec = FlightsJobSpec(job_id=run_id, work_dir=str(work / "job"), bucket=BUCKET)
        spec.save()
        month, n = month_table(spec, work)
        spark = flights_spark_session(endpoints)
        spark.sparkContext.setLogLevel("ERROR")
        jvm_pid = spark.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]
        kafka = build_sinks(spec, endpoints)[0]
        admin = KafkaAdmin.connect(kafka.config, kafka.clients, kafka.name)
        pattern = naming.id_pattern(kafka.config.prefix(spec.job_id), kafka.name)
        handle = start_flights(
            spark,
            spec,
            endpoints,
            soak_stream(spark, spec, month, n, settings.rows_per_second),
            {"processingTime": f"{settings.trigger_ms} milliseconds"},
        )
        sampler = Sampler(handle, spec, admin, pattern, jvm_pid)
        samples: list[Sample] = []
        deadline = time.monotonic() + settings.minutes * 60
        maintainer = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        maintenance = None
        every = settings.maintain_every_min
        next_maintenance = time.monotonic() + (every or 0) * 60
        with (out / "samples.jsonl").open("w") as sink, (out / "maintenance.jsonl").open("w") as rounds:
            while time.monotonic() < deadline and handle.totals.epochs < settings.epochs:
                if handle.await_termination(settings.sample_s):
                    raise click.ClickException(f"the soak's job ended early: {handle.status.value}")
                sample = sampler.take()
                samples.append(sample)
                sink.write(json.dumps(dataclasses.asdict(sample)) + "\n")
                sink.flush()
                log.info(
                    "soak minute %.1f: %d epochs, %d records", sample.minute, sample.epochs, sample.records
                )
                if maintenance is not None and maintenance.done():
                    done = {"minute": sample.minute, **maintenance.result()}
                    rounds.write(json.dumps(done) + "\n")
                    rounds.flush()
                    log.info("soak maintenance: %s", done)
                    maintenance = None
                if every and maintenance is None and time.monotonic() >= next_maintenance:
                    maintenance = maintainer.submit(maintain, spec.delta_uri, settings.retention)
                    next_maintenance += every * 60
        maintainer.shutdown(wait=True)
        stopped = time.monotonic()
        handle.stop(savepoint=True, drain=True, timeout=600)
        drain_s = time.monotonic() - stopped
        assert handle.status is JobState.FINISHED, handle.status
        total = handle.totals.records
        reports = read_back(spec, endpoints, total)
        spark.stop()
    result = {
        **common.load_at_end(env),
        "job": run_id,
        "minutes": samples[-1].minute if samples else 0.0,
        "epochs": handle.totals.epochs,
        "records": total,
        "rows_per_second": settings.rows_per_second,
        "trigger_ms": settings.trigger_ms,
        "drain_s": round(drain_s, 1),
        "maintain_every_min": every,
        "retention_min": dataclasses.asdict(settings.retention) if every else None,
        "read_back": reports,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    report(out, samples, result)
    return result


def report(out: Path, samples: Sequence[Sample], result: dict[str, Any], warm_up_min: float = 5.0) -> None:
    """Write ``soak.png`` and ``table.md`` from the samples."""
    title = (
        f"soak {result['job']}: {result['minutes']:.0f} min, {result['epochs']:,} epochs, "
        f"{result['records']:,} records, {result['rows_per_second']} rows/s"
    )
    plot(samples, out / "soak.png", title)
    (out / "table.md").write_text(table(samples, warm_up_min))


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("build/soak"), show_default=True)
@click.option("--minutes", type=float, default=120.0, show_default=True, help="stop after this long …")
@click.option("--epochs", type=int, default=5000, show_default=True, help="… or after this many epochs")
@click.option("--rows-per-second", type=int, default=200, show_default=True)
@click.option("--trigger-ms", type=int, default=500, show_default=True, help="processingTime trigger")
@click.option("--sample-s", type=float, default=60.0, show_default=True)
@click.option(
    "--maintain-every-min", type=float, default=None, help="OPTIMIZE and VACUUM the Delta table this often"
)
@click.option("--retention-min", type=int, default=10, show_default=True, help="removed files kept")
@click.option("--log-retention-min", type=int, default=30, show_default=True, help="log entries kept")
@click.option("--replot", is_flag=True, help="only redraw the plot and table from --out's files")
def main(out: Path, retention_min: int, log_retention_min: int, replot: bool, **options: Any) -> None:
    """Run the soak (issue #29 item 5) and print its result."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if replot:
        samples = [_loaded(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        result = json.loads((out / "result.json").read_text())
        report(out, samples, result)
    else:
        result = soak(out, Settings(**options, retention=Retention(retention_min, log_retention_min)))
    print(json.dumps(result, indent=2))
    print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
