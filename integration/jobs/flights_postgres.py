"""The flights job's optional PostgreSQL sink (``twophase demo --sinks ...,postgres``).

The sink appends the content columns (:data:`~twophase.integration.verify.CONTENT_COLUMNS`:
``flight_id``, ``carrier``, ``origin``, ``dest``, ``month``, ``dep_delay``, ``distance``) of every
record to ``public.<table_name>`` (created by the run if missing, with no key: a duplicate
would show as one, not as an error), one prepared transaction per subtask and checkpoint.

The read-back uses plain psycopg, never the sink's code: ``SELECT`` of every row, compared with the
input as the other sinks are, and the job's prepared transactions still in ``pg_prepared_xacts``
as its lingering state (there must be none once the run finished).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pyarrow as pa

from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
from twophase.connectors.postgres.internal.naming import gid_prefix
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.jobs.optional_sink import OptionalSink
from twophase.integration.services.postgres import PostgresEndpoint
from twophase.integration.services.postgres_service import endpoint_text, postgres_service, running_postgres
from twophase.integration.verify import CONTENT_COLUMNS, Expected, SinkReport, compare
from twophase.sinks.errors import ServiceUnavailableError

POSTGRES_SINK = "postgres"
COLUMN_TYPES = {
    "flight_id": ("text", pa.string()),
    "carrier": ("text", pa.string()),
    "origin": ("text", pa.string()),
    "dest": ("text", pa.string()),
    "month": ("integer", pa.int32()),
    "dep_delay": ("double precision", pa.float64()),
    "distance": ("integer", pa.int32()),
}
"""Each content column's PostgreSQL type (what the job's Spark types are written into) and the
Arrow type it is read back as."""


def table_name(spec: FlightsJobSpec) -> str:
    """The job id (``flights_<UTC time>`` by default) lower case, every character outside
    ``[a-z0-9_]`` as ``_``, with ``flights_`` in front unless it starts so (≤ 63 bytes)."""
    name = re.sub(r"[^a-z0-9_]", "_", spec.job_id.lower())
    return (name if name.startswith("flights_") else "flights_" + name)[:63]


def _connect(endpoint: PostgresEndpoint) -> Any:
    import psycopg

    try:
        return psycopg.connect(autocommit=True, connect_timeout=15, **endpoint.connect_kwargs())
    except psycopg.OperationalError as e:
        text = (str(e).strip().splitlines() or [type(e).__name__])[0]
        text = text.replace(endpoint.password, "***") if endpoint.password else text
        raise ServiceUnavailableError(f"PostgreSQL {endpoint_text(endpoint)}: {text}") from None


def create_table(spec: FlightsJobSpec, endpoint: PostgresEndpoint) -> None:
    """``CREATE TABLE IF NOT EXISTS public.<table_name>`` with the content columns.

    Raises:
        ServiceUnavailableError: the server cannot be reached.
    """
    from psycopg import sql

    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(pg_type))
        for name, (pg_type, _) in COLUMN_TYPES.items()
    )
    with _connect(endpoint) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                sql.Identifier("public", table_name(spec)), columns
            )
        )


def build_sink(spec: FlightsJobSpec, endpoint: PostgresEndpoint) -> PostgresSink:
    """The job's PostgreSQL sink: append mode, the content columns, the endpoint's role."""
    return PostgresSink(
        POSTGRES_SINK,
        PostgresSinkConfig(
            table=table_name(spec), columns=tuple(COLUMN_TYPES), mode="append", **endpoint.sink_fields()
        ),
    )


def read_table(spec: FlightsJobSpec, endpoint: PostgresEndpoint) -> tuple[pa.Table, list[str]]:
    """Every row of the run's table (the content columns) and the gids of the job's sink still
    prepared, read with a plain psycopg connection.

    Raises:
        ServiceUnavailableError: the server cannot be reached.
        psycopg.Error: the table cannot be read.
    """
    from psycopg import sql

    with _connect(endpoint) as conn:
        rows = conn.execute(
            sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in COLUMN_TYPES),
                sql.Identifier("public", table_name(spec)),
            )
        ).fetchall()
        prepared = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %s) ORDER BY prepared",
            (gid_prefix(spec.job_id, POSTGRES_SINK),),
        ).fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in COLUMN_TYPES]
    arrays = {
        name: pa.array(list(values), arrow)
        for (name, (_, arrow)), values in zip(COLUMN_TYPES.items(), columns, strict=True)
    }
    table = pa.table(arrays)
    return table.select(list(CONTENT_COLUMNS)), [str(r[0]) for r in prepared]


def verify_postgres(spec: FlightsJobSpec, endpoint: PostgresEndpoint, expected: Expected) -> SinkReport:
    """Read the table back and compare it with the input; the job's prepared transactions left in
    ``pg_prepared_xacts`` are its lingering state. Errors go into the report."""
    started = time.perf_counter()
    location = f"postgresql://{endpoint_text(endpoint)}/public.{table_name(spec)}"
    try:
        table, prepared = read_table(spec, endpoint)
    except Exception as e:
        text = (str(e).strip().splitlines() or [""])[0]
        error = f"{type(e).__name__}: {text}"
        return SinkReport(POSTGRES_SINK, location, error=error, seconds=time.perf_counter() - started)
    shown = ", ".join(prepared[:5]) or "none"
    return compare(
        POSTGRES_SINK,
        location,
        table,
        expected,
        lingering=len(prepared),
        lingering_detail=f"prepared transactions: {shown}",
        detail=f"{table.num_rows:,} rows read with SELECT",
        seconds=time.perf_counter() - started,
    )


POSTGRES = OptionalSink(
    name=POSTGRES_SINK,
    service_name="PostgreSQL",
    how_to_run="run `twophase services up --postgres` or set TWOPHASE_POSTGRES_DSN",
    service=postgres_service,
    running=running_postgres,
    prepare=create_table,
    build=build_sink,
    verify=verify_postgres,
)
"""The flights job's PostgreSQL sink (entry ``postgres`` of
:data:`~twophase.integration.jobs.flights_sinks.OPTIONAL_SINKS`)."""
