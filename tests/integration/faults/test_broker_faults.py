"""Kafka broker faults under the flights job (issue #16, cases 1-3), on a three-broker cluster.

Every transactional id has the same coordinator (one ``__transaction_state`` partition), so "the
broker that coordinates the job's transactions" is one broker. After each fault the job must finish
through its restart strategy, and Kafka, S3 and Delta must each hold the 12,208 flights exactly
once with no open transaction, pending upload or unreferenced Delta file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.faults.support import (
    BUCKET,
    JOB_CASE_MARKS,
    MOMENTS,
    Action,
    FaultResult,
    Injector,
    new_spec,
    run_case,
)
from support.faults.verdicts import assert_exactly_once

from twophase.connectors.kafka.internal import naming
from twophase.integration.jobs.flights import KAFKA_SINK, FlightsEndpoints, FlightsJobSpec
from twophase.integration.services.kafka_cluster import KafkaCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = JOB_CASE_MARKS

DOWN_S = 15.0
"""How long a killed broker stays down: past ``broker.session.timeout.ms`` (6 s), so the controller
fences it and its leaderships, the transaction coordinator's included, move to another broker."""
STALL_S = 40.0
"""How long a broker stays SIGSTOPped: past librdkafka's ``request.timeout.ms`` (30 s) and the
admin client's ``request_timeout_ms`` (10 s)."""


def a_transactional_id(spec: FlightsJobSpec) -> str:
    """One of the job's transactional ids (all share one coordinator on this cluster)."""
    return naming.transactional_id(naming.default_prefix(spec.job_id), KAFKA_SINK, 0, 0)


def kill_coordinator(cluster: KafkaCluster, spec: FlightsJobSpec) -> Action:
    def action(injector: Injector) -> None:
        txn_id = a_transactional_id(spec)
        broker = cluster.coordinator_of(txn_id)
        cluster.kill(broker)
        injector.note(f"kill -9 broker {broker} (coordinator of {txn_id})")

        def restart() -> None:
            injector.note(f"broker {broker} rejoined {cluster.restart(broker):.1f} s after its restart")

        injector.later(DOWN_S, restart, f"restart broker {broker}")

    return action


# every moment runs in `make faults` (restarts while the broker is away); make test keeps the
# three-broker cluster's own controls (test_service_controls)
@pytest.mark.faults_long
@pytest.mark.parametrize("moment", ["write", "persist_commit", "mid_commit", "final_checkpoint"])
def test_coordinator_killed_and_restarted(
    moment: str,
    spark: SparkSession,
    tmp_path: Path,
    kafka_cluster: KafkaCluster,
    services: FlightsEndpoints,
    results: list[FaultResult],
) -> None:
    """Case 1: kill -9 of the broker coordinating the job's transactions, restarted 15 s later."""
    spec = new_spec(tmp_path, f"coordinator_kill_{moment}", BUCKET)
    injector = Injector(MOMENTS[moment], kill_coordinator(kafka_cluster, spec))
    result = run_case(spark, services, "coordinator kill -9", injector, spec)
    results.append(result)
    assert_exactly_once(result)


@pytest.mark.faults_long
def test_rolling_restart_of_all_brokers(
    spark: SparkSession,
    tmp_path: Path,
    kafka_cluster: KafkaCluster,
    services: FlightsEndpoints,
    results: list[FaultResult],
) -> None:
    """Case 2: while the first epoch writes, brokers 1, 2, 3 are restarted one after the other
    (SIGTERM, start on the same data directory, wait until back in every ISR, next)."""
    spec = new_spec(tmp_path, "rolling_restart", BUCKET)

    def action(injector: Injector) -> None:
        def roll() -> None:
            for broker in kafka_cluster.broker_ids:
                injector.note(f"broker {broker} restarted, rejoined in {kafka_cluster.restart(broker):.1f} s")

        injector.later(
            0.0, roll, "rolling restart of brokers " + ", ".join(map(str, kafka_cluster.broker_ids))
        )

    injector = Injector(MOMENTS["write"], action)
    result = run_case(spark, services, "rolling restart", injector, spec)
    results.append(result)
    assert_exactly_once(result)


def stall_coordinator(cluster: KafkaCluster, spec: FlightsJobSpec) -> Action:
    def action(injector: Injector) -> None:
        txn_id = a_transactional_id(spec)
        broker = cluster.coordinator_of(txn_id)
        cluster.pause(broker)
        injector.note(f"SIGSTOP broker {broker} (coordinator of {txn_id})")
        injector.later(STALL_S, lambda: cluster.resume(broker), f"SIGCONT broker {broker}")

    return action


@pytest.mark.faults_long
@pytest.mark.parametrize("moment", ["write", "persist_commit"])
def test_coordinator_stalled_past_request_timeout(
    moment: str,
    spark: SparkSession,
    tmp_path: Path,
    kafka_cluster: KafkaCluster,
    services: FlightsEndpoints,
    results: list[FaultResult],
) -> None:
    """Case 3: the coordinating broker is SIGSTOPped for 40 s (past every request timeout), then
    resumed; meanwhile the controller fences it and the coordinator moves."""
    spec = new_spec(tmp_path, f"coordinator_stall_{moment}", BUCKET)
    injector = Injector(MOMENTS[moment], stall_coordinator(kafka_cluster, spec))
    result = run_case(spark, services, "coordinator SIGSTOP 40 s", injector, spec)
    results.append(result)
    assert_exactly_once(result)
