"""The top-level help separates the commands for a user's jobs from the development ones (#25)."""

from __future__ import annotations

from click.testing import CliRunner

from twophase.integration.cli import main


def test_help_lists_user_commands_before_development_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    user = result.output.index("Commands for your jobs:")
    development = result.output.index("Development of twophase:")
    assert user < development
    for name in ("checkpoints", "lingering"):
        assert user < result.output.index(f"  {name} ") < development
    for name in ("services", "demo", "verify", "package"):
        assert result.output.index(f"  {name} ") > development


def test_version_prints_the_installed_version() -> None:
    from twophase import __version__

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"twophase, version {__version__}\n"
