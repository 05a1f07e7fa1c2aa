"""The flights job's Iceberg sink (``twophase demo --sinks ...,iceberg``), its parts on the real services.

- where the run's table lives: the SQLite catalog in the work directory, or the run's PostgreSQL
  when it has one (the password never in a URI or a ``repr``);
- the table is created idempotently (a restarted run prepares it again), and the read-back
  (plain pyiceberg) counts the rows, the files no snapshot references and a checkpoint two
  snapshots record, against MinIO with both catalogs;
- the whole flights job into the five sinks (long).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from twophase.integration.jobs import flights_data
from twophase.integration.jobs.flights import FlightsEndpoints, FlightsJobSpec
from twophase.integration.jobs.flights_iceberg import (
    CATALOG_FILE,
    COLUMN_TYPES,
    ICEBERG_SINK,
    IcebergEndpoint,
    bind,
    build_sink,
    catalog_location,
    create_table,
    reader_catalog,
    sink_config,
    table_identifier,
    verify_iceberg,
)
from twophase.integration.jobs.flights_sinks import SINK_CHOICES, check_sinks
from twophase.integration.services import S3Endpoint
from twophase.integration.services.postgres import PostgresEndpoint, PostgresServer
from twophase.integration.verify import CONTENT_COLUMNS, Expected, content_fingerprint
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BUCKET = "twophase-iceberg-it"
ALL_SINKS = ("kafka", "s3", "delta", "postgres", "iceberg")


def _spec(tmp_path: Path, sinks: tuple[str, ...]) -> FlightsJobSpec:
    return FlightsJobSpec(
        job_id=f"flights_ice_{uuid.uuid4().hex[:8]}",
        work_dir=str(tmp_path / "run"),
        bucket=BUCKET,
        sinks=sinks,
    )


def test_the_catalog_is_the_runs_sqlite_file_or_its_postgres(tmp_path: Path) -> None:
    assert SINK_CHOICES[:5] == ALL_SINKS  # then the file sinks of the other stores
    assert check_sinks(["iceberg", "kafka"]) == ("kafka", "iceberg")
    s3 = S3Endpoint("http://127.0.0.1:1", "key", "s3-secret-value")
    pg = PostgresEndpoint("127.0.0.1", 5432, "twophase", "pg-secret-value", "postgres")

    alone = _spec(tmp_path, ("kafka", "iceberg"))
    bound = bind(IcebergEndpoint(), FlightsEndpoints("127.0.0.1:1", s3))
    assert catalog_location(alone, bound) == (str(Path(alone.work_dir) / CATALOG_FILE), None)
    config = sink_config(alone, bound)
    assert (config.catalog_scheme, config.warehouse, config.table) == (
        "file",
        f"s3://{BUCKET}/iceberg",
        f"flights.{alone.job_id}",
    )
    assert config.columns == CONTENT_COLUMNS and config.lingering_grace_ms == 0

    with_pg = _spec(tmp_path, ALL_SINKS)
    bound = bind(IcebergEndpoint(), FlightsEndpoints("127.0.0.1:1", s3, extra={"postgres": pg}))
    uri, password = catalog_location(with_pg, bound)
    assert (uri, password) == ("postgresql+psycopg://twophase@127.0.0.1:5432/postgres", "pg-secret-value")
    shown = repr(sink_config(with_pg, bound)) + repr(bound) + repr(build_sink(with_pg, bound))
    assert "pg-secret-value" not in shown and "s3-secret-value" not in shown
    with pytest.raises(ConfigError, match="no PostgreSQL endpoint"):
        catalog_location(with_pg, IcebergEndpoint(s3=s3))
    with pytest.raises(ConfigError, match="not bound"):
        sink_config(alone, IcebergEndpoint())


def _rows(ids: list[str]) -> pa.Table:
    n = len(ids)
    values = {
        "flight_id": ids,
        "carrier": ["UA"] * n,
        "origin": ["EWR"] * n,
        "dest": ["IAH"] * n,
        "month": [1 + i % 2 for i in range(n)],
        "dep_delay": [float(i) if i % 3 else None for i in range(n)],
        "distance": [1400 + i for i in range(n)],
    }
    return pa.table({c: pa.array(values[c], COLUMN_TYPES[c][1]) for c in CONTENT_COLUMNS})


def _expected(table: pa.Table) -> Expected:
    ids = table.column("flight_id").to_pylist()
    return Expected(len(ids), Counter(ids), flights_data.fingerprint(ids), content_fingerprint(table))


@pytest.mark.s3
@pytest.mark.parametrize("catalog", ["sqlite", "postgres"])
def test_read_back_counts_rows_unreferenced_files_and_repeated_checkpoints(
    tmp_path: Path, s3_endpoint: S3Endpoint, catalog: str, request: pytest.FixtureRequest
) -> None:
    s3_endpoint.ensure_bucket(BUCKET)
    extra = {}
    if catalog == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres")
        server.start()  # another test may have stopped it
        extra = {"postgres": server.endpoint}
    spec = _spec(tmp_path, ALL_SINKS if catalog == "postgres" else ("kafka", "iceberg"))
    endpoint = bind(IcebergEndpoint(), FlightsEndpoints("127.0.0.1:1", s3_endpoint, extra=extra))
    create_table(spec, endpoint)
    create_table(spec, endpoint)  # a restarted run prepares it again
    assert (Path(spec.work_dir) / CATALOG_FILE).is_file() == (catalog == "sqlite")

    rows = _rows([f"f{i}" for i in range(6)])
    table = reader_catalog(spec, endpoint).load_table(table_identifier(spec))
    assert [f.name for f in table.schema().fields] == list(CONTENT_COLUMNS)
    assert [f.name for f in table.spec().fields] == ["month"]
    summary = {"twophase.job-id": spec.job_id, "twophase.sink": ICEBERG_SINK, "twophase.checkpoint-id": "1"}
    table.append(rows, snapshot_properties=summary)

    report = verify_iceberg(spec, endpoint, _expected(rows))
    assert report.ok and report.records == 6, report
    assert "checkpoint 1, each once" in report.detail
    assert {"sqlite": "SQLite catalog", "postgres": "PostgreSQL catalog"}[catalog] in report.detail

    location = table.location()
    stray = f"{location.split('/', 3)[3]}/data/twophase-000000000000/part-00000-1-0-{'0' * 32}.parquet"
    s3_endpoint.boto3_client().put_object(Bucket=BUCKET, Key=stray, Body=b"not referenced")
    report = verify_iceberg(spec, endpoint, _expected(rows))
    assert report.exactly_once and report.lingering == 1 and not report.ok, report
    assert report.lingering_detail == f"unreferenced files: {stray.rsplit('/', 1)[-1]}"

    table.append(rows, snapshot_properties=summary)  # checkpoint 1 a second time
    report = verify_iceberg(spec, endpoint, _expected(rows))
    assert report.error == "checkpoints committed by two snapshots: [1]"
    assert report.duplicates == 6 and not report.ok


@pytest.mark.s3
def test_read_back_of_a_missing_table_is_an_error_without_secrets(
    tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    spec = _spec(tmp_path, ("kafka", "iceberg"))
    endpoint = bind(IcebergEndpoint(), FlightsEndpoints("127.0.0.1:1", s3_endpoint))
    Path(spec.work_dir).mkdir(parents=True)
    report = verify_iceberg(spec, endpoint, _expected(_rows(["a"])))
    assert report.error is not None and report.error.startswith("NoSuchTableError"), report
    assert s3_endpoint.secret_key not in report.error


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.delta
@pytest.mark.long  # two minutes and more on 2 shared cores: above make test's budget
def test_flights_job_lands_exactly_once_in_all_five_sinks(
    tmp_path: Path,
    spark_s3: SparkSession,
    kafka_bootstrap: str,
    s3_endpoint: S3Endpoint,
    postgres: PostgresServer,
) -> None:
    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.jobs.flights import run_flights
    from twophase.integration.jobs.flights_sinks import verify_run
    from twophase.integration.verify import expected_input

    days = 3
    postgres.start()
    endpoints = FlightsEndpoints(
        kafka_bootstrap, s3_endpoint, extra={"postgres": postgres.endpoint, ICEBERG_SINK: IcebergEndpoint()}
    )
    spec = FlightsJobSpec(
        job_id=f"flights_five_{uuid.uuid4().hex[:8]}",
        work_dir=str(tmp_path / "run"),
        days=days,
        files_per_trigger=2,
        sinks=ALL_SINKS,
    )
    run = run_flights(spark_s3, spec, endpoints)

    assert run.state is JobState.FINISHED
    landed = flights_data.land(days).rows
    assert run.counters[ICEBERG_SINK].records_committed == landed
    report = verify_run(spec, endpoints, None)  # Delta with deltalake
    assert [s.sink for s in report.sinks] == list(ALL_SINKS)
    for sink in report.sinks:
        assert sink.ok and sink.records == landed, sink
    # the reader's own look: a plain pyiceberg scan holds every input id once
    bound = bind(IcebergEndpoint(), endpoints)
    table = reader_catalog(spec, bound).load_table(table_identifier(spec))
    ids = table.scan(selected_fields=("flight_id",)).to_arrow().column("flight_id").to_pylist()
    assert Counter(ids) == expected_input(spec).ids
