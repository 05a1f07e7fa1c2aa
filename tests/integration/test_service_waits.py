"""The one wait every native service's start-up uses (process.wait_ready) and its TCP check."""

from __future__ import annotations

import socket

import pytest

from twophase.integration.services.process import HOST, free_port, tcp_refusal, wait_ready
from twophase.sinks.errors import ServiceUnavailableError


def test_wait_ready_returns_none_once_the_check_passes() -> None:
    answers = iter(["starting", "still starting", None])
    assert wait_ready(lambda: next(answers), timeout_s=5, every_s=0.01) is None


def test_wait_ready_gives_the_last_reason_when_time_runs_out() -> None:
    calls: list[int] = []

    def never() -> str:
        calls.append(1)
        return f"attempt {len(calls)}"

    assert wait_ready(never, timeout_s=0.05, every_s=0.01) == f"attempt {len(calls)}"
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
