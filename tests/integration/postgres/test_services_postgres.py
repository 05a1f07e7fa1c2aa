"""``twophase services up --postgres``, ``services status`` and ``services down`` with PostgreSQL.

Kafka and MinIO are the session's, given in the environment, so ``services up`` starts PostgreSQL
only; each test has a run dir of its own (``support.cli.run_twophase``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.cli import json_output, run_twophase

from twophase.integration.services import S3Endpoint
from twophase.integration.services.launcher import given_env
from twophase.integration.services.postgres import PostgresServer
from twophase.integration.services.postgres_service import postgres_dsn
from twophase.integration.services.process import pid_alive

pytestmark = [pytest.mark.kafka, pytest.mark.s3]


def _row(rows: dict[str, Any], name: str) -> dict[str, Any]:
    (row,) = [r for r in rows["services"] if r["name"] == name]
    return dict(row)


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_up_status_down_runs_a_postgres_with_prepared_transactions(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    env = given_env(kafka_bootstrap, s3_endpoint)

    up = json_output(run_twophase(["services", "up", "--postgres", "--json"], tmp_path, env))
    row = _row(up, "postgres")
    assert (row["origin"], row["ready"]) == ("services up", True), row
    assert "max_prepared_transactions=64" in row["detail"]
    entry = json.loads((tmp_path / "run" / "services.json").read_text())["postgres"]
    assert row["endpoint"] == f"{entry['host']}:{entry['port']}/{entry['dbname']}"
    assert entry["password"] not in json.dumps(up)
    kwargs = {k: entry[k] for k in ("host", "port", "user", "password", "dbname")}
    with psycopg.connect(autocommit=True, **kwargs) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.autocommit = False
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("PREPARE TRANSACTION 'services-test'")
        conn.autocommit = True
        conn.execute("COMMIT PREPARED 'services-test'")
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]

    again = json_output(run_twophase(["services", "up", "--postgres", "--json"], tmp_path, env))
    assert _row(again, "postgres")["pid"] == entry["pid"]  # reused, not started twice
    status = json_output(run_twophase(["services", "status", "--json"], tmp_path, env))
    assert _row(status, "postgres")["ready"] is True

    down = json_output(run_twophase(["services", "down", "--json"], tmp_path, env))
    assert down["stopped"] == ["postgres"]
    assert not pid_alive(int(entry["pid"]))
    assert not Path(entry["data_dir"]).exists()
    after = json_output(run_twophase(["services", "status", "--json"], tmp_path, env))
    assert [r["name"] for r in after["services"]] == ["kafka", "s3", "spark"]


def test_a_given_dsn_is_used_and_never_started(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint, postgres: PostgresServer
) -> None:
    env = given_env(kafka_bootstrap, s3_endpoint, postgres.endpoint)
    assert env["TWOPHASE_POSTGRES_DSN"] == postgres_dsn(postgres.endpoint)

    up = json_output(run_twophase(["services", "up", "--postgres", "--json"], tmp_path, env))
    row = _row(up, "postgres")
    assert (row["origin"], row["ready"], row["pid"]) == ("environment", True, None), row
    assert row["endpoint"] == f"{postgres.endpoint.host}:{postgres.endpoint.port}/postgres"
    assert "postgres" not in json.loads((tmp_path / "run" / "services.json").read_text())
