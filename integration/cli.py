"""The ``twophase`` command line: ``services up|down|status|prepare``, and the flights job's
``demo``, ``verify``, ``checkpoints list|show`` and ``lingering``.

Errors twophase raises on purpose (bad configuration, unreachable services) end the command with a
single line on stderr and exit status 1.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from twophase.integration.flights_commands import checkpoints, demo, lingering, verify
from twophase.integration.services import ServiceStatus, services_down, services_status, services_up
from twophase.sinks.errors import TwoPhaseError

console = Console()


class _Group(click.Group):
    """Turns :class:`TwoPhaseError` into Click's one-line ``Error: ...`` and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TwoPhaseError as exc:
            raise click.ClickException(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


@click.group(cls=_Group)
@click.option("-v", "--verbose", is_flag=True, help="Log progress (INFO) to stderr.")
def main(verbose: bool) -> None:
    """twophase: exactly-once two-phase-commit sinks for PySpark."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.group()
def services() -> None:
    """Run Kafka and MinIO natively for development (state in the cache's run/ folder)."""


def _status_table(rows: list[ServiceStatus]) -> Table:
    table = Table(title="twophase services")
    for column in ("service", "origin", "endpoint", "pid", "ready", "detail"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            row.origin,
            row.endpoint,
            "" if row.pid is None else str(row.pid),
            "[green]✓[/green]" if row.ready else "[red]✗[/red]",
            row.detail,
        )
    return table


@services.command("prepare")
def services_prepare_command() -> None:
    """Resolve Kafka's and Spark's jars (Maven) and build MinIO (go install), unless cached."""
    from twophase.integration.services.kafka import kafka_libs
    from twophase.integration.services.s3 import minio_binary
    from twophase.integration.spark import spark_jars

    with console.status("resolving jars and building MinIO (cached after the first time) ..."):
        kafka = kafka_libs()
        spark = spark_jars()
        minio = minio_binary()
    console.print(f"kafka jars: {kafka}\nspark jars: {len(spark)} in {Path(spark[0]).parent}\nminio: {minio}")


@services.command("up")
def services_up_command() -> None:
    """Start the services not given in TWOPHASE_* variables and not running yet; keep them running."""
    console.print(_status_table(services_up()))


@services.command("down")
def services_down_command() -> None:
    """Stop the services started by `services up` and delete their data."""
    stopped = services_down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@services.command("status")
def services_status_command() -> None:
    """Show where each service comes from and whether it answers."""
    console.print(_status_table(services_status()))


# the flights job's commands: demo, verify, checkpoints list|show, lingering [--abort]
for _command in (demo, verify, checkpoints, lingering):
    main.add_command(_command)


if __name__ == "__main__":
    main()
