"""Read-back verification of the flights job: does every sink hold every input record exactly once?

For each sink the records a downstream reader sees are read back and compared with the landed
input (DESIGN.md §8):

- Kafka: a ``read_committed`` consumer from the beginning to the end (the last stable offset);
- S3: the Parquet files under the job's prefix, listed and read with pyarrow (Hive partitions);
  on ``--store azure`` the Azure file sink's blobs, read with pyarrow's Azure file system and with
  Spark through hadoop-azure (``abfss://``) when a session is given; on ``--store gcs`` the GCS
  file sink's objects, read with pyarrow's GCS file system and with Spark through Google's GCS
  connector (``gs://``);
- Delta: the table read with delta-spark (``spark.read.format("delta")``), or with deltalake for
  a fast path without Spark;
- an optional sink of the run (``spec.sinks``): its own read-back, e.g. PostgreSQL's plain
  ``SELECT`` and prepared transactions (:mod:`twophase.integration.jobs.flights_postgres`).

Each comparison checks the count, duplicate and missing ``flight_id`` s, the ids' fingerprint
(:func:`twophase.integration.jobs.flights_data.fingerprint`) and a content checksum over columns every
sink carries (:data:`CONTENT_COLUMNS`). Lingering state is reported per sink: open Kafka
transactions with the job's transactional-id prefix (ListTransactions), pending multipart uploads
under the S3 prefix, and Delta data files of the job that no commit references. A sink is
verified only when all of it is clean.

Against secured services the reader is not the writer: the records are read with the
``endpoints`` given to :func:`~twophase.integration.jobs.flights_sinks.verify_run` (e.g. a Kafka
principal with only Read ACLs and the S3 root keys over TLS), and lingering state is listed with
``admin`` (a principal that sees every transaction: ListTransactions only shows those the caller
may describe).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from twophase.coordinator.state.metadata import CheckpointKind
from twophase.coordinator.storage import open_storage
from twophase.integration.jobs import flights_data
from twophase.integration.jobs.flights_base_sinks import DELTA_SINK, KAFKA_SINK, build_sinks
from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
from twophase.integration.jobs.flights_spec import FlightsJobSpec, s3a
from twophase.integration.lingering import SinkLingering, list_lingering
from twophase.integration.readback import NO_SECURITY, end_offsets, read_topic
from twophase.sinks.context import LingeringScope

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CONTENT_COLUMNS = ("flight_id", "carrier", "origin", "dest", "month", "dep_delay", "distance")
"""Columns of the input that every sink carries unchanged; their checksum compares contents."""


@dataclass(frozen=True)
class Expected:
    """What every sink must hold.

    Attributes:
        rows: records in the input.
        ids: the multiset of ``flight_id`` s.
        id_fingerprint: :func:`flights_data.fingerprint` of the ids.
        content_fingerprint: :func:`content_fingerprint` of the input.
    """

    rows: int
    ids: Counter[str]
    id_fingerprint: str
    content_fingerprint: str


@dataclass(frozen=True)
class SinkReport:
    """One sink read back.

    Attributes:
        sink: the sink's name.
        location: where it was read (topic, ``s3://bucket/prefix``, table URI).
        records: records a reader sees.
        duplicates: records beyond the first of each ``flight_id``.
        missing: input ids not seen.
        unexpected: records whose id is not in the input at all.
        ids_ok: the ids' fingerprint equals the input's.
        content_ok: the content checksum equals the input's.
        lingering: open transactions, pending uploads or unreferenced files left behind.
        lingering_detail: what they are.
        detail: extra facts (partitions, files, Delta version).
        error: why the sink could not be read, if it could not.
        seconds: time the read-back took, seconds.
    """

    sink: str
    location: str
    records: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    ids_ok: bool = False
    content_ok: bool = False
    lingering: int = 0
    lingering_detail: str = ""
    detail: str = ""
    error: str | None = None
    seconds: float = 0.0

    @property
    def exactly_once(self) -> bool:
        """Every input record once, nothing else, same contents."""
        return (
            self.error is None
            and self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and self.ids_ok
            and self.content_ok
        )

    @property
    def ok(self) -> bool:
        """Exactly once and no lingering state."""
        return self.exactly_once and self.lingering == 0


@dataclass(frozen=True)
class VerifyReport:
    """The verification of one flights run.

    Attributes:
        job_id: the job.
        expected_records: records in the input.
        sinks: one report per sink (Kafka, S3, Delta, then the run's optional sinks).
        checkpoint_ok: the job's latest checkpoint is its final one (end of input reached).
        checkpoint_detail: what the latest checkpoint is.
    """

    job_id: str
    expected_records: int
    sinks: tuple[SinkReport, ...]
    checkpoint_ok: bool
    checkpoint_detail: str

    @property
    def ok(self) -> bool:
        """Every sink verified and the job finished."""
        return self.checkpoint_ok and all(s.ok for s in self.sinks)

    def sink(self, name: str) -> SinkReport:
        """The report of sink ``name``.

        Raises:
            KeyError: no such sink.
        """
        for s in self.sinks:
            if s.sink == name:
                return s
        raise KeyError(name)


# ------------------------------------------------------------------------------------ checksums


def _canonical_lines(table: pa.Table) -> list[str]:
    cols = [table.column(c).to_pylist() for c in CONTENT_COLUMNS]
    return ["\x1f".join("" if v is None else repr(v) for v in row) for row in zip(*cols, strict=True)]


def content_fingerprint(table: pa.Table) -> str:
    """An order-independent checksum (sha256 of the sorted rows) of :data:`CONTENT_COLUMNS`.

    Values are compared by their Python ``repr`` after Arrow/JSON decoding (``2.0`` for a double,
    ``1`` for an int, quotes for strings), so ``table`` must carry the input's types: strings,
    ints (``month``, ``distance``) and a double ``dep_delay``.
    """
    h = hashlib.sha256()
    for line in sorted(_canonical_lines(table)):
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()


def expected_input(spec: FlightsJobSpec) -> Expected:
    """Read the run's landed input (``spec.days`` days) and compute what every sink must hold."""
    data = flights_data.land(spec.days)
    files = sorted(data.flights_dir.glob("flights-*.parquet"))
    table = pa.concat_tables(pq.read_table(f, columns=list(CONTENT_COLUMNS)) for f in files)
    ids = table.column("flight_id").to_pylist()
    return Expected(
        rows=table.num_rows,
        ids=Counter(ids),
        id_fingerprint=flights_data.fingerprint(ids),
        content_fingerprint=content_fingerprint(table),
    )


def compare(sink: str, location: str, table: pa.Table, expected: Expected, **extra: Any) -> SinkReport:
    """Compare what a sink holds (``table`` with :data:`CONTENT_COLUMNS`) with ``expected``."""
    ids = table.column("flight_id").to_pylist()
    seen = Counter(ids)
    return SinkReport(
        sink=sink,
        location=location,
        records=len(ids),
        duplicates=sum(n - 1 for n in seen.values() if n > 1),
        missing=sum((expected.ids - seen).values()),
        unexpected=sum(n for fid, n in seen.items() if fid not in expected.ids),
        ids_ok=flights_data.fingerprint(ids) == expected.id_fingerprint,
        content_ok=content_fingerprint(table) == expected.content_fingerprint,
        **extra,
    )


# ------------------------------------------------------------------------------------ Kafka


def read_kafka(
    bootstrap: str, topic: str, timeout_s: float = 120.0, security: Mapping[str, str] = NO_SECURITY
) -> tuple[pa.Table, int]:
    """Every committed record of ``topic`` as :data:`CONTENT_COLUMNS` (from the JSON values).

    Reads with :func:`twophase.integration.readback.read_topic` (``read_committed``, up to the
    last stable offsets), logged in with ``security`` (librdkafka settings) when given.

    Returns:
        The table and the number of partitions.

    Raises:
        ServiceUnavailableError: the end is not reached within ``timeout_s`` seconds.
        KafkaException: a consumer error.
    """
    records = read_topic(bootstrap, topic, "read_committed", timeout_s, security=security)
    rows = [json.loads(r.value or b"null") or {} for r in records]
    table = pa.table({c: [r.get(c) for r in rows] for c in CONTENT_COLUMNS})
    return table, len(end_offsets(bootstrap, topic, "read_committed", timeout_s, security))


def lingering_items(spec: FlightsJobSpec, endpoints: FlightsEndpoints, sink: str) -> SinkLingering:
    """Everything ``sink`` of the run left open (nothing counts as held: the run must be finished)."""
    (found,) = [s for s in build_sinks(spec, endpoints) if s.name == sink]
    return list_lingering(found, LingeringScope(spec.job_id, sink))


def _lingering_detail(what: str, listing: SinkLingering, shown: int = 5) -> str:
    ids = [i.id for i in listing.items]
    more = f" (+{len(ids) - shown} more)" if len(ids) > shown else ""
    return f"{what}: {', '.join(ids[:shown]) or 'none'}{more}"


def verify_kafka(
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    expected: Expected,
    admin: FlightsEndpoints | None = None,
) -> SinkReport:
    """Read the topic back ``read_committed`` with ``endpoints`` and list the job's open
    transactions with ``admin`` (default ``endpoints``)."""
    started = time.perf_counter()
    location = f"kafka topic {spec.topic}"
    try:
        open_txns = lingering_items(spec, admin or endpoints, KAFKA_SINK)
        table, partitions = read_kafka(
            endpoints.kafka_bootstrap, spec.topic, security=endpoints.kafka_security
        )
    except Exception as e:
        return SinkReport(KAFKA_SINK, location, error=_one_line(e), seconds=time.perf_counter() - started)
    return compare(
        KAFKA_SINK,
        location,
        table,
        expected,
        lingering=len(open_txns.items),
        lingering_detail=_lingering_detail("open transactions", open_txns),
        detail=f"{partitions} partitions",
        seconds=time.perf_counter() - started,
    )


# ------------------------------------------------------------------------------------ S3


def s3_filesystem(endpoints: FlightsEndpoints) -> pafs.S3FileSystem:
    """A pyarrow S3 file system for the endpoint (path-style, the endpoint's credentials; over
    TLS it verifies the server against ``endpoints.ca_bundle`` when one is given)."""
    s3 = endpoints.s3
    url = urlsplit(s3.endpoint_url)
    tls = {"tls_ca_file_path": endpoints.ca_bundle} if endpoints.ca_bundle else {}
    return pafs.S3FileSystem(
        access_key=s3.access_key,
        secret_key=s3.secret_key,
        region=s3.region,
        endpoint_override=url.netloc,
        scheme=url.scheme or "https",
        **tls,
    )


def azure_filesystem(endpoints: FlightsEndpoints) -> pafs.AzureFileSystem:
    """pyarrow's Azure file system on the run's account with its key, at the endpoint's Blob
    authority (an emulator's ``127.0.0.1:<port>``, path style) — a reader that shares nothing with
    the Azure sink's writer (the Azure SDK for Python).

    Raises:
        ConfigError: no Azure endpoint.
    """
    key, _, blob = endpoints.azure_options().key_sas_endpoint()
    assert endpoints.azure is not None  # azure_options checked it
    url = urlsplit(blob or endpoints.azure.blob_url)
    custom = not url.netloc.endswith(".core.windows.net")
    authority = (
        {
            "blob_storage_authority": url.netloc,
            "blob_storage_scheme": url.scheme,
            "dfs_storage_authority": url.netloc,
            "dfs_storage_scheme": url.scheme,
        }
        if custom
        else {}
    )
    return pafs.AzureFileSystem(account_name=endpoints.azure.account_name, account_key=key, **authority)


def gcs_filesystem(endpoints: FlightsEndpoints) -> pafs.GcsFileSystem:
    """pyarrow's GCS file system on the run's emulator, anonymous, over its scheme and authority —
    a reader that shares nothing with the GCS sink's writer (google-resumable-media).

    Raises:
        ConfigError: no GCS endpoint.
    """
    url = urlsplit(endpoints.gcs_options().emulator_host or "")
    return pafs.GcsFileSystem(anonymous=True, scheme=url.scheme, endpoint_override=url.netloc)


_FILESYSTEMS = {"azure": azure_filesystem, "gcs": gcs_filesystem}
_SPARK_READERS = {"azure": "Spark (hadoop-azure)", "gcs": "Spark (GCS connector)"}


def read_files(spec: FlightsJobSpec, endpoints: FlightsEndpoints) -> tuple[pa.Table, int]:
    """The run's files (Hive partitions ``origin``/``month``) as :data:`CONTENT_COLUMNS` and their
    number, read with pyarrow: S3 (Parquet or JSON lines), Azure or GCS (Parquet)."""
    path = f"{spec.bucket}/{spec.s3_prefix.strip('/')}"
    filesystem = _FILESYSTEMS.get(spec.store, s3_filesystem)(endpoints)
    dataset = ds.dataset(
        path,
        filesystem=filesystem,
        format="json" if spec.s3_format == "jsonl" else "parquet",
        partitioning="hive",
    )
    return dataset.to_table(columns=list(CONTENT_COLUMNS)), len(dataset.files)


def read_files_with_spark(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, spark: SparkSession
) -> tuple[pa.Table, int]:
    """The run's Parquet files on Azure or GCS read by Spark through that store's Hadoop connector
    (hadoop-azure, the GCS connector; the session has its jars:
    :func:`~twophase.integration.jobs.flights.flights_spark_session` with the store's endpoint), as
    :data:`CONTENT_COLUMNS`, and the number of files Spark read."""
    from twophase.coordinator.spark.compat import collect_arrow
    from twophase.integration.jobs.flights_stores import configure_readers, spark_location

    configure_readers(spark, endpoints)
    location = spark_location(spec.files_location, endpoints)
    df = spark.read.option("basePath", location).parquet(location)
    return collect_arrow(df.select(*CONTENT_COLUMNS)), len(df.inputFiles())


def verify_s3(
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    expected: Expected,
    admin: FlightsEndpoints | None = None,
    spark: SparkSession | None = None,
) -> SinkReport:
    """Read the job's files (Parquet or JSON lines, Hive partitions ``origin``/``month``) with
    ``endpoints`` and list what the file sink left open (S3: pending uploads and tails; Azure:
    staged blocks; GCS: nothing can be listed) with ``admin`` (default ``endpoints``). On Azure and
    GCS the files are read twice, with pyarrow and, when ``spark`` is given, with Spark through the
    store's Hadoop connector; both must match."""
    started = time.perf_counter()
    name, location = spec.file_sink, spec.files_location
    what = {"azure": "staged blocks", "gcs": "upload sessions"}.get(spec.store, "pending uploads and tails")
    try:
        uploads = lingering_items(spec, admin or endpoints, name)
        table, files = read_files(spec, endpoints)
        readers = "pyarrow"
        if spark is not None and spec.store in _SPARK_READERS:
            by_spark, spark_files = read_files_with_spark(spec, endpoints, spark)
            mine = compare(name, location, by_spark.cast(_content_schema(by_spark)), expected)
            if not mine.exactly_once or spark_files != files:
                raise AssertionError(
                    f"{_SPARK_READERS[spec.store]} read {mine.records} records in {spark_files} files "
                    f"({mine.duplicates} duplicated, {mine.missing} missing), "
                    f"pyarrow {table.num_rows} in {files}"
                )
            readers = f"pyarrow and {_SPARK_READERS[spec.store]}"
    except Exception as e:
        return SinkReport(name, location, error=_one_line(e), seconds=time.perf_counter() - started)
    return compare(
        name,
        location,
        table.cast(_content_schema(table)),
        expected,
        lingering=len(uploads.items),
        # GCS cannot list upload sessions: its listing says so, and the report with it
        lingering_detail=_lingering_detail(what, uploads) + (f" ({uploads.detail})" * (spec.store == "gcs")),
        detail=f"{files} {'JSON-lines' if spec.s3_format == 'jsonl' else 'Parquet'} files, "
        f"read with {readers}",
        seconds=time.perf_counter() - started,
    )


def _content_schema(table: pa.Table) -> pa.Schema:
    # Hive partition values come back as int32 / string; the content types are the input's
    types = {"month": pa.int32(), "distance": pa.int32(), "dep_delay": pa.float64()}
    return pa.schema([pa.field(f.name, types.get(f.name, pa.string())) for f in table.schema])


# ------------------------------------------------------------------------------------ Delta


def read_delta(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, spark: SparkSession | None
) -> tuple[pa.Table, str]:
    """The Delta table's rows (:data:`CONTENT_COLUMNS`): with delta-spark when ``spark`` is given
    and Delta publishes jars for its Spark, else with deltalake (delta-rs; Spark 4.3 has no Delta
    jars yet). Returns the table and the reader's description."""
    from twophase.coordinator.spark.compat import collect_arrow
    from twophase.integration.spark import has_delta_jars

    if spark is not None and has_delta_jars():
        uri = s3a(spec.delta_uri)
        if spec.delta_uri.startswith("abfss://"):  # through hadoop-azure (ABFS)
            from twophase.integration.jobs.flights_stores import configure_readers, spark_location

            configure_readers(spark, endpoints)
            uri = spark_location(uri, endpoints)
        df = spark.read.format("delta").load(uri).select(*CONTENT_COLUMNS)
        return collect_arrow(df), "delta-spark"
    from deltalake import DeltaTable

    _, _, delta = build_sinks(spec, endpoints)
    table = DeltaTable(spec.delta_uri, storage_options=delta.config.delta_storage_options())
    return table.to_pyarrow_table(columns=list(CONTENT_COLUMNS)), "deltalake"


def verify_delta(
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    expected: Expected,
    spark: SparkSession | None,
    admin: FlightsEndpoints | None = None,
) -> SinkReport:
    """Read the Delta table back with ``endpoints`` and list the job's unreferenced data files
    with ``admin`` (default ``endpoints``)."""
    started = time.perf_counter()
    try:
        orphans = lingering_items(spec, admin or endpoints, DELTA_SINK)
        table, reader = read_delta(spec, endpoints, spark)
    except Exception as e:
        return SinkReport(
            DELTA_SINK, spec.delta_uri, error=_one_line(e), seconds=time.perf_counter() - started
        )
    return compare(
        DELTA_SINK,
        spec.delta_uri,
        table.cast(_content_schema(table)),
        expected,
        lingering=len(orphans.items),
        lingering_detail=_lingering_detail("unreferenced files", orphans),
        detail=f"{orphans.detail}, read with {reader}",
        seconds=time.perf_counter() - started,
    )


# ------------------------------------------------------------------------------------ the job


def checkpoint_state(spec: FlightsJobSpec, endpoints: FlightsEndpoints | None = None) -> tuple[bool, str]:
    """Whether the job's latest checkpoint is final (end of input); and a description. Checkpoints
    on ``s3://`` are read with ``endpoints``' credentials (else the standard AWS chain), on
    ``abfss://`` and ``gs://`` with its store's endpoint."""
    s3 = endpoints.s3 if endpoints is not None else None
    options = s3.s3_options() if s3 is not None else None
    try:
        azure = endpoints.azure_options() if endpoints is not None and spec.store == "azure" else None
        gcs = endpoints.gcs_options() if endpoints is not None and spec.store == "gcs" else None
        latest = open_storage(
            spec.checkpoint_dir, spec.job_id, s3_options=options, azure_options=azure, gcs_options=gcs
        ).latest()
    except Exception as e:
        return False, _one_line(e)
    if latest is None:
        return False, "no checkpoint: the job never completed one"
    finished = latest.end_of_input and latest.kind in (CheckpointKind.FINAL, CheckpointKind.SAVEPOINT)
    what = f"checkpoint {latest.checkpoint_id} ({latest.kind.value}, end_of_input={latest.end_of_input})"
    return finished, what


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
