"""The ``twophase`` click group: global options and the commands of every role module.

Its help lists the commands in two sections: what a user runs against their jobs (``checkpoints``,
``lingering``, ``package``) and what developing twophase itself uses (``services``, ``demo``,
``verify``: native services and the flights job of this repository).
"""

from __future__ import annotations

import logging

import click

from twophase.integration.cli.checkpoints import checkpoints
from twophase.integration.cli.errors import TwophaseGroup
from twophase.integration.cli.flights import demo, verify
from twophase.integration.cli.lingering import lingering
from twophase.integration.cli.package import package
from twophase.integration.cli.services import services

USER_COMMANDS = ("checkpoints", "lingering", "package")
"""Commands for a user's own jobs, listed first."""


class SectionedGroup(TwophaseGroup):
    """The top-level group: user commands and development commands in separate help sections."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows[name in USER_COMMANDS].append((name, command.get_short_help_str(limit=60)))
        for user, title in ((True, "Commands for your jobs"), (False, "Development of twophase")):
            if rows[user]:
                with formatter.section(title):
                    formatter.write_dl(rows[user])


@click.group(cls=SectionedGroup)
@click.version_option(package_name="twophase", prog_name="twophase")
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
