"""Running the ``twophase`` command as a user would: a subprocess of this venv's console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TWOPHASE = str(Path(sys.executable).parent / "twophase")
"""The console script installed next to this interpreter."""


def run_twophase(
    args: list[str],
    tmp_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    cwd: Path | None = None,
    timeout_s: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``twophase ARGS`` with a private run dir and no inherited ``TWOPHASE_*`` but the cache.

    ``env`` adds variables (e.g. ``TWOPHASE_KAFKA_BOOTSTRAP``); ``COLUMNS`` defaults to 80.
    """
    clean = {key: value for key, value in os.environ.items() if not key.startswith("TWOPHASE_")}
    if "TWOPHASE_CACHE" in os.environ:
        clean["TWOPHASE_CACHE"] = os.environ["TWOPHASE_CACHE"]
    # a private run dir: never reuse nor stop a developer's `services up`
    clean.update({"TWOPHASE_RUN_DIR": str(tmp_path / "run"), "COLUMNS": "80", **(env or {})})
    return subprocess.run(
        [TWOPHASE, *args], capture_output=True, text=True, env=clean, cwd=cwd, timeout=timeout_s, check=False
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``Error: ...`` line of a failed run (asserts exit status 1 and one stderr line)."""
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    return lines[0]


def json_output(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON document a ``--json`` run printed (asserts exit status 0)."""
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def rendered_columns(text: str, header: bool = True) -> list[str]:
    """Per column of a rendered ``box.MINIMAL`` table, its body text top to bottom, whitespace removed.

    Body lines are the lines with ``│`` (after the header rule ``┼`` when the table has a header);
    wrapped and folded cells continue on the next lines of the same column, so each column's text
    concatenates its cells.
    """
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if "┼" in line) if header else -1
    columns: list[str] = []
    for line in lines[rule + 1 :]:
        if "│" not in line:
            continue
        cells = line.split("│")
        columns += [""] * (len(cells) - len(columns))
        for i, cell in enumerate(cells):
            columns[i] += "".join(cell.split())
    return columns
