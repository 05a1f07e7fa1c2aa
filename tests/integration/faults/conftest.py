"""Fixtures of the fault suite: healthy services before every case, and the results table.

The services are the session's ``kafka_cluster`` and ``minio_controls`` (tests/integration/conftest.py):
started once, healed (paused processes resumed, dead ones restarted, every broker back in every
ISR, IAM restrictions lifted by the case itself) before each case, so one case's fault never leaks
into the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faults.support import BUCKET, FaultResult

from twophase.integration.jobs.flights import FlightsEndpoints
from twophase.integration.services.kafka_cluster import KafkaCluster
from twophase.integration.services.minio_server import MinioServer

_RESULTS: list[FaultResult] = []


@pytest.fixture
def services(kafka_cluster: KafkaCluster, minio_controls: MinioServer) -> Iterator[FlightsEndpoints]:
    """Both services healthy, as the flights job's endpoints; each case's results are collected."""
    kafka_cluster.heal()
    minio_controls.heal()
    minio_controls.endpoint.ensure_bucket(BUCKET)
    yield FlightsEndpoints(kafka_cluster.bootstrap, minio_controls.endpoint)


@pytest.fixture
def results() -> list[FaultResult]:
    """Where a case appends its :class:`FaultResult` s for the end-of-session table."""
    return _RESULTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _RESULTS:
        return
    terminalreporter.section("fault cases: moment, restarts, time to recover")
    for r in _RESULTS:
        row = r.row()
        terminalreporter.write_line(
            f"{row['case']:<28} {row['moment']:<26} {row['state']:<9} restarts={row['restarts']} "
            f"fault_at={row['fault_at_s']}s recover={row['recover_s']}s wall={row['wall_s']}s"
            + (f" error={row['error']}" if row["error"] else "")
        )
    path = Path(terminalreporter.config.rootpath) / "build" / "faults-report.jsonl"
    terminalreporter.write_line(f"(JSON lines appended to {path} unless TWOPHASE_FAULTS_REPORT is set)")
