"""The flights job's optional Apache Iceberg sink (``twophase demo --sinks ...,iceberg``).

The sink appends the content columns (:data:`~twophase.integration.verify.CONTENT_COLUMNS`) of
every record to the table ``flights.<table_name>`` (created by the run if missing, partitioned by
``month``), one append snapshot per checkpoint whose summary records the checkpoint id.

Where the table lives (decided by the run's sinks alone, so a restarted job process finds it again):

- the catalog: pyiceberg's SQL catalog on the run's PostgreSQL when the run writes to PostgreSQL
  too (``--sinks ...,postgres,iceberg``), else on a SQLite file in the run's work directory
  (:data:`CATALOG_FILE`; it survives a crash and restart of the job, and the executors of a
  ``local[2]`` job or a cluster on this machine reach it);
- the warehouse: ``s3://<bucket>/iceberg`` on the run's S3 (MinIO).

The read-back never goes through the sink: it opens the catalog with plain pyiceberg, reads the
table with ``table.scan().to_arrow()`` and compares it with the input as the other sinks are. Its
lingering state is every file under the table's ``data/`` folder that no snapshot references
(``table.inspect.all_files()``: every snapshot the table holds); and a checkpoint recorded by two
snapshots of the job (``twophase.checkpoint-id`` in the snapshot summaries) fails the check.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, IcebergType, IntegerType, NestedField, StringType

from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.jobs.optional_sink import OptionalSink
from twophase.integration.services.postgres import PostgresEndpoint
from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.verify import CONTENT_COLUMNS, Expected, SinkReport, compare
from twophase.sinks.errors import ConfigError, ServiceUnavailableError
from twophase.sinks.s3_options import S3Options

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from twophase.integration.jobs.flights_endpoints import FlightsEndpoints

ICEBERG_SINK = "iceberg"
NAMESPACE = "flights"
CATALOG_NAME = "twophase"
CATALOG_FILE = "iceberg-catalog.db"
"""The SQLite catalog's file in the run's work directory (runs without PostgreSQL)."""
WAREHOUSE_FOLDER = "iceberg"
"""The warehouse: ``s3://<bucket>/iceberg``."""
POSTGRES_SINK = "postgres"
SUMMARY_JOB_ID = "twophase.job-id"
SUMMARY_SINK = "twophase.sink"
SUMMARY_CHECKPOINT_ID = "twophase.checkpoint-id"
"""The snapshot summary keys the sink writes (Iceberg table spec: snapshot ``summary``)."""

COLUMN_TYPES: dict[str, tuple[IcebergType, pa.DataType]] = {
    "flight_id": (StringType(), pa.string()),
    "carrier": (StringType(), pa.string()),
    "origin": (StringType(), pa.string()),
    "dest": (StringType(), pa.string()),
    "month": (IntegerType(), pa.int32()),
    "dep_delay": (DoubleType(), pa.float64()),
    "distance": (IntegerType(), pa.int32()),
}
"""Each content column's Iceberg type (what the job's Spark types are written as) and the Arrow
type it is read back as."""


@dataclass(frozen=True)
class IcebergEndpoint:
    """The run's services the Iceberg table lives on (bound by :func:`bind`; the service itself
    starts nothing: the catalog is a file of the run or a database of its PostgreSQL).

    Attributes:
        s3: the run's S3: the warehouse's bucket; the read-back's keys. ``None`` until bound.
        storage: the sink's S3 settings (the job's: no keys when every process takes them from
            its environment). ``None`` until bound.
        postgres: the run's PostgreSQL when it writes to it (the catalog's database), else ``None``.
    """

    s3: S3Endpoint | None = None
    storage: S3Options | None = None
    postgres: PostgresEndpoint | None = None

    def __repr__(self) -> str:
        s3 = self.s3.endpoint_url if self.s3 is not None else None
        return f"IcebergEndpoint(s3={s3!r}, postgres={self.postgres!r})"


def iceberg_service() -> contextlib.AbstractContextManager[IcebergEndpoint]:
    """The service context manager of the sink: yields an unbound :class:`IcebergEndpoint`
    (nothing to start: see the module docstring)."""
    return contextlib.nullcontext(IcebergEndpoint())


