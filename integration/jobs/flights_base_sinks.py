"""The flights job's three base sinks (Kafka, S3 Parquet or JSON lines — or on ``--store azure``
and ``--store gcs`` that store's file sink —, Delta) configured for a run, and the enriched
record's columns they store."""

from __future__ import annotations

from typing import Any

from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
from twophase.connectors.s3 import FileFormat, RollingPolicy, S3Sink, S3SinkConfig
from twophase.integration.jobs.flights_endpoints import FlightsEndpoints
from twophase.integration.jobs.flights_spec import STORE_FILE_SINKS, FlightsJobSpec
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError

KAFKA_SINK = "kafka"
S3_SINK = "s3"
DELTA_SINK = "delta"
SINK_NAMES = (KAFKA_SINK, S3_SINK, DELTA_SINK)

TYPED_COLUMNS = (
    "flight_id",
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "arr_time",
    "sched_arr_time",
    "arr_delay",
    "carrier",
    "airline",
    "flight",
    "tailnum",
    "origin",
    "origin_name",
    "origin_tzone",
    "dest",
    "dest_name",
    "dest_tzone",
    "air_time",
    "distance",
    "delay_class",
    "sched_dep_at",
)
"""The enriched record's columns: what S3 and Delta store and Kafka's JSON value holds."""

ROW_FILE_BYTES = 512 * 1024
"""JSON-lines files roll at 512 KiB: some roll mid-run, most span several checkpoints."""

KEY_COLUMN = "flight_id"
VALUE_COLUMN = "value"


def build_sinks(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints
) -> tuple[KafkaSink, TwoPhaseCommitSink[Any, Any], DeltaSink]:
    """The job's three sinks, configured for ``spec`` (driver side; nothing is contacted yet): Kafka,
    the file sink of the run's store (:func:`build_file_sink`) and Delta.

    Each takes its own projection of the shared batch by configuration (DESIGN.md §6): the Kafka
    sink its key/value columns, the S3 and Delta sinks ``TYPED_COLUMNS`` (an Arrow select per
    batch, zero-copy; nothing runs per record in Python). Delta writes Spark's zoned timestamps as
    Delta ``timestamp``.

    Raises:
        ConfigError: an invalid setting.
    """
    kafka = KafkaSink(
        KAFKA_SINK,
        KafkaSinkConfig(
            bootstrap_servers=endpoints.kafka_bootstrap,
            topic=spec.topic,
            key_column=KEY_COLUMN,
            value_column=VALUE_COLUMN,
            create_topic=True,
            new_topic_partitions=spec.kafka_partitions,
            new_topic_replication_factor=spec.kafka_replication,
            client_config={"linger.ms": 20, "compression.type": "lz4", **endpoints.kafka_security},
            write_path=spec.write_path if spec.sinks == ("kafka",) else "python",
        ),
    )
    delta = DeltaSink(
        DELTA_SINK,
        DeltaSinkConfig(
            table_uri=spec.delta_uri,
            columns=TYPED_COLUMNS,
            storage_options=endpoints.delta_options(spec.delta_uri),
            table_name="flights",
        ),
    )
    return kafka, build_file_sink(spec, endpoints), delta


def build_file_sink(spec: FlightsJobSpec, endpoints: FlightsEndpoints) -> TwoPhaseCommitSink[Any, Any]:
    """The run's file sink, named after its store (:attr:`FlightsJobSpec.file_sink`): Parquet
    partitioned by ``origin`` and ``month`` under :attr:`FlightsJobSpec.files_location`. On S3
    JSON lines roll at :data:`ROW_FILE_BYTES`; the Azure and GCS sinks roll every file per
    checkpoint, with the same layout (their configurations share it).

    Raises:
        ConfigError: an invalid setting; JSON lines on Azure or GCS (files there never span
            checkpoints); no endpoint of the run's store.
    """
    if spec.store in STORE_FILE_SINKS:
        if spec.s3_format != "parquet":
            raise ConfigError(
                f"--store {spec.store} writes Parquet only in the flights job, not {spec.s3_format!r}: "
                "its file sink rolls every file per checkpoint"
            )
        layout: dict[str, Any] = {
            "location": spec.files_location,
            "format": "parquet",
            "partition_by": ("origin", "month"),
            "columns": TYPED_COLUMNS,
        }
        if spec.store == "gcs":
            from twophase.connectors.gcs import GcsFileSink, GcsFileSinkConfig

            return GcsFileSink(
                spec.file_sink, GcsFileSinkConfig(storage_options=endpoints.gcs_options(), **layout)
            )
        from twophase.connectors.azure import AzureBlobSink, AzureBlobSinkConfig

        return AzureBlobSink(
            spec.file_sink, AzureBlobSinkConfig(storage_options=endpoints.azure_options(), **layout)
        )
    options = endpoints.storage_options()
    return S3Sink(
        S3_SINK,
        S3SinkConfig(
            storage_options=options,
            bucket=spec.bucket,
            prefix=spec.s3_prefix,
            format=FileFormat(spec.s3_format),
            rolling=(  # Parquet rolls per checkpoint: the default policy
                RollingPolicy(max_file_bytes=ROW_FILE_BYTES)
                if spec.s3_format != "parquet"
                else RollingPolicy()
            ),
            partition_by=("origin", "month"),
            columns=TYPED_COLUMNS,
            write_path=spec.write_path,
        ),
    )
