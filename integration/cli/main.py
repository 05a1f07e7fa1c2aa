"""The ``twophase`` click group: global options and the commands of every role module."""

from __future__ import annotations

import logging

import click

from twophase.integration.cli.checkpoints import checkpoints
from twophase.integration.cli.errors import TwophaseGroup
from twophase.integration.cli.flights import demo, verify
from twophase.integration.cli.lingering import lingering
from twophase.integration.cli.package import package
from twophase.integration.cli.services import services


@click.group(cls=TwophaseGroup)
@click.option("-v", "--verbose", is_flag=True, help="Log progress (INFO) to stderr.")
def main(verbose: bool) -> None:
    """twophase: exactly-once two-phase-commit sinks for PySpark.

    Every command takes --json (one JSON document on stdout; its keys are in the command's --help).
    Errors print one `Error: ...` line on stderr and exit with status 1.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


for _command in (services, demo, verify, checkpoints, lingering, package):
    main.add_command(_command)
