"""What the tests of the packed-environment recipes share: a job process's environment, its
outcome line, and ``twophase verify`` of its run (standalone cluster and YARN)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support.cli import json_output, run_twophase


def flights_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment without ``TWOPHASE_*`` (but the cache) and ``PYSPARK_*``, with a
    private run dir: the job finds only the services this test gives it."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TWOPHASE_", "PYSPARK_")) or k == "TWOPHASE_CACHE"
    }
    return {**keep, "TWOPHASE_RUN_DIR": str(tmp_path / "run")}


def outcome_line(stdout: str) -> dict[str, Any]:
    """The last JSON line a job process printed."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, stdout[-3000:]
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def verify_exactly_once(tmp_path: Path, work: Path, env: dict[str, str]) -> None:
    """``twophase verify`` of the run in ``work``: every sink holds each expected record once and
    nothing lingers."""
    report = json_output(
        run_twophase(
            ["verify", "--work-dir", str(work), "--delta-reader", "deltalake", "--json"], tmp_path, env
        )
    )
    assert report["ok"] is True, report
    for sink in report["sinks"]:
        assert (sink["records"], sink["duplicates"], sink["missing"], sink["lingering"]) == (
            report["expected_records"],
            0,
            0,
            0,
        ), sink
