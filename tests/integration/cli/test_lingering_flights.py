"""``twophase lingering`` of a flights run with the optional sinks: PostgreSQL and Iceberg.

A run's PostgreSQL table and Iceberg table are prepared as the job prepares them; a prepared
transaction under the job's gid prefix and a data file under the job's Iceberg data prefix are
left as a crashed job leaves them. The command (a subprocess, as a user runs it) lists both as
lingering, never shows a password, and ``--abort`` rolls the transaction back and deletes the file.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.cli import json_output, run_twophase

from twophase.connectors.iceberg import IcebergSink
from twophase.connectors.iceberg.internal import naming as iceberg_naming
from twophase.connectors.postgres import PostgresCommittable
from twophase.connectors.postgres.internal import naming as pg_naming
from twophase.integration.jobs.flights import FlightsEndpoints, FlightsJobSpec
from twophase.integration.jobs.flights_iceberg import IcebergEndpoint, bind, reader_catalog, table_identifier
from twophase.integration.jobs.flights_sinks import build_optional_sinks
from twophase.integration.lingering import ItemStatus, list_lingering
from twophase.integration.services import S3Endpoint
from twophase.integration.services.launcher import given_env
from twophase.integration.services.postgres import PostgresServer, postgres_server
from twophase.sinks.context import LingeringScope

BUCKET = "twophase-lingering-it"
SINKS = ("postgres", "iceberg")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A native PostgreSQL for this module's tests."""
    with postgres_server() as server:
        yield server


def _items(body: dict[str, Any], key: str) -> dict[str, list[tuple[str, str]]]:
    return {s["sink"]: [(i["id"], i["status"]) for i in s["items"]] for s in body[key]}


@pytest.mark.kafka
@pytest.mark.s3
@pytest.mark.slow
def test_lingering_lists_and_aborts_postgres_transactions_and_iceberg_files(
    tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint, postgres: PostgresServer
) -> None:
    spec = FlightsJobSpec(
        job_id=f"flights_linger_{uuid.uuid4().hex[:8]}",
        work_dir=str(tmp_path / "w"),
        bucket=BUCKET,
        sinks=SINKS,
    )
    spec.save()
    s3_endpoint.ensure_bucket(BUCKET)
    endpoints = FlightsEndpoints(
        kafka_bootstrap, s3_endpoint, extra={"postgres": postgres.endpoint, "iceberg": IcebergEndpoint()}
    )
    pg_sink, iceberg_sink = build_optional_sinks(spec, endpoints)  # creates both tables

    # what a job killed after its tasks pre-committed checkpoint 1 leaves behind
    gid = pg_naming.make_gid(spec.job_id, "postgres", 1, 0, 0, pg_naming.new_nonce())
    conn = psycopg.connect(**postgres.endpoint.connect_kwargs())
    conn.tpc_begin(gid)
    conn.execute(f'INSERT INTO public."{spec.job_id}" (flight_id) VALUES (%s)', ("f1",))
    conn.tpc_prepare()
    conn.close()  # the transaction stays prepared
    location = (
        reader_catalog(spec, bind(IcebergEndpoint(), endpoints)).load_table(table_identifier(spec)).location()
    )
    token = iceberg_naming.job_token(spec.job_id, "iceberg")
    name = iceberg_naming.data_file_name(0, 1, 0, uuid.uuid4().hex)
    rel = f"data/twophase-{token}/{name}"
    key = f"{location.split('/', 3)[3]}/{rel}"
    s3_endpoint.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=b"written, never committed")

    # the listing in process: nothing held, so both are lingering
    for sink, item in ((pg_sink, gid), (iceberg_sink, rel)):
        listing = list_lingering(sink, LingeringScope(spec.job_id, sink.name))
        assert [(i.id, i.status) for i in listing.items] == [(item, ItemStatus.LINGERING)], listing
    # a retained checkpoint holds them: held; a file younger than the sink's grace, or a
    # transaction of a checkpoint after the scope's: undecidable (abort_lingering keeps them)
    held = PostgresCommittable(gid=gid, record_count=1)
    listing = list_lingering(pg_sink, LingeringScope(spec.job_id, "postgres", held=(held,)))
    assert [i.status for i in listing.items] == [ItemStatus.HELD]
    listing = list_lingering(pg_sink, LingeringScope(spec.job_id, "postgres", up_to_checkpoint=0))
    assert [i.status for i in listing.items] == [ItemStatus.UNDECIDABLE]
    assert isinstance(iceberg_sink, IcebergSink)
    patient = IcebergSink("iceberg", dataclasses.replace(iceberg_sink.config, lingering_grace_ms=3_600_000))
    listing = list_lingering(patient, LingeringScope(spec.job_id, "iceberg"))
    assert [(i.status, i.detail) for i in listing.items] == [
        (ItemStatus.UNDECIDABLE, "checkpoint 1, younger than the grace: kept")
    ]

    # one command lists (before), aborts and lists again (after)
    env = given_env(kafka_bootstrap, s3_endpoint, postgres.endpoint)
    args = ["lingering", "--work-dir", spec.work_dir, "--abort", "--force", "--json"]
    result = run_twophase(args, tmp_path, env)
    assert result.returncode == 0, result.stderr
    for secret in (postgres.endpoint.password, s3_endpoint.secret_key):
        assert secret not in result.stdout + result.stderr
    body = json_output(result)
    assert _items(body, "sinks") == {"postgres": [(gid, "lingering")], "iceberg": [(rel, "lingering")]}
    assert body["aborted"] == {"postgres": 1, "iceberg": 1}
    assert _items(body, "after") == {"postgres": [], "iceberg": []}
    with psycopg.connect(autocommit=True, **postgres.endpoint.connect_kwargs()) as conn:
        left = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchall()
        rows = conn.execute(f'SELECT count(*) FROM public."{spec.job_id}"').fetchone()
    assert left == [] and rows == (0,)
    listed = s3_endpoint.boto3_client().list_objects_v2(Bucket=BUCKET, Prefix=key)
    assert listed.get("KeyCount", 0) == 0
