"""The ``twophase`` click group: global options and the commands of every role module.

Its help lists the commands in two sections: what a user runs against their jobs (``checkpoints``,
``lingering``) and what developing twophase itself uses (``services``, ``demo``, ``verify``,
``package``: native services, the flights job of this repository, and the wheel and packed
environment built from the checkout's sources). The development commands' modules are not in the
wheel users install (``setup.py``'s ``DEVELOPMENT``): there the development section is absent and
such a command is unknown to click. Each command's module is imported when the command is looked
up, so a user command stands on the runtime and the connectors alone: in a checkout with only the
PostgreSQL extra, ``twophase lingering`` runs although the flights demo (Kafka, S3, Delta) cannot
be imported; such a development command is then listed as unavailable, and running it prints one
line saying what is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging

import click

from twophase.integration.cli.errors import TwophaseGroup, one_line
from twophase.sinks.errors import MissingExtraError

USER_COMMANDS = {
    "checkpoints": "twophase.integration.cli.checkpoints:checkpoints",
    "lingering": "twophase.integration.cli.lingering:lingering",
}
"""Commands for a user's own jobs, listed first: name → ``module:command``."""
DEVELOPMENT_COMMANDS = {
    "services": "twophase.integration.cli.services:services",
    "demo": "twophase.integration.cli.flights:demo",
    "verify": "twophase.integration.cli.flights:verify",
    "package": "twophase.integration.cli.package:package",
}
"""Commands for developing twophase (services, the flights job, builds from the checkout's sources):
name → ``module:command``; a command whose module is not here (an installed wheel) is not offered."""


def _module_here(module_name: str) -> bool:
    """Whether ``module_name`` exists here (without importing it)."""
    return importlib.util.find_spec(module_name) is not None


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
        development = [n for n, ref in DEVELOPMENT_COMMANDS.items() if _module_here(ref.partition(":")[0])]
        return [*USER_COMMANDS, *development, *sorted(self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        ref = USER_COMMANDS.get(cmd_name) or DEVELOPMENT_COMMANDS.get(cmd_name)
        if ref is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = ref.partition(":")
        if cmd_name in DEVELOPMENT_COMMANDS and not _module_here(module_name):
            return None  # development tooling, not in this install: click says "No such command"
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
