"""The first-run page (docs/guide/first-run.md, #45 item 9) stays true: its script runs as written,
in a fresh folder, against a local checkpoint directory and local Delta tables, and prints what
the page says it prints; the ``twophase checkpoints list`` line the page shows works on what the
script left.

The script's ``SparkSession.builder...getOrCreate()`` returns the test session's ``spark`` (the
suite's one local[2] session), so no second JVM starts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from twophase.integration.cli import main

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "first-run.md"

pytestmark = [pytest.mark.spark, pytest.mark.delta]


def blocks(language: str) -> list[str]:
    """The page's fenced code blocks in ``language``, in order."""
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_the_first_run_page_runs_as_written(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (script,) = blocks("python")
    (printed,) = blocks("text")
    monkeypatch.chdir(tmp_path)

    exec(compile(script, str(PAGE), "exec"), {"__name__": "__main__"})

    assert capsys.readouterr().out.splitlines() == printed.splitlines()
    assert (tmp_path / "twophase-first-run" / "events" / "_delta_log").is_dir()

    lines = [line for block in blocks("bash") for line in block.splitlines()]
    (command,) = [line for line in lines if line.startswith("twophase ")]
    result = CliRunner().invoke(main, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    assert "checkpoints of job" in result.output
