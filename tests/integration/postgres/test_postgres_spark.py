"""End to end through Spark: a Job API batch write into PostgreSQL, exactly once through a task retry.

The job runs in its own process (``spark_job.py``, ``local[2,4]``): the fault point
``after_pre_commit`` kills the Python worker of one task after its transaction was prepared, Spark
retries the task, the retry rolls back the dead attempt's prepared transaction and writes again.
The table is read back with plain psycopg.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from twophase.integration.services.postgres import PostgresServer

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().with_name("spark_job.py")
REPO = Path(__file__).resolve().parents[3]


def _run(postgres: PostgresServer, tmp_path: Path, table: str, job: str, fault: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_FAULT")}
    env["PYSPARK_PYTHON"] = sys.executable
    env["TWOPHASE_TEST_POSTGRES"] = json.dumps(postgres.endpoint.sink_fields())
    if fault:
        env["TWOPHASE_FAULT"] = fault
        env["TWOPHASE_FAULT_STATE"] = str(tmp_path / "fault-state")
    args = ["--table", table, "--job", job, "--checkpoint-dir", str(tmp_path / "chk")]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert postgres.endpoint.password not in log
    return log


# make test runs PostgreSQL through Spark in test_flights_postgres; make chaos kills its tasks
@pytest.mark.long
def test_job_writes_exactly_once_through_a_task_retry(
    postgres: PostgresServer, reader: psycopg.Connection[tuple[Any, ...]], table: str, tmp_path: Path
) -> None:
    reader.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, name text)").format(sql.Identifier(table))
    )
    job = f"spark_{table}"  # a valid job id as it is (Job derives ids from names)
    log = _run(postgres, tmp_path, table, job, fault="after_pre_commit:1")
    assert '"state": "FINISHED"' in log

    rows = reader.execute(
        sql.SQL("SELECT id, name FROM {} ORDER BY id").format(sql.Identifier(table))
    ).fetchall()
    assert rows == [(i, f"name-{i}") for i in range(200)]
    assert reader.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
    # one subtask committed from its retry (attempt 1): the task really was retried
    attempts = reader.execute(
        "SELECT partition, attempt, record_count FROM twophase_commits WHERE sink = 'pg' AND gid LIKE %s",
        (f"twophase.{job}.%",),
    ).fetchall()
    assert sorted(a for _, a, _ in attempts) == [0, 1]
    assert sum(n for _, _, n in attempts) == 200