def running_iceberg() -> IcebergEndpoint:
    """Always available: the catalog and warehouse are found through the run's own services."""
    return IcebergEndpoint()


def bind(endpoint: IcebergEndpoint, endpoints: FlightsEndpoints) -> IcebergEndpoint:
    """``endpoint`` on the run's S3 and, when the run writes to PostgreSQL, its PostgreSQL."""
    postgres = endpoints.extra.get(POSTGRES_SINK)
    return IcebergEndpoint(
        s3=endpoints.s3,
        storage=endpoints.storage_options(),
        postgres=postgres if isinstance(postgres, PostgresEndpoint) else None,
    )


def table_name(spec: FlightsJobSpec) -> str:
    """The job id lower case, every character outside ``[a-z0-9_]`` as ``_``, with ``flights_``
    in front unless it starts so."""
    name = re.sub(r"[^a-z0-9_]", "_", spec.job_id.lower())
    return name if name.startswith("flights_") else "flights_" + name


def table_identifier(spec: FlightsJobSpec) -> str:
    """``flights.<table_name>``."""
    return f"{NAMESPACE}.{table_name(spec)}"


def warehouse(spec: FlightsJobSpec) -> str:
    """``s3://<bucket>/iceberg``: where the catalog places the run's table."""
    return f"s3://{spec.bucket}/{WAREHOUSE_FOLDER}"


def catalog_location(spec: FlightsJobSpec, endpoint: IcebergEndpoint) -> tuple[str, str | None]:
    """The catalog's URI (no password) and its password: the run's PostgreSQL
    (``postgresql+psycopg://``) when the run writes to PostgreSQL, else the SQLite file
    :data:`CATALOG_FILE` in the work directory (a path; no password).

    Raises:
        ConfigError: the run writes to PostgreSQL but ``endpoint`` is not bound to it.
    """
    if POSTGRES_SINK not in spec.sinks:
        return str(Path(spec.work_dir) / CATALOG_FILE), None
    pg = endpoint.postgres
    if pg is None:
        raise ConfigError("the Iceberg catalog of a run with PostgreSQL lives there: no PostgreSQL endpoint")
    from sqlalchemy.engine import URL

    url = URL.create("postgresql+psycopg", username=pg.user, host=pg.host, port=pg.port, database=pg.dbname)
    return url.render_as_string(hide_password=False), pg.password or None


def sink_config(spec: FlightsJobSpec, endpoint: IcebergEndpoint) -> IcebergSinkConfig:
    """The sink's configuration: the run's table, the content columns, no grace for lingering files.

    No grace (``lingering_grace_ms=0``), as the Delta sink: the job aborts lingering files only
    for checkpoints whose attempts are over (``local[2]`` or a standalone cluster, speculation
    off), so a restarted job deletes what the killed one left at once.

    Raises:
        ConfigError: the endpoint is not bound (:func:`bind`) or lacks the run's PostgreSQL.
    """
    if endpoint.storage is None:
        raise ConfigError("the Iceberg endpoint is not bound to the run's S3")
    uri, password = catalog_location(spec, endpoint)
    return IcebergSinkConfig(
        table=table_identifier(spec),
        catalog_uri=uri,
        catalog_name=CATALOG_NAME,
        catalog_password=password,
        warehouse=warehouse(spec),
        columns=CONTENT_COLUMNS,
        storage_options=endpoint.storage,
        lingering_grace_ms=0,
    )


def iceberg_schema() -> Schema:
    """The table's schema: the content columns, all optional (Spark's columns are nullable)."""
    return Schema(
        *(
            NestedField(field_id=i, name=name, field_type=iceberg, required=False)
            for i, (name, (iceberg, _)) in enumerate(COLUMN_TYPES.items(), start=1)
        )
    )


