"""The flights job on YARN, as EMR and Dataproc run a PySpark job: ``spark-submit --master yarn``
with the packed environment, in client or cluster deploy mode (issue #45 item 2).

- **Environment**: the archive of ``twophase package env --extra flights`` is put on S3 once
  (:func:`stage_archive`) and named in ``spark.archives`` (``s3a://...#environment``): each
  NodeManager localizes it for the containers of an application and unpacks it as
  ``./environment``; ``spark.pyspark.python`` runs every Python from there. In cluster mode that
  includes the driver, which runs in the application master's container; in client mode the
  driver runs where spark-submit runs, on the same archive unpacked there (as the standalone
  recipe, :mod:`~twophase.integration.jobs.flights_submit`).
- **Staging**: ``spark.yarn.stagingDir`` is ``s3a://<bucket>/yarn-staging``: spark-submit uploads
  the application's files there and the NodeManagers read them from S3. Spark's own jars are
  ``local:`` (``spark.yarn.jars``: present on every node, nothing uploaded) and the extra jars
  (hadoop-aws, Delta, the Kafka source) are on the class path, read in place
  (:func:`~twophase.integration.jobs.flights_cluster.jar_conf`); spark-submit itself reaches
  ``s3a://`` through ``SPARK_DIST_CLASSPATH``.
- **Driver restarts**: in cluster mode ``spark.yarn.maxAppAttempts`` (2) lets YARN start the
  driver again when its container dies: the new attempt runs the same program with the same
  arguments, loads the run's manifest and restores from the ``s3://`` checkpoint; the run's
  outcome is the application's final status (spark-submit waits for it).
- **Credentials**: ``AWS_*`` reach the driver through ``spark.yarn.appMasterEnv`` (cluster mode)
  or its own environment (client mode), the executors through ``spark.executorEnv``; the sinks'
  and checkpoints' S3 settings carry the endpoint only.

    python -m twophase.integration.jobs.flights_yarn submit --work-dir W --deploy-mode cluster

finds YARN as the other services are found (``TWOPHASE_YARN_CONF_DIR``, ``twophase services up
--yarn``, else a temporary cluster), prints the spark-submit line (the S3 keys as ``$AWS_...``),
runs it and ends with one JSON line: the application, its final status and its attempts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from twophase.coordinator.state.faults import ENV as FAULT_ENV
from twophase.integration.services.process import HOST

if TYPE_CHECKING:
    from twophase.integration.services.s3 import S3Endpoint
    from twophase.integration.services.yarn import YarnEndpoint

APP_NAME = "twophase-flights-yarn"
STAGING_PREFIX = "yarn-staging"
ENVS_PREFIX = "yarn-envs"
DEPLOY_MODES = ("client", "cluster")
MAX_APP_ATTEMPTS = 2
AM_WAIT = "600s"
"""How long the application master waits for the driver's SparkContext (cluster mode; Spark's
default of 100 s is short for a Python driver on a loaded machine)."""
APP_ID = re.compile(r"\b(application_\d+_\d+)\b")


def stage_archive(s3: S3Endpoint, archive: Path, bucket: str) -> str:
    """Put ``archive`` on S3 once, under ``<bucket>/yarn-envs/<SHA-256 prefix>/``, and return its
    ``s3a://`` URI (an archive already there is kept: a content address never changes).

    Raises:
        botocore.exceptions.ClientError: S3 refused a call.
    """
    digest = hashlib.sha256()
    with archive.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    key = f"{ENVS_PREFIX}/{digest.hexdigest()[:16]}/{archive.name}"
    client = s3.boto3_client()
    found = client.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
    if not any(obj["Key"] == key for obj in found):
        client.upload_file(str(archive), bucket, key)
    return f"s3a://{bucket}/{key}"


def yarn_conf(
    s3: S3Endpoint,
    archive_uri: str,
    deploy_mode: str,
    bucket: str,
    driver_env: Mapping[str, str],
    max_app_attempts: int = MAX_APP_ATTEMPTS,
    event_log_dir: Path | None = None,
) -> dict[str, str]:
    """The whole Spark conf of the flights job on YARN in ``deploy_mode``.

    Args:
        s3: the endpoint whose ``AWS_*`` the executors (and in cluster mode the driver) get.
        archive_uri: the packed environment (:func:`stage_archive`).
        deploy_mode: ``client`` or ``cluster``.
        bucket: the bucket of the staging folder.
        driver_env: in cluster mode, the driver's environment (``spark.yarn.appMasterEnv``):
            where it finds the services.
        max_app_attempts: ``spark.yarn.maxAppAttempts``: driver starts YARN makes in cluster mode.
        event_log_dir: write Spark's event log there.

    Raises:
        ConfigError: an unknown deploy mode. ServiceUnavailableError: the jars cannot be resolved.
    """
    from twophase.integration.jobs.flights_cluster import cluster_conf, jar_conf
    from twophase.integration.packing import archive_conf
    from twophase.integration.services.spark_cluster import spark_home
    from twophase.integration.spark import s3a_conf, spark_jars
    from twophase.sinks.errors import ConfigError

    if deploy_mode not in DEPLOY_MODES:
        raise ConfigError(f"deploy mode {deploy_mode!r}: give client or cluster")
    conf = {
        "spark.app.name": APP_NAME,
        **cluster_conf("yarn", s3, archive_conf(archive_uri), event_log_dir),
        **jar_conf(spark_jars()),
        **{f"spark.hadoop.{key}": value for key, value in s3a_conf(s3, keys=False).items()},
        "spark.submit.deployMode": deploy_mode,
        "spark.yarn.stagingDir": f"s3a://{bucket}/{STAGING_PREFIX}",
        "spark.yarn.jars": f"local:{spark_home() / 'jars'}/*",
        "spark.yarn.maxAppAttempts": str(max_app_attempts),
        "spark.yarn.am.waitTime": AM_WAIT,
        "spark.executor.instances": "2",
        "spark.executor.memory": "1g",
        "spark.driver.memory": "1g",
        "spark.yarn.am.memory": "512m",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if deploy_mode == "cluster":
        env = {**driver_env, **s3.aws_env(), "SPARK_LOCAL_IP": HOST}
        env.update({k: v for k, v in os.environ.items() if k.startswith(FAULT_ENV)})
        conf.update({f"spark.yarn.appMasterEnv.{key}": value for key, value in env.items()})
    return conf


def submit_env(yarn: YarnEndpoint, s3: S3Endpoint, driver_env: Mapping[str, str]) -> dict[str, str]:
    """spark-submit's environment: this one without ``PYSPARK_*``/``SPARK_*``/``AWS_*``, then
    Spark's home, the cluster's ``HADOOP_CONF_DIR``, the extra jars on ``SPARK_DIST_CLASSPATH``
    (spark-submit uploads to ``s3a://``), the S3 keys and ``driver_env`` (a client-mode driver's)."""
    from twophase.integration.services.spark_cluster import spark_home
    from twophase.integration.spark import spark_jars

    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "AWS_"))}
    return {
        **keep,
        "SPARK_HOME": str(spark_home()),
        "SPARK_DIST_CLASSPATH": os.pathsep.join(spark_jars()),
        **yarn.client_env(),
        **s3.aws_env(),
        **driver_env,
        "SPARK_LOCAL_IP": HOST,  # the host name may resolve elsewhere: the driver stays on loopback
    }


