"""A missing topic Write ACL as the user sees it (#45 item 8): the job of ``refused_job.py`` run in
a process of its own, as a user's script, against SASL_SSL Kafka with a principal that may
describe the topic but not write it.

Before: three restarts, 1,520 lines of stderr and 23 tracebacks. Now the process ends with exit
code 1, its stderr's last line is the one-line ``JobRefusedError`` naming the operation and the
resource denied, the job failed once and was not restarted, and nothing was committed or left
open. What else stderr holds is Spark's log of the failed task and of the query ending with an
error, and Python's report of the uncaught error; the figures are printed for the record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from support.exactly_once.support import make_input
from support.refusal_seen import run_as_user

from twophase.integration.services.secured_kafka import SecuredKafka

from .conftest import Grants

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).parent


def test_a_missing_topic_write_acl_ends_the_users_process_with_one_line_naming_it(
    secured_kafka: SecuredKafka, grants: Grants, tmp_path: Path
) -> None:
    secured_kafka.grant_sink("topicdescribe", None, f"{grants.prefix}-")
    secured_kafka.grant(
        "topicdescribe",
        [(ResourceType.TOPIC, grants.topic, ResourcePatternType.LITERAL, AclOperation.DESCRIBE)],
    )
    make_input(tmp_path, files=2, rows_per_file=10)
    kafka = {
        "bootstrap": secured_kafka.bootstrap,
        "topic": grants.topic,
        "prefix": grants.prefix,
        "client_config": secured_kafka.client_config("topicdescribe"),
    }
    seen = run_as_user(HERE / "refused_job.py", tmp_path, {"REFUSED_JOB_KAFKA": json.dumps(kafka)})
    last = seen.last_line()
    assert last.startswith("twophase.sinks.errors.JobRefusedError: "), last
    for name in ("not restarted", "KafkaAuthorizationError", "User:topicdescribe", "Write on Topic"):
        assert name in last, last
    assert secured_kafka.read_committed(grants.topic, "reader") == []
    assert secured_kafka.open_transactions(grants.prefix) == []
