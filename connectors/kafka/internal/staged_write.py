"""The Kafka sink's Spark-staged epoch (issue #44 item 4): a JVM writer writes, the driver commits.

Each epoch is written by twophase's DataSource V2 writer (``connectors/kafka/jvm``,
:data:`SOURCE`): every Spark task writes its rows with a Java transactional producer under the
transactional id the Python path would use (``<prefix>-<sink>-<partition>-<slot>-<attempt>``,
:mod:`~twophase.connectors.kafka.internal.naming`), flushes, and leaves the transaction open, as
Flink's KafkaSink pre-commits; Spark's output commit coordination lets one attempt per task commit,
and the write's job commit hands those open transactions to this driver through py4j
(``twophase.kafka.StagedWrites``). They become :class:`KafkaCommittable` objects, which the sink
commits with EndTxn like any other, and every attempt not handed over is a lingering transaction
the sink's cleanup aborts. So the rows never reach Python, and nothing in the protocol changes.

The Java client takes Java settings, the sink's ``client_config`` librdkafka's:
:mod:`~twophase.connectors.kafka.internal.java_settings` translates the ones both clients share
and refuses the rest by name when the configuration is made, before anything is written.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from twophase.connectors.kafka.internal import naming
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.connectors.kafka.internal.java_settings import java_producer_settings
from twophase.sinks.errors import SchemaError
from twophase.sinks.spark_staging import StagedTask

if TYPE_CHECKING:
    from twophase.connectors.kafka.config import KafkaSinkConfig

SOURCE = "twophase.kafka.StagedKafkaSource"
"""The staged write's data source (``df.write.format(SOURCE)``, ``connectors/kafka/jvm``)."""
PRODUCER_OPTION = "twophase.secret.producer."
"""The prefix of the producer's settings among the write's options: "secret" in a key makes Spark
redact its value wherever it shows the options (``spark.redaction.regex``'s default)."""


def check_schema(schema: pa.Schema, config: KafkaSinkConfig) -> None:
    """Refuse what the JVM writer's projection cannot carry (beyond the sink's own checks): a
    timestamp column without a time zone (Spark's ``TIMESTAMP_NTZ``).

    Raises:
        SchemaError: naming the column.
    """
    column = config.timestamp_column
    if column is not None and column in schema.names:
        t = schema.field(column).type
        if pa.types.is_timestamp(t) and t.tz is None:
            raise SchemaError(
                f"Kafka sink: write_path='spark' takes a TIMESTAMP timestamp column; {column!r} has no "
                "time zone (TIMESTAMP_NTZ): cast it to TIMESTAMP upstream"
            )


def projection(df: Any, config: KafkaSinkConfig) -> Any:
    """The epoch's DataFrame as the JVM writer reads it: ``value`` and ``key`` as binary (strings
    as their UTF-8 bytes), ``headers`` as ``array<struct<key: string, value: binary>>`` (a map's
    entries), ``partition`` as int, ``topic``, and ``timestamp`` as ms since the epoch: each only
    when the sink maps it. Spark expressions only: the rows stay in the JVM."""
    from pyspark.sql import functions as F

    def header(h: Any) -> Any:
        return F.struct(h["key"].cast("string").alias("key"), h["value"].cast("binary").alias("value"))

    columns = [F.col(config.value_column).cast("binary").alias("value")]
    if config.key_column is not None:
        columns.append(F.col(config.key_column).cast("binary").alias("key"))
    if config.headers_column is not None:
        raw = F.col(config.headers_column)
        is_map = dict(df.dtypes)[config.headers_column].startswith("map<")
        columns.append(F.transform(F.map_entries(raw) if is_map else raw, header).alias("headers"))
    if config.partition_column is not None:
        columns.append(F.col(config.partition_column).cast("int").alias("partition"))
    if config.topic_column is not None:
        columns.append(F.col(config.topic_column).cast("string").alias("topic"))
    if config.timestamp_column is not None:
        columns.append(F.unix_millis(F.col(config.timestamp_column)).alias("timestamp"))
    return df.select(*columns)


def write_options(
    config: KafkaSinkConfig, sink: str, job_id: str, checkpoint_id: int, write_id: str
) -> dict[str, str]:
    """The options of one staged write (:class:`StagedWriteSpec` in ``connectors/kafka/jvm``).
    Holds secrets (the producer's settings, under :data:`PRODUCER_OPTION`): never log it.

    Raises:
        ConfigError: a ``client_config`` setting the JVM writer cannot take.
    """
    options = {
        "twophase.write.id": write_id,
        "twophase.transactional.id.prefix": config.prefix(job_id),
        "twophase.sink": sink,
        "twophase.slot": str(naming.slot_for(checkpoint_id, config.pool_size)),
        "twophase.checkpoint": str(checkpoint_id),
    }
    if config.topic is not None:
        options["twophase.topic"] = config.topic
    if config.lineage_headers:
        options["twophase.lineage.job"] = job_id
    settings = java_producer_settings(
        config.bootstrap_servers, config.transaction_timeout_ms, config.client_config
    )
    options.update({PRODUCER_OPTION + k: v for k, v in settings.items()})
    return options


def new_write_id() -> str:
    """A fresh id for one write attempt's hand-off."""
    return uuid.uuid4().hex


def staged_tasks(handed: str | None, checkpoint_id: int) -> dict[int, StagedTask]:
    """Each Spark partition's open transaction, from the JSON array a write's job commit handed
    over (``StagedWrites.take``): partition, attempt, transactional id, producer id and epoch, the
    (topic, partition) pairs written, records, when it was opened, the marker's lower bound.

    Raises:
        ValueError: nothing was handed over (``None``), a partition twice, or an entry the
            committable refuses.
    """
    if handed is None:
        raise ValueError("the staged Kafka write handed over nothing: its job commit did not run")
    out: dict[int, StagedTask] = {}
    for t in json.loads(handed):
        partition = int(t["partition"])
        if partition in out:
            raise ValueError(f"the staged Kafka write handed over partition {partition} twice")
        committable = KafkaCommittable(
            transactional_id=str(t["transactional_id"]),
            producer_id=int(t["producer_id"]),
            producer_epoch=int(t["producer_epoch"]),
            topic_partitions=tuple((str(topic), int(p)) for topic, p in t["topic_partitions"]),
            record_count=int(t["records"]),
            checkpoint_id=checkpoint_id,
            opened_ms=int(t["opened_ms"]),
            marker_offset=None if t["marker_offset"] is None else int(t["marker_offset"]),
        )
        out[partition] = StagedTask(int(t["attempt"]), committable, committable.record_count)
    return out