@click.group()
def main() -> None:
    """The flights job on YARN: `submit` runs it with spark-submit."""


@main.command("submit")
@click.option(
    "--work-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The run's work directory (its manifest; a run there is resumed).",
)
@click.option("--deploy-mode", type=click.Choice(DEPLOY_MODES), default="cluster", show_default=True)
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The packed environment (default: `twophase package env --extra flights` of these sources).",
)
@click.option("--days", type=click.IntRange(1, 365), default=365, show_default=True)
@click.option("--files-per-trigger", type=click.IntRange(min=1), default=31, show_default=True)
@click.option("--job-id", default=None, help="Job id of a new run (default: flights_<UTC time>).")
@click.option(
    "--max-app-attempts",
    type=click.IntRange(min=1),
    default=MAX_APP_ATTEMPTS,
    show_default=True,
    help="spark.yarn.maxAppAttempts: driver starts in cluster mode.",
)
@click.option("--event-log-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
def submit(
    work_dir: Path,
    deploy_mode: str,
    archive: Path | None,
    days: int,
    files_per_trigger: int,
    job_id: str | None,
    max_app_attempts: int,
    event_log_dir: Path | None,
) -> None:
    """Run (or resume) the flights run of WORK_DIR on YARN with spark-submit; exit with its status."""
    from twophase.integration.jobs.flights import endpoints_from_environment
    from twophase.integration.jobs.flights_cluster import stage_input
    from twophase.integration.jobs.flights_submit import SCRIPT, driver_dir, job_spec, unpack
    from twophase.integration.packing import pack_environment, shell_line, submit_command
    from twophase.integration.services.launcher import given_env
    from twophase.integration.services.spark_cluster import spark_home
    from twophase.integration.services.yarn import yarn_service

    work_dir = work_dir.resolve()
    endpoints = endpoints_from_environment()
    s3 = endpoints.s3
    spec = job_spec(work_dir, job_id, days, files_per_trigger)
    spec.save()  # every attempt of the driver loads the run from here
    s3.ensure_bucket(spec.bucket)
    stage_input(spec, s3)
    archive = archive.resolve() if archive is not None else pack_environment(extras=["flights"]).archive
    archive_uri = stage_archive(s3, archive, spec.bucket)
    driver_env = given_env(endpoints.kafka_bootstrap, s3)
    cwd = driver_dir(work_dir)
    cwd.mkdir(parents=True, exist_ok=True)
    if deploy_mode == "client":  # the driver's ./environment is where spark-submit runs
        unpack(archive, cwd)
    with contextlib.ExitStack() as stack:
        yarn = stack.enter_context(yarn_service(s3))
        conf = yarn_conf(
            s3, archive_uri, deploy_mode, spec.bucket, driver_env, max_app_attempts, event_log_dir
        )
        spark_submit = str(spark_home() / "bin" / "spark-submit")
        args = ["run", "--work-dir", str(work_dir)]
        shown = submit_command(spark_submit, _redacted(conf), str(SCRIPT), args, redact=True)
        click.echo(f"cd {cwd} && {shell_line(shown)}", err=True)
        started = time.monotonic()
        proc = subprocess.run(
            submit_command(spark_submit, conf, str(SCRIPT), args),
            cwd=cwd,
            env=submit_env(yarn, s3, driver_env if deploy_mode == "client" else {}),
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        sys.stderr.write(proc.stderr)
        outcome = application_outcome(yarn, proc.stderr)
    outcome.update({"exit_status": proc.returncode, "wall_s": round(time.monotonic() - started, 1)})
    click.echo(json.dumps(outcome))
    sys.exit(proc.returncode)


def _redacted(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the secrets of the driver's and the executors' environments as ``$NAME``
    (for printing)."""
    secret = re.compile(r"(SECRET|PASSWORD|TOKEN|DSN|SECURITY|ACCESS_KEY)", re.IGNORECASE)
    out = dict(conf)
    for key in conf:
        name = key.rsplit(".", 1)[-1]
        if key.startswith(("spark.yarn.appMasterEnv.", "spark.executorEnv.")) and secret.search(name):
            out[key] = f"${name}"
    return out


def application_outcome(yarn: YarnEndpoint, submit_log: str) -> dict[str, Any]:
    """The application spark-submit's log names (its last ``application_...`` id): its id, state,
    final status and attempts (each attempt's id and container), from the ResourceManager;
    ``{}`` when the log names none."""
    ids = APP_ID.findall(submit_log)
    if not ids:
        return {}
    app_id = ids[-1]
    try:
        app = yarn.app(app_id)
        attempts = yarn.attempts(app_id)
    except (OSError, ValueError, KeyError) as e:
        return {"application": app_id, "error": str(e)}
    return {
        "application": app_id,
        "state": app.get("state"),
        "final_status": app.get("finalStatus"),
        "attempts": [{"id": a.get("appAttemptId"), "container": a.get("containerId")} for a in attempts],
    }


if __name__ == "__main__":
    main()