def create_table(spec: FlightsJobSpec, endpoint: IcebergEndpoint) -> None:
    """Create the namespace and the table (content columns, partitioned by ``month``) unless they
    exist: idempotent, so a restarted run calls it again.

    Raises:
        ServiceUnavailableError: the catalog cannot be reached or refused (message redacted).
        ConfigError: the endpoint is not bound.
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    from twophase.connectors.iceberg.internal.catalog import open_catalog

    config = sink_config(spec, endpoint)
    if config.catalog_scheme == "file":
        Path(config.catalog_uri).parent.mkdir(parents=True, exist_ok=True)
    schema = iceberg_schema()
    month = schema.find_field("month").field_id
    partitioning = PartitionSpec(
        PartitionField(source_id=month, field_id=1000, transform=IdentityTransform(), name="month")
    )
    with open_catalog(config) as catalog:
        try:
            catalog.create_namespace_if_not_exists(NAMESPACE)
            catalog.create_table_if_not_exists(config.identifier, schema=schema, partition_spec=partitioning)
        except Exception as e:
            text = config.redact(str(e)).strip().splitlines()
            raise ServiceUnavailableError(
                f"cannot create Iceberg table {config.table}: {text[0] if text else type(e).__name__}"
            ) from None


def build_sink(spec: FlightsJobSpec, endpoint: IcebergEndpoint) -> IcebergSink:
    """The job's Iceberg sink (:func:`sink_config`; the table must exist: :func:`create_table`)."""
    return IcebergSink(ICEBERG_SINK, sink_config(spec, endpoint))


# ------------------------------------------------------------------------------------ read-back


@dataclass(frozen=True)
class IcebergReadBack:
    """The run's table as plain pyiceberg reads it.

    Attributes:
        table: every row a scan of the current snapshot returns (:data:`CONTENT_COLUMNS`).
        location: the table's location.
        checkpoints: the checkpoint ids the job's snapshots record, oldest snapshot first.
        data_files: files under the table's ``data/`` folder.
        unreferenced: those no snapshot of the table references, sorted.
    """

    table: pa.Table
    location: str
    checkpoints: tuple[int, ...]
    data_files: int
    unreferenced: tuple[str, ...]

    @property
    def repeated_checkpoints(self) -> list[int]:
        """Checkpoint ids recorded by more than one snapshot (a checkpoint committed twice)."""
        return sorted(c for c, n in Counter(self.checkpoints).items() if n > 1)


def reader_catalog(spec: FlightsJobSpec, endpoint: IcebergEndpoint) -> Catalog:
    """The catalog opened with plain pyiceberg (``load_catalog``) and the S3 endpoint's own keys:
    not the sink's configuration. Holds secrets: never log its properties.

    Raises:
        ConfigError: the endpoint is not bound.
        Exception: pyiceberg's, when the catalog cannot be opened.
    """
    from pyiceberg.catalog import load_catalog

    if endpoint.s3 is None:
        raise ConfigError("the Iceberg endpoint is not bound to the run's S3")
    uri, password = catalog_location(spec, endpoint)
    if password is not None:
        from sqlalchemy.engine import make_url

        uri = make_url(uri).set(password=password).render_as_string(hide_password=False)
    elif POSTGRES_SINK not in spec.sinks:
        uri = f"sqlite:///{uri}"
    s3 = endpoint.s3
    return load_catalog(
        CATALOG_NAME,
        type="sql",
        uri=uri,
        warehouse=warehouse(spec),
        **{
            "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
            "s3.endpoint": s3.endpoint_url,
            "s3.region": s3.region,
            "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key,
            "s3.force-virtual-addressing": "false",
        },
    )


def _stored_files(endpoint: IcebergEndpoint, location: str) -> list[str]:
    """Every object under ``<location>/data/`` (full ``s3://`` locations), listed with boto3."""
    assert endpoint.s3 is not None
    parts = urlsplit(location)
    prefix = parts.path.strip("/") + "/data/"
    client = endpoint.s3.boto3_client()
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=parts.netloc, Prefix=prefix):
        found += [f"s3://{parts.netloc}/{o['Key']}" for o in page.get("Contents", [])]
    return found


def _job_checkpoints(table: Table, job_id: str) -> tuple[int, ...]:
    recorded = []
    for snapshot in table.snapshots():  # in the order they were committed
        summary = snapshot.summary
        if summary is None or summary.get(SUMMARY_JOB_ID) != job_id:
            continue
        if summary.get(SUMMARY_SINK) == ICEBERG_SINK:
            recorded.append(int(summary.get(SUMMARY_CHECKPOINT_ID) or -1))
    return tuple(recorded)


