"""Fault points: the exit they cause, and the executor-JVM and worker kills cluster tests ask for."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from twophase.coordinator.faults import EXIT_STATUS, parse

CHILD = textwrap.dedent(
    """
    from twophase.coordinator.faults import fault_point
    fault_point("mid_write")
    """
)
# stands in for the executor JVM: its command line names Spark's executor backend, and it runs
# the task's Python as a child, as executors run Python workers
EXECUTOR = textwrap.dedent(
    """
    import subprocess, sys
    child = subprocess.run([sys.executable, "-c", sys.argv[1]])
    print("executor survived, task exit", child.returncode, flush=True)
    """
)

# stands in for a standalone worker: another executor (a sleeper) and the executor running the task
WORKER = textwrap.dedent(
    """
    import subprocess, sys
    sleep = "import time; time.sleep(120)"
    other = subprocess.Popen([sys.executable, "-c", sleep, "CoarseGrainedExecutorBackend"])
    print(other.pid, flush=True)
    subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2], "CoarseGrainedExecutorBackend"])
    print("worker survived", flush=True)
    """
)


def gone(pid: int) -> bool:
    """The process ended (a zombie nobody reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_parse_reads_points_and_counts() -> None:
    assert parse("mid_write:2, after_persist") == {"mid_write": 2, "after_persist": 1}
    with pytest.raises(ValueError, match="unknown fault point"):
        parse("nowhere")


@pytest.mark.parametrize("kill", ["", "executor"])
def test_an_executor_side_fault_kills_the_executor_when_asked(kill: str) -> None:
    env = {"TWOPHASE_FAULT": "mid_write", "TWOPHASE_FAULT_KILL": kill, "PATH": "/usr/bin:/bin"}
    executor = subprocess.run(
        [sys.executable, "-c", EXECUTOR, CHILD, "CoarseGrainedExecutorBackend"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if kill:
        assert executor.returncode == -9 and "survived" not in executor.stdout
    else:
        assert executor.returncode == 0 and f"task exit {EXIT_STATUS}" in executor.stdout


def test_a_worker_kill_takes_the_worker_and_every_process_under_it() -> None:
    env = {"TWOPHASE_FAULT": "mid_write", "TWOPHASE_FAULT_KILL": "worker", "PATH": "/usr/bin:/bin"}
    worker = subprocess.run(
        [sys.executable, "-c", WORKER, EXECUTOR, CHILD, "org.apache.spark.deploy.worker.Worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == -9 and "survived" not in worker.stdout
    other = int(worker.stdout.split()[0])
    assert gone(other)
