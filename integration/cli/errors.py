"""The one place where errors become what the user sees: one ``Error: ...`` line on stderr, exit 1.

Every error twophase raises on purpose derives from
:class:`~twophase.sinks.errors.TwoPhaseError` (``ConfigError``, ``ServiceUnavailableError``,
``CheckpointStorageError``, ``CommitFailedError``, ``JobError``, ...). Every ``twophase`` group is a
:class:`TwophaseGroup`, so a command run on its own (``CliRunner().invoke(checkpoints, ...)``)
reports errors the same way as through ``twophase``. Usage errors stay Click's (exit status 2).
"""

from __future__ import annotations

from typing import Any

import click

from twophase.sinks.errors import TwoPhaseError


def one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type name when it has none."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


class CommandFailed(click.ClickException):
    """A command that ran but whose outcome is a failure (e.g. a sink not verified): exit status 1."""


class TwophaseGroup(click.Group):
    """A click group that turns :class:`TwoPhaseError` into one ``Error: ...`` line and exit status 1.

    Subgroups created with :meth:`group` are TwophaseGroups too.
    """

    group_class = type

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TwoPhaseError as exc:
            raise click.ClickException(one_line(exc)) from None