def read_table(spec: FlightsJobSpec, endpoint: IcebergEndpoint) -> IcebergReadBack:
    """The run's table read with plain pyiceberg: a scan of the current snapshot, the checkpoints
    the job's snapshots record, and the files of ``data/`` no snapshot references.

    Raises:
        ConfigError: the endpoint is not bound.
        Exception: pyiceberg's or boto3's, when the catalog, the table or S3 cannot be read.
    """
    catalog = reader_catalog(spec, endpoint)
    try:
        table = catalog.load_table(table_identifier(spec))
        rows = table.scan(selected_fields=CONTENT_COLUMNS).to_arrow()
        referenced = set(table.inspect.all_files().column("file_path").to_pylist())
        checkpoints = _job_checkpoints(table, spec.job_id)
        location = table.location()
    finally:
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()
    stored = _stored_files(endpoint, location)
    return IcebergReadBack(
        table=rows.select(list(CONTENT_COLUMNS)).cast(
            pa.schema([pa.field(c, COLUMN_TYPES[c][1]) for c in CONTENT_COLUMNS])
        ),
        location=location,
        checkpoints=checkpoints,
        data_files=len(stored),
        unreferenced=tuple(sorted(f for f in stored if f not in referenced)),
    )


def verify_iceberg(spec: FlightsJobSpec, endpoint: IcebergEndpoint, expected: Expected) -> SinkReport:
    """Read the table back with plain pyiceberg and compare it with the input; its lingering state
    is the files no snapshot references, and a checkpoint two snapshots record is an error.
    Errors go into the report (secrets redacted)."""
    started = time.perf_counter()
    where = f"iceberg {table_identifier(spec)}"
    try:
        back = read_table(spec, endpoint)
    except Exception as e:
        text = (str(e).strip().splitlines() or [""])[0]
        for secret in _secrets(endpoint):
            text = text.replace(secret, "***")
        error = f"{type(e).__name__}: {text}"
        return SinkReport(ICEBERG_SINK, where, error=error, seconds=time.perf_counter() - started)
    repeated = back.repeated_checkpoints
    shown = ", ".join(f.rsplit("/", 1)[-1] for f in back.unreferenced[:5]) or "none"
    more = f" (+{len(back.unreferenced) - 5} more)" if len(back.unreferenced) > 5 else ""
    catalog = "PostgreSQL" if POSTGRES_SINK in spec.sinks else "SQLite"
    return compare(
        ICEBERG_SINK,
        f"{where} at {back.location}",
        back.table,
        expected,
        lingering=len(back.unreferenced),
        lingering_detail=f"unreferenced files: {shown}{more}",
        detail=(
            f"{back.table.num_rows:,} rows read with pyiceberg scan, {catalog} catalog, "
            f"{len(back.checkpoints)} snapshots of the job ({_checkpoints_text(back)}), "
            f"{back.data_files} data files"
        ),
        error=f"checkpoints committed by two snapshots: {repeated}" if repeated else None,
        seconds=time.perf_counter() - started,
    )


def _checkpoints_text(back: IcebergReadBack) -> str:
    if not back.checkpoints:
        return "no checkpoint"
    ids = sorted(set(back.checkpoints))
    span = f"checkpoint {ids[0]}" if len(ids) == 1 else f"checkpoints {ids[0]}-{ids[-1]}"
    return f"{span}, each once" if not back.repeated_checkpoints else f"{span}, some twice"


def _secrets(endpoint: IcebergEndpoint) -> list[str]:
    found = [endpoint.s3.secret_key if endpoint.s3 is not None else ""]
    found.append(endpoint.postgres.password if endpoint.postgres is not None else "")
    return [s for s in found if s]


ICEBERG = OptionalSink(
    name=ICEBERG_SINK,
    service_name="Apache Iceberg",
    how_to_run="its catalog is the run's SQLite file or PostgreSQL and its warehouse the run's S3",
    service=iceberg_service,
    running=running_iceberg,
    prepare=create_table,
    build=build_sink,
    verify=verify_iceberg,
    bind=bind,
)
"""The flights job's Iceberg sink (entry ``iceberg`` of
:data:`~twophase.integration.jobs.flights_sinks.OPTIONAL_SINKS`)."""
