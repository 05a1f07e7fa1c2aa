"""``twophase services prepare|up|down|status``: Kafka, MinIO, a Spark standalone cluster, a
Spark Connect server, PostgreSQL, Azurite and a GCS emulator, run natively for development.

Options of ``up`` live on :func:`services_up_command` (``--spark-cluster`` adds the cluster,
``--spark-connect`` the Connect server, ``--postgres`` PostgreSQL, ``--azure`` Azurite's blob
service, ``--gcs`` fake-gcs-server); every service's row comes from
:func:`~twophase.integration.services.services_status`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from twophase.integration.cli.errors import TwophaseGroup
from twophase.integration.cli.output import (
    FAIL,
    OK,
    Column,
    FittedTable,
    emit_json,
    json_option,
    progress,
    show,
    table,
)
from twophase.integration.services import ServiceStatus, services_down, services_status, services_up

STATUS_KEYS = "services[]: {name, origin, endpoint, pid, ready, detail}."


@click.group("services", cls=TwophaseGroup)
def services() -> None:
    """Run Kafka, MinIO, a Spark cluster, Spark Connect, PostgreSQL, Azurite and a GCS emulator natively."""


def status_json(rows: list[ServiceStatus]) -> dict[str, Any]:
    """``{"services": [{"name", "origin", "endpoint", "pid", "ready", "detail"}, ...]}``."""
    return {
        "services": [
            {
                "name": r.name,
                "origin": r.origin,
                "endpoint": r.endpoint,
                "pid": r.pid,
                "ready": r.ready,
                "detail": r.detail,
            }
            for r in rows
        ]
    }


def status_table(rows: list[ServiceStatus]) -> FittedTable:
    """Service, whole endpoint, ready, and where it comes from with its detail (folded, never cut)."""
    columns = [
        Column("service"),
        Column("endpoint", "whole"),
        Column("ready"),
        Column("origin and detail", "text"),
    ]
    cells = [
        [
            r.name,
            r.endpoint or "-",
            OK if r.ready else FAIL,
            r.origin + ("" if r.pid is None else f" (pid {r.pid})") + (f": {r.detail}" if r.detail else ""),
        ]
        for r in rows
    ]
    return table("twophase services", columns, cells)


def _print_status(rows: list[ServiceStatus], as_json: bool) -> None:
    if as_json:
        emit_json(status_json(rows))
    else:
        show(status_table(rows))


@services.command("prepare")
@json_option("kafka_libs, spark_jars[], minio, azurite, fake_gcs_server.")
def services_prepare_command(as_json: bool) -> None:
    """Resolve Kafka's and Spark's jars (Maven), build MinIO and fake-gcs-server (go install) and
    install Azurite (npm), unless cached."""
    from twophase.integration.services.azurite import azurite_main
    from twophase.integration.services.gcs_server import fake_gcs_binary
    from twophase.integration.services.kafka import kafka_libs
    from twophase.integration.services.s3 import minio_binary
    from twophase.integration.spark import spark_jars

    with progress(
        "resolving jars, building MinIO and the emulators (cached after the first time) ...", as_json
    ):
        kafka = kafka_libs()
        spark = spark_jars()
        minio = minio_binary()
        azurite = azurite_main()
        fake_gcs = fake_gcs_binary()
    if as_json:
        emit_json(
            {
                "kafka_libs": str(kafka),
                "spark_jars": [str(j) for j in spark],
                "minio": str(minio),
                "azurite": str(azurite),
                "fake_gcs_server": str(fake_gcs),
            }
        )
        return
    show(
        f"kafka jars: {kafka}",
        f"spark jars: {len(spark)} in {Path(spark[0]).parent}",
        f"minio: {minio}",
        f"azurite: {azurite}",
        f"fake-gcs-server: {fake_gcs}",
    )


@services.command("up")
@click.option(
    "--spark-cluster",
    is_flag=True,
    help="Also a Spark standalone master and 2 workers (unless TWOPHASE_SPARK_MASTER is set).",
)
@click.option(
    "--spark-connect",
    is_flag=True,
    help="Also a Spark Connect server (local[2]) that ships twophase and reaches this S3 "
    "(unless TWOPHASE_SPARK_CONNECT is set).",
)
@click.option(
    "--postgres",
    is_flag=True,
    help="Also PostgreSQL with max_prepared_transactions=64 (unless TWOPHASE_POSTGRES_DSN is set), "
    "for `twophase demo --sinks ...,postgres`.",
)
@click.option(
    "--azure",
    is_flag=True,
    help="Also Azurite's blob service (unless TWOPHASE_AZURE_CONNECTION_STRING is set), for "
    "abfss:// and wasbs:// checkpoints.",
)
@click.option(
    "--gcs",
    is_flag=True,
    help="Also fake-gcs-server, a GCS emulator (unless TWOPHASE_GCS_ENDPOINT is set), for gs:// checkpoints.",
)
@click.option(
    "--yarn",
    is_flag=True,
    help="Also a YARN ResourceManager and NodeManager staging on this S3 (unless TWOPHASE_YARN_CONF_DIR "
    "is set), for spark-submit --master yarn with HADOOP_CONF_DIR from `services status`.",
)
@json_option(STATUS_KEYS)
def services_up_command(
    spark_cluster: bool,
    spark_connect: bool,
    postgres: bool,
    azure: bool,
    gcs: bool,
    yarn: bool,
    as_json: bool,
) -> None:
    """Start the services not given in TWOPHASE_* variables and not running yet; keep them running."""
    what = ["Kafka", "MinIO"]
    if spark_cluster:
        what.append("a Spark cluster")
    if spark_connect:
        what.append("a Spark Connect server")
    if postgres:
        what.append("PostgreSQL")
    if azure:
        what.append("Azurite")
    if gcs:
        what.append("fake-gcs-server")
    if yarn:
        what.append("YARN")
    with progress(f"starting {', '.join(what[:-1])} and {what[-1]} ...", as_json):
        rows = services_up(
            spark_cluster=spark_cluster,
            spark_connect=spark_connect,
            postgres=postgres,
            azure=azure,
            gcs=gcs,
            yarn=yarn,
        )
    _print_status(rows, as_json)


@services.command("down")
@json_option("stopped[] (service names).")
def services_down_command(as_json: bool) -> None:
    """Stop the services started by `services up` and delete their data."""
    stopped = services_down()
    if as_json:
        emit_json({"stopped": stopped})
        return
    show(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@services.command("status")
@json_option(STATUS_KEYS)
def services_status_command(as_json: bool) -> None:
    """Show where each service comes from, its whole endpoint and whether it answers."""
    _print_status(services_status(), as_json)
