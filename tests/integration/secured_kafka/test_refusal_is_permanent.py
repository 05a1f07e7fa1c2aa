"""A refusal is permanent (#45 item 8): a missing topic Write ACL, met on the executors while the
first epoch writes, ends the job under the DEFAULT restart strategy (three restarts) at once, with
no restart, in one line naming the operation and the resource denied; nothing is committed and
nothing lingers. Before, the restart strategy retried the denial three times (1,520 lines of
stderr, 23 tracebacks)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from support.exactly_once.support import make_input

from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.sink import KafkaSink
from twophase.coordinator.spark.job import Job
from twophase.integration.services.secured_kafka import SecuredKafka
from twophase.sinks.errors import JobRefusedError

from .conftest import Grants

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_a_missing_topic_write_acl_ends_the_job_at_once_without_a_restart(
    spark: Any, secured_kafka: SecuredKafka, grants: Grants, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    secured_kafka.grant_sink("topicdescribe", None, f"{grants.prefix}-")
    secured_kafka.grant(
        "topicdescribe",
        [(ResourceType.TOPIC, grants.topic, ResourcePatternType.LITERAL, AclOperation.DESCRIBE)],
    )
    config = KafkaSinkConfig(
        bootstrap_servers=secured_kafka.bootstrap,
        topic=grants.topic,
        transactional_id_prefix=grants.prefix,
        client_config=secured_kafka.client_config("topicdescribe"),
        connect_attempts=2,
    )
    make_input(tmp_path, files=2, rows_per_file=10)
    job = Job(spark, f"refused-{uuid.uuid4().hex[:6]}", str(tmp_path / "chk")).sink(KafkaSink("out", config))
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "input"))
        .select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    )
    handle = job.start(
        stream, spark_checkpoint_location=str(tmp_path / "spark"), trigger={"availableNow": True}
    )
    with pytest.raises(JobRefusedError) as refused:
        handle.await_termination(300)
    message = str(refused.value)
    assert "\n" not in message, message
    for name in ("not restarted", "KafkaAuthorizationError", "User:topicdescribe", "Write on Topic"):
        assert name in message, message
    assert refused.value.refusal == "KafkaAuthorizationError"
    assert handle.runtime.restarts.restarts == []  # the default strategy would allow three
    assert secured_kafka.read_committed(grants.topic, "reader") == []
    assert secured_kafka.open_transactions(grants.prefix) == []
