"""The fault controls themselves: the three-broker cluster's handle and the controllable MinIO do
what the fault cases rely on (real processes, real requests; no job)."""

from __future__ import annotations

import uuid

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from twophase.connectors.kafka import KafkaSinkConfig
from twophase.connectors.kafka.internal.admin import KafkaAdmin
from twophase.integration.services.kafka import try_init_transactions
from twophase.integration.services.kafka_cluster import TRANSACTION_STATE_TOPIC, KafkaCluster
from twophase.integration.services.minio_server import MinioServer
from twophase.integration.services.process import wait_ready
from twophase.integration.services.s3 import check_s3

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


@pytest.mark.faults_long  # the three-broker cluster stays out of CI (stop 54): runs in `make faults`
def test_cluster_is_replicated_and_the_coordinator_moves_when_killed(kafka_cluster: KafkaCluster) -> None:
    kafka_cluster.heal()
    assert kafka_cluster.broker_ids == (1, 2, 3)
    state = [row for row in kafka_cluster.partition_state() if row[0] == TRANSACTION_STATE_TOPIC]
    assert [(p, len(replicas), len(isr)) for _t, p, _l, replicas, isr in state] == [(0, 3, 3)]

    # a topic created with the cluster's defaults (as the job's sink creates it) is replicated too
    topic = f"controls-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdmin.connect(KafkaSinkConfig(bootstrap_servers=kafka_cluster.bootstrap, topic=topic))
    try:
        admin.create_topic(topic, -1, -1)
        assert admin.topic_config(topic, "min.insync.replicas") == "2"
    finally:
        admin.close()
    layout = [
        (len(replicas), len(isr))
        for t, _p, _l, replicas, isr in kafka_cluster.partition_state()
        if t == topic
    ]
    assert layout == [(3, 3)] * 3

    txn_id = f"twophase-controls-{uuid.uuid4().hex[:6]}"
    first = kafka_cluster.coordinator_of(txn_id)
    kafka_cluster.kill(first)
    assert not kafka_cluster.running(first)
    # the controller fences the dead broker (broker.session.timeout.ms) and the log's leader moves
    moved = wait_ready(
        lambda: None if kafka_cluster.coordinator_of(txn_id) != first else "not moved", 60, 0.5
    )
    assert moved is None, "the transaction coordinator never moved off the killed broker"
    assert try_init_transactions(kafka_cluster.bootstrap, 30) is None  # 2 of 3 replicas: min ISR holds
    assert kafka_cluster.restart(first) < kafka_cluster.timeout_s
    rows = kafka_cluster.partition_state()
    assert all(first in isr for _t, _p, _l, replicas, isr in rows if first in replicas)


@pytest.mark.faults_long  # the three-broker cluster stays out of CI (stop 54): runs in `make faults`
def test_a_paused_broker_answers_nothing_until_resumed(kafka_cluster: KafkaCluster) -> None:
    kafka_cluster.heal()
    kafka_cluster.pause(2)
    try:
        assert try_init_transactions(kafka_cluster.broker_address(2), 3) is not None
    finally:
        kafka_cluster.resume(2)
    kafka_cluster.wait_rejoined(2)


@pytest.mark.faults_long  # two minutes: the paused endpoint's timeouts
def test_minio_restarts_on_its_data_and_pauses(minio_controls: MinioServer) -> None:
    minio_controls.heal()
    endpoint = minio_controls.endpoint
    endpoint.ensure_bucket("twophase-controls")
    client = endpoint.boto3_client(connect_timeout_s=1, max_attempts=1)
    client.put_object(Bucket="twophase-controls", Key="kept", Body=b"before the crash")

    minio_controls.kill()
    with pytest.raises((BotoCoreError, ClientError)):
        client.get_object(Bucket="twophase-controls", Key="kept")
    minio_controls.restart()
    assert minio_controls.endpoint == endpoint
    assert client.get_object(Bucket="twophase-controls", Key="kept")["Body"].read() == b"before the crash"

    minio_controls.pause()
    try:
        assert check_s3(endpoint, 2) is not None
    finally:
        minio_controls.resume()
    assert check_s3(endpoint, 5) is None


def test_an_iam_deny_takes_effect_at_once_and_is_lifted(minio_controls: MinioServer) -> None:
    minio_controls.heal()
    minio_controls.endpoint.ensure_bucket("twophase-controls")
    user = f"controls-{uuid.uuid4().hex[:6]}"
    client = minio_controls.add_user(user, uuid.uuid4().hex).boto3_client(max_attempts=1)
    client.put_object(Bucket="twophase-controls", Key="chk/a", Body=b"1")
    minio_controls.deny(user, ["s3:PutObject"], ["arn:aws:s3:::twophase-controls/chk/*"], f"deny-{user}")
    with pytest.raises(ClientError, match="AccessDenied"):
        client.put_object(Bucket="twophase-controls", Key="chk/b", Body=b"1")
    client.put_object(Bucket="twophase-controls", Key="other/b", Body=b"1")
    minio_controls.allow_again(user, f"deny-{user}")
    client.put_object(Bucket="twophase-controls", Key="chk/b", Body=b"1")
