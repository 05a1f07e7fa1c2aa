"""The Kafka sink's Spark-staged write's driver half: the write's options, the hand-off's
transactions as committables, the schema it refuses."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.internal import naming
from twophase.connectors.kafka.internal.staged_write import (
    PRODUCER_OPTION,
    check_schema,
    staged_tasks,
    write_options,
)
from twophase.sinks.errors import SchemaError

CONFIG = KafkaSinkConfig(
    bootstrap_servers="b:9092",
    topic="out",
    write_path="spark",
    lineage_headers=True,
    client_config={
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "pw",
    },
)


def test_the_write_names_the_python_path_s_transactional_ids() -> None:
    options = write_options(CONFIG, "orders", "job-1", 6, "w1")
    assert options["twophase.transactional.id.prefix"] == naming.default_prefix("job-1")
    assert (options["twophase.sink"], options["twophase.slot"], options["twophase.checkpoint"]) == (
        "orders",
        "2",
        "6",
    )
    assert options["twophase.topic"] == "out" and options["twophase.lineage.job"] == "job-1"


def test_every_producer_setting_travels_under_a_key_spark_redacts() -> None:
    options = write_options(CONFIG, "orders", "job-1", 6, "w1")
    secret = {k: v for k, v in options.items() if "pw" in v}
    assert list(secret) == [PRODUCER_OPTION + "sasl.jaas.config"]
    assert all("secret" in k for k in options if k.startswith("twophase.secret."))
    assert options[PRODUCER_OPTION + "bootstrap.servers"] == "b:9092"


def handed(*transactions: dict[str, object]) -> str:
    return json.dumps(list(transactions))


def transaction(partition: int, attempt: int = 0, records: int = 10) -> dict[str, object]:
    return {
        "partition": partition,
        "attempt": attempt,
        "transactional_id": f"p-out-{partition}-2-{attempt}",
        "producer_id": 7,
        "producer_epoch": 3,
        "topic_partitions": [["out", 1], ["out", 2]],
        "records": records,
        "opened_ms": 1_700_000_000_000,
        "marker_offset": None if partition else 42,
    }


def test_the_hand_off_becomes_one_committable_per_task_with_its_attempt() -> None:
    tasks = staged_tasks(handed(transaction(0), transaction(2, attempt=1, records=5)), 6)
    assert sorted(tasks) == [0, 2]
    assert (tasks[2].attempt, tasks[2].records) == (1, 5)
    c = tasks[0].committable
    assert (c.transactional_id, c.producer_id, c.producer_epoch, c.checkpoint_id) == ("p-out-0-2-0", 7, 3, 6)
    assert c.topic_partitions == (("out", 1), ("out", 2)) and c.marker_offset == 42
    assert tasks[2].committable.marker_offset is None


def test_a_write_that_handed_nothing_or_a_task_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="handed over nothing"):
        staged_tasks(None, 6)
    with pytest.raises(ValueError, match="partition 0 twice"):
        staged_tasks(handed(transaction(0), transaction(0, attempt=1)), 6)


def test_a_timestamp_without_time_zone_is_refused() -> None:
    config = KafkaSinkConfig(
        bootstrap_servers="b:9092", topic="out", write_path="spark", timestamp_column="at"
    )
    check_schema(pa.schema([("value", pa.binary()), ("at", pa.timestamp("us", "UTC"))]), config)
    with pytest.raises(SchemaError, match="TIMESTAMP_NTZ"):
        check_schema(pa.schema([("value", pa.binary()), ("at", pa.timestamp("us"))]), config)
