"""What a user sees of a refused job (#45 item 8): a job script run in a process of its own, its
exit code, stderr and seconds, and the checks every refusal's stderr must pass."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Seen:
    """A refused job's process as its user saw it.

    Attributes:
        code: the exit code.
        stderr: stderr's lines (Spark's log, twophase's log records, Python's report).
        seconds: from the process's start to its end (Spark's start included).
    """

    code: int
    stderr: list[str]
    seconds: float

    def last_line(self) -> str:
        """The last non-blank line of stderr, after checking what every refusal shows: exit code 1,
        the line a twophase error, the job failed at most once and was never restarted (a restart
        would fail and log its failure again). Prints the figures for the record.

        Raises:
            AssertionError: naming the check that failed, with stderr.
        """
        lines = [line for line in self.stderr if line.strip()]
        tracebacks = sum(TRACEBACK in line for line in self.stderr)
        figures = f"{len(self.stderr)} lines of stderr, {tracebacks} tracebacks, {self.seconds:.1f} s"
        print(f"exit {self.code}, {figures}")
        shown = "\n".join(self.stderr[-80:])
        assert self.code == 1, shown
        assert lines and lines[-1].startswith("twophase.sinks.errors."), shown
        assert sum(line.startswith("job failing ") for line in lines) <= 1, shown
        assert not [line for line in lines if line.startswith("job restarting ")], shown
        return lines[-1]


def run_as_user(script: Path, work: Path, env: dict[str, str]) -> Seen:
    """``python script WORK`` with ``env`` over this process's environment (no AWS keys of its
    own), bounded at 15 minutes."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_ACCESS", "AWS_SECRET"))}
    full |= {"PYSPARK_PYTHON": sys.executable, **env}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), str(work)],
        env=full,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return Seen(done.returncode, done.stderr.splitlines(), time.monotonic() - started)
