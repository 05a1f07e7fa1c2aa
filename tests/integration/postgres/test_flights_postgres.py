"""The flights job with PostgreSQL as a fourth sink (``twophase demo --sinks kafka,s3,delta,postgres``).

- the sinks of a run: checked names in a fixed order, kept in the manifest (an earlier manifest
  without them loads as Kafka, S3 and Delta);
- the job on three days into Kafka, S3, Delta and the session's PostgreSQL: every sink exactly
  once, PostgreSQL read back with a plain ``SELECT`` and no prepared transaction left;
- the command line: an unknown sink is refused naming the choices, and ``twophase verify`` of a
  PostgreSQL run without a running PostgreSQL says in one line how to run one.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from support.cli import one_line_error, run_twophase

from twophase.connectors.postgres.internal.naming import gid_prefix
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.integration.jobs import flights_data
from twophase.integration.jobs.flights import FlightsEndpoints, FlightsJobSpec, run_flights
from twophase.integration.jobs.flights_postgres import POSTGRES_SINK, table_name
from twophase.integration.jobs.flights_sinks import BASE_SINKS, SINK_CHOICES, check_sinks, verify_run
from twophase.integration.jobs.flights_spec import MANIFEST
from twophase.integration.services import S3Endpoint
from twophase.integration.services.launcher import given_env
from twophase.integration.services.postgres import PostgresServer
from twophase.integration.verify import expected_input
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALL_SINKS = ("kafka", "s3", "delta", "postgres")


def test_sinks_are_checked_ordered_and_kept_in_the_manifest(tmp_path: Path) -> None:
    assert SINK_CHOICES[:4] == ALL_SINKS  # a fifth (Iceberg) comes after
    assert check_sinks(["postgres", "kafka", " s3", "kafka"]) == ("kafka", "s3", "postgres")
    with pytest.raises(
        ConfigError, match=r"unknown sink\(s\) \['nosuch'\]: choose from kafka,s3,delta,postgres"
    ):
        check_sinks(["kafka", "nosuch"])
    with pytest.raises(ConfigError, match="no sink given"):
        check_sinks(["", " "])

    spec = FlightsJobSpec(job_id="flights_a.B", work_dir=str(tmp_path), sinks=ALL_SINKS)
    spec.save()
    assert FlightsJobSpec.load(tmp_path).sinks == ALL_SINKS
    assert table_name(spec) == "flights_a_b"
    body = json.loads((tmp_path / MANIFEST).read_text())
    del body["sinks"]  # a manifest written before sinks were a field
    (tmp_path / MANIFEST).write_text(json.dumps(body))
    assert FlightsJobSpec.load(tmp_path).sinks == BASE_SINKS


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.delta
@pytest.mark.long  # 100 s on 2 shared cores: above make test's budget
def test_flights_job_lands_exactly_once_in_postgres_too(
    tmp_path: Path,
    spark_s3: SparkSession,
    kafka_bootstrap: str,
    s3_endpoint: S3Endpoint,
    postgres: PostgresServer,
) -> None:
    days = 3
    postgres.start()  # another test may have stopped it
    endpoints = FlightsEndpoints(kafka_bootstrap, s3_endpoint, extra={POSTGRES_SINK: postgres.endpoint})
    spec = FlightsJobSpec(
        job_id=f"flights_pg_{uuid.uuid4().hex[:8]}",
        work_dir=str(tmp_path / "run"),
        days=days,
        files_per_trigger=2,
        sinks=ALL_SINKS,
    )
    run = run_flights(spark_s3, spec, endpoints)

    assert run.state is JobState.FINISHED
    landed = flights_data.land(days).rows
    assert run.counters[POSTGRES_SINK].records_committed == landed
    report = verify_run(spec, endpoints, None)  # Delta with deltalake
    assert [s.sink for s in report.sinks] == list(ALL_SINKS)
    for sink in report.sinks:
        assert sink.ok and sink.records == landed, sink
    # the reader's own look: plain psycopg, exact rows, nothing prepared
    with psycopg.connect(autocommit=True, **postgres.endpoint.connect_kwargs()) as conn:
        rows = conn.execute(f'SELECT flight_id FROM public."{table_name(spec)}"').fetchall()
        prepared = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, %s)",
            (gid_prefix(spec.job_id, POSTGRES_SINK),),
        ).fetchone()
    assert Counter(str(r[0]) for r in rows) == expected_input(spec).ids
    assert prepared == (0,)


def test_demo_refuses_an_unknown_sink(tmp_path: Path) -> None:
    result = run_twophase(["demo", "--sinks", "kafka,nosuch", "--days", "1"], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown sink(s) ['nosuch']: choose from kafka,s3,delta,postgres" in result.stderr


@pytest.mark.kafka
@pytest.mark.s3
def test_verify_of_a_postgres_run_says_how_to_run_postgres(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint
) -> None:
    spec = FlightsJobSpec(job_id="flights_pg_verify", work_dir=str(tmp_path / "run"), days=1, sinks=ALL_SINKS)
    spec.save()
    result = run_twophase(
        ["verify", "--work-dir", spec.work_dir], tmp_path, given_env(kafka_bootstrap, s3_endpoint)
    )
    assert one_line_error(result) == (
        "Error: no running PostgreSQL for sink 'postgres': run `twophase services up --postgres` or set "
        "TWOPHASE_POSTGRES_DSN"
    )
