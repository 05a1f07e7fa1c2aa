"""Refusals through the secured broker (#27 item 4): each ends the job with ONE error line that
names the listener, the mechanism, or the operation and resource denied; before any record is
written, or as the failure of the epoch that met it. Afterwards nothing is committed (a
``read_committed`` reader with only Read sees no record) and nothing lingers (no open
transaction under the job's prefix), and the password is in neither the error nor the logs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from support.exactly_once.support import make_input

from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.errors import KafkaAuthenticationError, KafkaAuthorizationError
from twophase.connectors.kafka.sink import KafkaSink
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.job import Job
from twophase.integration.services.certificates import make_tls_files
from twophase.integration.services.secured_kafka import SecuredKafka
from twophase.sinks.errors import ConfigError

from .conftest import Grants

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

SINK = "out"


def _job_error(spark: Any, root: Path, config: KafkaSinkConfig) -> BaseException:
    """Run a bounded job with ``config`` (no restarts); the error that ended it."""
    from pyspark.sql import functions as F

    make_input(root, files=2, rows_per_file=10)
    runtime = RuntimeConfig(restart=RestartStrategy.fixed_delay(max_restarts=0, delay_ms=0))
    job = Job(spark, f"refused-{uuid.uuid4().hex[:6]}", str(root / "chk"), config=runtime)
    job = job.sink(KafkaSink(SINK, config))
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(root / "input"))
        .select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    )
    try:
        handle = job.start(
            stream, spark_checkpoint_location=str(root / "spark"), trigger={"availableNow": True}
        )
        handle.await_termination(300)
    except Exception as e:
        return e
    raise AssertionError(f"the job was not refused: {handle.status}")


def _refusal(error: BaseException, kind: type[Exception]) -> str:
    """The one line of the connector's ``kind`` error that ended the job: the error itself when
    the driver raised it, else the line an executor's traceback gives it (the epoch failed; the
    runtime wraps the task's error in a JobError)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    seen = error
    while seen is not None:
        lines = {ln.strip() for ln in str(seen).splitlines() if f"{kind.__name__}: " in ln}
        if lines:
            assert len(lines) == 1, lines
            return lines.pop().split(f"{kind.__name__}: ", 1)[1]
        seen = seen.__cause__ or seen.__context__
    raise AssertionError(f"no {kind.__name__} in {error!r}")


def _config(broker: SecuredKafka, grants: Grants, user: str, **overrides: Any) -> KafkaSinkConfig:
    client_config = broker.client_config(user) | overrides.pop("client_config", {})
    return KafkaSinkConfig(
        bootstrap_servers=broker.bootstrap,
        topic=overrides.pop("topic", grants.topic),
        transactional_id_prefix=grants.prefix,
        client_config=client_config,
        connect_attempts=2,
        **overrides,
    )


def _assert_nothing_left(broker: SecuredKafka, grants: Grants) -> None:
    assert broker.read_committed(grants.topic, "reader") == []
    assert broker.open_transactions(grants.prefix) == []


Case = Callable[[SecuredKafka, Grants, Path], KafkaSinkConfig]


def _wrong_password(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    return _config(b, g, "sink", client_config={"sasl.password": "not-" + b.password("sink")})


def _mechanism_not_enabled(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    return _config(b, g, "sink", client_config={"sasl.mechanism": "SCRAM-SHA-256"})


def _other_ca(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    other = make_tls_files(tmp / "other-ca", name="other")
    return _config(b, g, "sink", client_config={"ssl.ca.location": str(other.ca_cert)})


def _no_topic_acl(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    b.grant_sink("txnonly", None, f"{g.prefix}-")
    return _config(b, g, "txnonly")


def _no_transactional_id_acl(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    b.grant_sink("topiconly", g.topic, None)
    return _config(b, g, "topiconly")


def _no_create_acl(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    missing = f"{g.topic}-new"
    b.grant_sink("nocreate", missing, f"{g.prefix}-")
    return _config(b, g, "nocreate", topic=missing, create_topic=True)


def _describe_only_transactional_id(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    b.grant_sink("describeonly", g.topic, None)
    b.grant(
        "describeonly",
        [
            (
                ResourceType.TRANSACTIONAL_ID,
                f"{g.prefix}-",
                ResourcePatternType.PREFIXED,
                AclOperation.DESCRIBE,
            )
        ],
    )
    return _config(b, g, "describeonly")


def _describe_only_topic(b: SecuredKafka, g: Grants, tmp: Path) -> KafkaSinkConfig:
    b.grant_sink("topicdescribe", None, f"{g.prefix}-")
    b.grant(
        "topicdescribe", [(ResourceType.TOPIC, g.topic, ResourcePatternType.LITERAL, AclOperation.DESCRIBE)]
    )
    return _config(b, g, "topicdescribe")


@pytest.mark.parametrize(
    ("case", "kind", "names"),
    [
        (
            _wrong_password,
            KafkaAuthenticationError,
            ["SASL_SSL listener", "SCRAM-SHA-512 login of user 'sink'"],
        ),
        (
            _mechanism_not_enabled,
            KafkaAuthenticationError,
            ["SASL_SSL listener", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        ),
        (_other_ca, KafkaAuthenticationError, ["SASL_SSL listener", "TLS handshake", "ssl.ca.location"]),
        (_no_topic_acl, KafkaAuthorizationError, ["User:txnonly", "Describe on Topic"]),
        (
            _no_transactional_id_acl,
            KafkaAuthorizationError,
            ["User:topiconly", "Describe on TransactionalId"],
        ),
        (_no_create_acl, KafkaAuthorizationError, ["User:nocreate", "Create on Topic", "CreateTopics"]),
        (_describe_only_topic, KafkaAuthorizationError, ["User:topicdescribe", "Write on Topic"]),
        (
            _describe_only_transactional_id,
            KafkaAuthorizationError,
            ["User:describeonly", "Write on TransactionalId"],
        ),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) and not isinstance(v, type) else None,
)
def test_refused_in_one_line_with_nothing_committed_or_lingering(
    spark: Any,
    secured_kafka: SecuredKafka,
    grants: Grants,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: Case,
    kind: type[Exception],
    names: list[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka")
    config = case(secured_kafka, grants, tmp_path)
    message = _refusal(_job_error(spark, tmp_path, config), kind)
    assert "\n" not in message, message
    for name in names:
        assert name in message, message
    _assert_nothing_left(secured_kafka, grants)
    secrets = [secured_kafka.password(u) for u in secured_kafka.users] + [
        str(config.client_config["sasl.password"])
    ]
    for secret in secrets:
        assert secret not in message and secret not in caplog.text


def test_unknown_mechanism_is_refused_when_configured(secured_kafka: SecuredKafka, grants: Grants) -> None:
    with pytest.raises(ConfigError, match="SASL mechanism 'SCRAM-SHA-1024' is unknown") as refused:
        _config(secured_kafka, grants, "sink", client_config={"sasl.mechanism": "SCRAM-SHA-1024"})
    assert secured_kafka.password("sink") not in str(refused.value)
