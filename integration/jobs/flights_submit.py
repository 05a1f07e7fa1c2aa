"""The flights job as a user's pipeline on a standalone cluster, with a packed environment.

The executors' Python is the archive of :func:`~twophase.integration.packing.pack_environment`
(``twophase package env``), shipped with ``spark.archives`` (``--archives env.tar.gz#environment``)
and run as ``spark.pyspark.python=./environment/bin/python``; Spark's jars are on the class path
(:func:`~twophase.integration.jobs.flights_cluster.jar_conf`). The driver starts either way:

(a) **spark-submit** runs this file's ``run`` with everything on the command line, and this
    program only calls ``SparkSession.builder.getOrCreate()``. In client mode (the only one for
    Python on a standalone cluster) the driver's own Python is ``spark.pyspark.driver.python``,
    else ``spark.pyspark.python``, relative to spark-submit's folder: :func:`submit` unpacks the
    same archive there as ``./environment``, so one relative path serves the driver and the
    executors, and the driver has no pip-installed pyspark either (spark-submit puts the Spark
    installation's ``python/lib/pyspark.zip`` on its ``PYTHONPATH``, as for executors)::

        spark-submit --master spark://host:7077 --archives env.tar.gz#environment \\
          --conf spark.pyspark.python=./environment/bin/python ... flights_submit.py run --work-dir W

(b) **python**: ``python flights_submit.py run --master spark://host:7077 --archive env.tar.gz
    --work-dir W`` in a Python with ``twophase[spark]`` installed; the program sets
    ``spark.archives`` and the rest on its session builder (:func:`packed_conf`) and
    ``PYSPARK_PYTHON``: PySpark takes the executors' Python from that variable only
    (``SparkContext.pythonExec``), the builder's ``spark.pyspark.python`` is read by spark-submit
    alone.

``run`` prints one JSON line: the job's outcome and where the driver and the executors import
twophase and pyspark from, and their Python. ``submit`` (development side, ``make
demo-cluster-packed``) starts (a) against the services found as ``twophase verify`` finds them,
printing the spark-submit line first (the S3 keys as ``$AWS_...``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from twophase.integration.jobs.flights_spec import FlightsJobSpec
    from twophase.integration.services.s3 import S3Endpoint

SCRIPT = Path(__file__).resolve()
APP_NAME = "twophase-flights-packed"


def packed_conf(
    master: str, s3: S3Endpoint, archive: Path | str, local_dir: Path | None = None
) -> dict[str, str]:
    """The whole Spark conf of the flights job on the cluster ``master`` with the packed
    environment ``archive``: the cluster settings
    (:func:`~twophase.integration.jobs.flights_cluster.cluster_conf`, with ``AWS_*`` for the
    executors), the archive and the executors' Python
    (:func:`~twophase.integration.packing.archive_conf`), the jars on the class path, s3a without
    keys (each JVM's ``AWS_*``), and ``spark.local.dir`` = ``local_dir`` when given (the driver
    unpacks the archive there too).

    Raises:
        ConfigError: a bad master URL. ServiceUnavailableError: the jars cannot be resolved.
    """
    from twophase.integration.jobs.flights_cluster import cluster_conf, jar_conf
    from twophase.integration.packing import archive_conf
    from twophase.integration.spark import s3a_conf, spark_jars

    conf = {
        "spark.app.name": APP_NAME,
        **cluster_conf(master, s3, archive_conf(archive)),
        **jar_conf(spark_jars()),
        **{f"spark.hadoop.{key}": value for key, value in s3a_conf(s3, keys=False).items()},
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if local_dir is not None:
        conf["spark.local.dir"] = str(local_dir)
    return conf


def _where(_: object) -> tuple[str, str, str]:
    """In a Python worker: the files ``twophase`` and ``pyspark`` come from, and the Python."""
    import pyspark

    import twophase

    return (
        os.path.abspath(twophase.__file__ or "?"),
        os.path.abspath(pyspark.__file__ or "?"),
        sys.executable,
    )


def imports_report(spark: SparkSession, tasks: int = 8) -> dict[str, Any]:
    """Where the driver and the executors (``tasks`` small tasks) import twophase and pyspark
    from, and their Python: ``{"driver": [...], "executors": [[...], ...]}`` (distinct, sorted)."""
    found = spark.sparkContext.parallelize(range(tasks), tasks).map(_where).collect()
    return {"driver": list(_where(None)), "executors": sorted({tuple(f) for f in found})}


def job_spec(work_dir: Path, job_id: str | None, days: int, files_per_trigger: int) -> FlightsJobSpec:
    """The run of ``work_dir`` (its manifest), else a new S3-only run of ``days`` days."""
    from twophase.integration.jobs.flights_spec import FlightsJobSpec

    if (work_dir / "flights-job.json").is_file():
        return FlightsJobSpec.load(work_dir)
    job_id = job_id or "flights_" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d_%H%M%S")
    return FlightsJobSpec.on_s3_bucket(job_id, work_dir, days=days, files_per_trigger=files_per_trigger)


@click.group()
def main() -> None:
    """The flights job with a packed environment: `run` is the driver, `submit` starts it."""


work_dir_option = click.option(
    "--work-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The run's work directory (its manifest; a run there is resumed).",
)
days_option = click.option("--days", type=click.IntRange(1, 365), default=365, show_default=True)
fpt_option = click.option("--files-per-trigger", type=click.IntRange(min=1), default=31, show_default=True)
job_id_option = click.option(
    "--job-id", default=None, help="Job id of a new run (default: flights_<UTC time>)."
)


@main.command("run")
@work_dir_option
@days_option
@fpt_option
@job_id_option
@click.option("--master", default=None, help="(b) python-started: the cluster, spark://host:port.")
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="(b) python-started: the packed environment for the executors.",
)
def run(
    work_dir: Path,
    days: int,
    files_per_trigger: int,
    job_id: str | None,
    master: str | None,
    archive: Path | None,
) -> None:
    """The driver: run (or resume) the flights run of WORK_DIR, then print one JSON line."""
    from pyspark.sql import SparkSession

    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.jobs.flights import endpoints_from_environment, run_flights
    from twophase.integration.jobs.flights_cluster import driver_environment
    from twophase.integration.packing import EXECUTOR_PYTHON

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if (master is None) != (archive is None):
        raise click.UsageError("give --master and --archive together (a driver started by python)")
    spec = job_spec(work_dir, job_id, days, files_per_trigger)
    endpoints = dataclasses.replace(endpoints_from_environment(), keys_from_environment=True)
    with contextlib.ExitStack() as stack:
        if master is not None and archive is not None:  # (b): the builder carries the deployment
            # PYSPARK_PYTHON: the executors' Python (the conf alone is not read); AWS_*: the
            # driver's sinks, checkpoints and, inherited by the JVM started now, s3a
            stack.enter_context(driver_environment(endpoints.s3, EXECUTOR_PYTHON))
            local = driver_dir(work_dir) / "local"
            builder = SparkSession.builder
            for key, value in packed_conf(master, endpoints.s3, archive.resolve(), local).items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
        else:  # (a): spark-submit gave the conf and the environment
            spark = SparkSession.builder.appName(APP_NAME).getOrCreate()
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        flights = run_flights(spark, spec, endpoints)
        where = imports_report(spark)
    outcome = {
        "job_id": spec.job_id,
        "state": flights.state.value,
        "batches": len(flights.epochs),
        "records": sum(m.records for m in flights.epochs),
        "checkpoints": len(flights.checkpoints),
        "wall_s": round(flights.wall_s, 3),
        **where,
    }
    print(json.dumps(outcome), flush=True)
    sys.exit(0 if flights.state is JobState.FINISHED else 1)


def driver_dir(work_dir: Path) -> Path:
    """``WORK_DIR.driver``: the driver's folder beside the work directory (its ``spark.local.dir``,
    where it unpacks the archive too, and for spark-submit its ``./environment``)."""
    return work_dir.with_name(work_dir.name + ".driver")


def unpack(archive: Path, into: Path) -> Path:
    """Unpack ``archive`` as ``into/environment`` (replacing one there) with ``tar``; returns it."""
    from twophase.integration.packing import ALIAS

    target = into / ALIAS
    if target.exists():
        subprocess.run(["rm", "-rf", str(target)], check=True)
    target.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(target)], check=True)
    return target


def submit_command_for(
    master: str, s3: S3Endpoint, archive: Path, work_dir: Path, folder: Path, args: list[str], redact: bool
) -> list[str]:
    """The spark-submit command of recipe (a) (see the module's docstring), run from ``folder``."""
    from twophase.integration.packing import submit_command
    from twophase.integration.services.spark_cluster import spark_home

    conf = packed_conf(master, s3, archive, folder / "local")
    spark_submit = str(spark_home() / "bin" / "spark-submit")
    return submit_command(
        spark_submit, conf, str(SCRIPT), ["run", "--work-dir", str(work_dir), *args], redact
    )


@main.command("submit")
@click.option(
    "--archive",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The packed environment (twophase package env).",
)
@work_dir_option
@days_option
@fpt_option
@job_id_option
@click.option(
    "--master", default=None, help="spark://host:port (default: as `twophase demo --spark-cluster`)."
)
def submit(
    archive: Path, work_dir: Path, days: int, files_per_trigger: int, job_id: str | None, master: str | None
) -> None:
    """Run the flights job with spark-submit (recipe (a)); exit with spark-submit's status.

    The driver runs from WORK_DIR.driver/, where the archive is unpacked as ./environment."""
    from twophase.integration.jobs.flights import endpoints_from_environment
    from twophase.integration.packing import shell_line
    from twophase.integration.services import spark_cluster_service
    from twophase.integration.services.launcher import given_env
    from twophase.integration.services.spark_cluster import spark_home

    work_dir, archive = work_dir.resolve(), archive.resolve()
    where = driver_dir(work_dir)
    endpoints = endpoints_from_environment()
    extra = ["--days", str(days), "--files-per-trigger", str(files_per_trigger)]
    extra += ["--job-id", job_id] if job_id else []
    with contextlib.ExitStack() as stack:
        master = master or stack.enter_context(spark_cluster_service())
        where.mkdir(parents=True, exist_ok=True)
        unpack(archive, where)
        shown = submit_command_for(master, endpoints.s3, archive, work_dir, where, extra, redact=True)
        click.echo(f"cd {where} && {shell_line(shown)}", err=True)
        cmd = submit_command_for(master, endpoints.s3, archive, work_dir, where, extra, redact=False)
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "AWS_"))}
        env = {
            **keep,
            "SPARK_HOME": str(spark_home()),
            **endpoints.s3.aws_env(),  # the driver JVM's s3a and the driver's sinks
            **given_env(endpoints.kafka_bootstrap, endpoints.s3),  # where the driver finds the services
        }
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=where, env=env, check=False)
        click.echo(
            f"spark-submit: exit status {proc.returncode}, {time.monotonic() - started:.1f} s", err=True
        )
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
