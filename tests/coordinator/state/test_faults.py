"""Fault points: the exit they cause, and the executor-JVM and worker kills cluster tests ask for."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.polling import eventually

from twophase.coordinator.state.faults import EXIT_STATUS, parse

CHILD = textwrap.dedent(
    """
    from twophase.coordinator.state.faults import fault_point
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
        timeout=120,
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
        timeout=120,
    )
    assert worker.returncode == -9 and "survived" not in worker.stdout
    other = int(worker.stdout.split()[0])
    # SIGKILL reaches every process of the group, but the kernel ends the sibling in its own time
    assert eventually(lambda: gone(other)), f"process {other} outlived its worker"


def test_a_paused_fault_holds_the_process_until_resumed(tmp_path: Path) -> None:
    from twophase.coordinator.state.faults import ACTION_ENV, ENV, STATE_ENV, paused_marker, resume_marker

    code = (
        "from twophase.coordinator.state.faults import fault_point\n"
        'fault_point("mid_commit")\nprint("went on")'
    )
    env = {**os.environ, ENV: "mid_commit:1", STATE_ENV: str(tmp_path), ACTION_ENV: "pause"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        # a child starting on a loaded machine takes its time to reach the point (#45 item 7)
        reached = eventually(
            lambda: paused_marker(tmp_path, "mid_commit", 1).exists() or child.poll() is not None,
            timeout_s=120,
        )
        assert child.poll() is None, "the process went on instead of pausing"
        assert reached and paused_marker(tmp_path, "mid_commit", 1).exists()
        resume_marker(tmp_path, "mid_commit", 1).touch()
        out, _ = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0
    assert out.strip() == "went on"


def test_a_pause_without_a_state_directory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from twophase.coordinator.state import faults

    monkeypatch.setenv(faults.ENV, "mid_commit:1")
    monkeypatch.setenv(faults.ACTION_ENV, "pause")
    monkeypatch.delenv(faults.STATE_ENV, raising=False)
    with pytest.raises(ValueError, match="TWOPHASE_FAULT_STATE"):
        faults.fault_point("mid_commit")


def test_parse_reads_a_timed_pause_per_point() -> None:
    from twophase.coordinator.state.faults import parse_faults

    spec = "before_write:3:pause=90, mid_write:1"
    assert parse_faults(spec) == {"before_write": (3, 90.0), "mid_write": (1, None)}
    assert parse(spec) == {"before_write": 3, "mid_write": 1}
    for bad in ("before_write:3:sleep=9", "before_write:3:pause=-1", "before_write:3:pause=nan"):
        with pytest.raises(ValueError, match="pause"):
            parse_faults(bad)


def test_a_timed_pause_holds_its_hit_only_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from twophase.coordinator.state import faults

    slept: list[float] = []
    monkeypatch.setattr("twophase.coordinator.state.faults.time.sleep", slept.append)
    # the other point of the same variable would exit: the pause must not take its action
    monkeypatch.setenv(faults.ENV, "before_write:2:pause=45,after_pre_commit:9")
    monkeypatch.setenv(faults.STATE_ENV, str(tmp_path))
    monkeypatch.setenv(faults.ACTION_ENV, "exit")
    for _ in range(3):
        faults.fault_point("before_write")  # returns each time: the 2nd arrival sleeps first
    assert slept == [45.0]
    assert faults.paused_marker(tmp_path, "before_write", 2).exists()
    assert not faults.paused_marker(tmp_path, "before_write", 1).exists()


def test_a_timed_pause_really_sleeps_then_the_process_goes_on(tmp_path: Path) -> None:
    from twophase.coordinator.state.faults import ENV, STATE_ENV

    code = (
        "from twophase.coordinator.state.faults import fault_point\n"
        'fault_point("mid_write")\nprint("went on")'
    )
    env = {**os.environ, ENV: "mid_write:1:pause=0.5", STATE_ENV: str(tmp_path)}
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and child.stdout.strip() == "went on"
    assert time.monotonic() - started >= 0.5
