"""Exactly-once through a secured broker (#27 items 2 and 3): the Job API on local[2] writes through
the SASL_SSL listener as ``sink`` (SCRAM-SHA-512, PLAIN over TLS, and OAUTHBEARER with unsecured
JWS tokens from ``oauth_cb``, on both client paths), with only the ACLs the
documentation lists; a ``read_committed`` consumer with only Read sees every record once.
Lingering cleanup (at the job's start, and ``twophase lingering --abort``) logs in the same way.
No password reaches the logs, the CLI's output, reprs, metrics or the checkpoint files.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from support.exactly_once.support import make_input

from twophase.connectors.kafka import oauth
from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.sink import KafkaSink
from twophase.coordinator.spark.job import Job
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.integration.cli.main import main as cli_main
from twophase.integration.services.secured_kafka import SINK_SETTINGS_ENV, SecuredKafka

from .conftest import Grants

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

SINK = "out"


def _linger(broker: SecuredKafka, topic: str, transactional_id: str, mechanism: str) -> None:
    """Leave an open transaction with one record on ``transactional_id`` (as ``sink``)."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}
        | oauth.librdkafka_settings(broker.client_config("sink", mechanism))
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"lingering", key=b"-1")
    assert producer.flush(30) == 0
    # dropping the producer leaves the transaction open


def _files_hold(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


UNSIGNED_JWS_HEADER = "eyJhbGciOiJub25lIn0"
"""``{"alg":"none"}`` in base64url: the start of every unsecured OAUTHBEARER token."""


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"])
def test_job_api_writes_exactly_once_through_sasl_ssl(
    spark: Any,
    secured_kafka: SecuredKafka,
    grants: Grants,
    tmp_path: Path,
    mechanism: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pyspark.sql import functions as F

    caplog.set_level(logging.DEBUG, logger="kafka")
    caplog.set_level(logging.DEBUG, logger="twophase")
    password = secured_kafka.password("sink")
    # a transaction left open by an earlier run of this job: fenced at the job's start
    _linger(secured_kafka, grants.topic, f"{grants.prefix}-{SINK}-1-3", mechanism)
    assert secured_kafka.open_transactions(grants.prefix) == [f"{grants.prefix}-{SINK}-1-3"]

    expected = make_input(tmp_path, files=2, rows_per_file=40)
    config = KafkaSinkConfig(
        bootstrap_servers=secured_kafka.bootstrap,
        topic=grants.topic,
        transactional_id_prefix=grants.prefix,
        client_config=secured_kafka.client_config("sink", mechanism),
    )
    job = Job(spark, "secured", str(tmp_path / "chk")).sink(KafkaSink(SINK, config))
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "input"))
        .select(
            F.col("id").cast("string").alias("key"),
            F.concat(F.lit("v-"), F.col("id").cast("string")).alias("value"),
        )
    )
    handle = job.start(
        stream, spark_checkpoint_location=str(tmp_path / "spark"), trigger={"availableNow": True}
    )
    assert handle.await_termination(300)
    assert handle.status is JobState.FINISHED, handle.status

    records = secured_kafka.read_committed(grants.topic, "reader")
    assert sorted(int(k) for k, _ in records if k is not None) == sorted(expected)  # each once
    assert all(v == f"v-{int(k)}".encode() for k, v in records if k is not None)
    assert secured_kafka.open_transactions(grants.prefix) == []

    assert password not in caplog.text and UNSIGNED_JWS_HEADER not in caplog.text
    assert password not in repr(job.sinks) + repr(config) + repr(handle.metrics)
    assert _files_hold(tmp_path / "chk", password) == []


def test_twophase_lingering_lists_and_aborts_through_scram(
    secured_kafka: SecuredKafka,
    grants: Grants,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka")
    password = secured_kafka.password("sink")
    txn_id = f"{grants.prefix}-{SINK}-0-2"
    _linger(secured_kafka, grants.topic, txn_id, "SCRAM-SHA-512")
    settings = {
        "bootstrap": secured_kafka.bootstrap,
        "topic": grants.topic,
        "prefix": grants.prefix,
        "name": SINK,
        "client_config": secured_kafka.client_config("sink"),
    }
    monkeypatch.setenv(SINK_SETTINGS_ENV, json.dumps(settings))
    target = [
        "--sinks",
        "twophase.integration.services.secured_kafka:kafka_sinks_from_environment",
        "--checkpoint-dir",
        str(tmp_path / "chk"),
        "--job-id",
        "secured",
    ]
    runner = CliRunner()

    listed = runner.invoke(cli_main, ["lingering", "--json", *target], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    [sink] = json.loads(listed.output)["sinks"]
    assert [(i["id"], i["status"]) for i in sink["items"]] == [(txn_id, "lingering")]

    aborted = runner.invoke(
        cli_main, ["lingering", "--abort", "--force", "--json", *target], catch_exceptions=False
    )
    assert aborted.exit_code == 0, aborted.output
    assert json.loads(aborted.output)["aborted"] == {SINK: 1}
    assert secured_kafka.open_transactions(grants.prefix) == []
    assert secured_kafka.read_committed(grants.topic, "reader") == []  # the open record was aborted

    assert password not in listed.output + aborted.output + caplog.text
