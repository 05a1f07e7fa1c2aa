"""The one wait every native service's start-up uses (process.wait_ready) and its TCP check."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from twophase.integration.services.process import (
    HOST,
    free_port,
    kill_group,
    pid_alive,
    tcp_refusal,
    wait_ready,
)
from twophase.sinks.errors import ServiceUnavailableError


def test_wait_ready_returns_none_once_the_check_passes() -> None:
    answers = iter(["starting", "still starting", None])
    assert wait_ready(lambda: next(answers), timeout_s=5, every_s=0.01) is None


def test_wait_ready_gives_the_last_reason_when_time_runs_out() -> None:
    calls: list[int] = []

    def never() -> str:
        calls.append(1)
        return f"attempt {len(calls)}"

    # 2 s: room for a second attempt on a loaded machine (a 0.05 s bound allowed one, #45 item 7)
    assert wait_ready(never, timeout_s=2, every_s=0.01) == f"attempt {len(calls)}"
    assert len(calls) >= 2


def test_wait_ready_stops_at_once_when_the_check_raises() -> None:
    calls: list[int] = []

    def exited() -> str | None:
        calls.append(1)
        raise ServiceUnavailableError("the process exited")

    with pytest.raises(ServiceUnavailableError, match="exited"):
        wait_ready(exited, timeout_s=5, every_s=0.01)
    assert calls == [1]


def test_tcp_refusal_names_a_closed_port_and_passes_a_listening_one() -> None:
    closed = free_port()
    assert tcp_refusal([(HOST, closed)], 1.0) is not None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind((HOST, 0))
        server.listen()
        port = server.getsockname()[1]
        assert tcp_refusal([(HOST, closed), (HOST, port)], 1.0) is None


# a group that ignores SIGTERM (the SIGKILL after the grace period ends it), each of its two
# processes holding 300 MB, which the kernel frees as it ends them: after killpg returned
GROUP = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    HOLD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); held = b'x' * 300_000_000; "
    child = subprocess.Popen([sys.executable, "-c", HOLD + "print(1, flush=True); time.sleep(300)"],
                             stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    exec(HOLD + "print(child.pid, flush=True); time.sleep(300)")
    """
)


def test_kill_group_returns_once_every_process_of_the_group_is_gone() -> None:
    """#45 item 7: ``services down`` SIGKILLed a group that outlived its grace period and returned
    at once; on a loaded machine its processes still lived (and wrote to the data folder it
    deleted next) while the caller went on."""
    leader = subprocess.Popen(
        [sys.executable, "-c", GROUP], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        kill_group(leader.pid, grace_s=0.1)
        assert not pid_alive(child), "kill_group returned while a process of the group lived"
    finally:
        leader.kill()
        leader.wait()
