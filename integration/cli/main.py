"""The ``twophase`` click group: global options and the commands of every role module.

Its help lists the commands in two sections: what a user runs against their jobs (``checkpoints``,
``lingering``, ``package``) and what developing twophase itself uses (``services``, ``demo``,
``verify``: native services and the flights job of this repository). Each command's module is
imported when the command is looked up, so a user command stands on the runtime and the connectors
alone: an install with only the PostgreSQL extra runs ``twophase lingering`` although the flights
demo (Kafka, S3, Delta) cannot be imported there; such a development command is then listed as
unavailable, and running it prints one line saying what is missing.
"""

from __future__ import annotations

import importlib
import logging

import click

from twophase.integration.cli.errors import TwophaseGroup, one_line
from twophase.sinks.errors import MissingExtraError

USER_COMMANDS = {
    "checkpoints": "twophase.integration.cli.checkpoints:checkpoints",
    "lingering": "twophase.integration.cli.lingering:lingering",
    "package": "twophase.integration.cli.package:package",
}
"""Commands for a user's own jobs, listed first: name → ``module:command``."""
DEVELOPMENT_COMMANDS = {
    "services": "twophase.integration.cli.services:services",
    "demo": "twophase.integration.cli.flights:demo",
    "verify": "twophase.integration.cli.flights:verify",
}
"""Commands for developing twophase (services, the flights job): name → ``module:command``."""


def _unavailable(name: str, why: str) -> click.Command:
    """A stand-in for a command whose module cannot be imported here: it fails with ``why``."""

    def fail() -> None:
        raise click.ClickException(f"twophase {name} cannot run in this install: {why}")

    return click.Command(
        name, callback=fail, help=f"(unavailable here: {why})", short_help="(unavailable here)"
    )


class SectionedGroup(TwophaseGroup):
    """The top-level group: user commands and development commands in separate help sections,
    each command imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*USER_COMMANDS, *DEVELOPMENT_COMMANDS, *sorted(self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        ref = USER_COMMANDS.get(cmd_name) or DEVELOPMENT_COMMANDS.get(cmd_name)
        if ref is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = ref.partition(":")
        try:
            command: click.Command = getattr(importlib.import_module(module_name), attr)
        except (ImportError, MissingExtraError) as exc:
            if cmd_name in USER_COMMANDS:
                raise  # the user commands need the core install only: a bug, not an install choice
            return _unavailable(cmd_name, one_line(exc))
        return command

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
