"""The driver down for longer than ``transaction.timeout.ms`` (issue #16, case 5).

The first checkpoint is durable (persisted) but not yet committed when the driver stops answering
(the fault hook blocks the driver past the Kafka transaction timeout, then it dies). The brokers
abort the pre-committed transactions on their timeout: their records are lost, and no restart can
bring them back. The restart must say so loudly, by name, with what the transactions held, and the
way forward; never skip them silently. S3 and Delta have no timeout: their part of the checkpoint
commits on the restart. Resumed with the user's opt-in (``ignore_lost_on_recovery``), the job
finishes: Kafka lacks exactly the lost transactions' records, S3 and Delta hold every record once,
and nothing lingers.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.faults.support import (
    BUCKET,
    EXPECTED_RECORDS,
    JOB_CASE_MARKS,
    FaultResult,
    Injector,
    Moment,
    new_spec,
    run_case,
)
from support.faults.verdicts import describe, lost_error

from twophase.integration.jobs.flights import KAFKA_SINK, FlightsEndpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = JOB_CASE_MARKS

TIMEOUT_MS = 15_000
"""The Kafka sink's ``transaction.timeout.ms`` in this case (the brokers check every second)."""
KAFKA = {"transaction_timeout_ms": TIMEOUT_MS, "max_epoch_ms": 10_000, "max_commit_delay_ms": 5_000}


class DriverLost(RuntimeError):
    """The driver process stopped after being unresponsive."""


@pytest.mark.faults_long  # waits out transaction.timeout.ms
def test_driver_down_past_the_transaction_timeout_reports_the_lost_transactions(
    spark: SparkSession, tmp_path: Path, services: FlightsEndpoints, results: list[FaultResult]
) -> None:
    spec = new_spec(tmp_path, "driver_down", BUCKET)

    def down(injector: Injector) -> None:
        time.sleep(TIMEOUT_MS / 1000 + 5)  # the broker aborts the durable, uncommitted transactions
        injector.note(
            f"driver unresponsive {TIMEOUT_MS / 1000 + 5:g} s after persisting checkpoint 1, then lost"
        )
        raise DriverLost("the driver was down past transaction.timeout.ms")

    lost = run_case(
        spark,
        services,
        "driver down > txn timeout",
        Injector(Moment("after_persist", 1), down),
        spec,
        kafka_overrides=KAFKA,
    )
    results.append(lost)
    error = lost_error(lost)
    assert lost.fired and error is not None, f"no TransactionLostError:\n{describe(lost)}"
    message = str(error)
    assert f"sink '{KAFKA_SINK}' checkpoint 1" in message, message  # by name
    assert re.search(r"transactional_id='[^']+', producer_id=\d+, producer_epoch=\d+", message), message
    assert re.search(r"record_count=\d+", message) and "topic_partitions=" in message, message
    assert "ignore_lost_on_recovery=True" in message, message  # the way forward
    lost_records = sum(int(n) for n in re.findall(r"record_count=(\d+)", message))

    resumed = run_case(
        spark,
        services,
        "driver down: resume, LOST ignored",
        Injector(Moment("none"), lambda injector: None),
        spec,
        kafka_overrides=KAFKA,
        ignore_lost_on_recovery=True,
    )
    results.append(resumed)
    assert resumed.error is None, describe(resumed)
    report = resumed.report
    assert report is not None
    for s in report.sinks:
        assert s.error is None and s.duplicates == 0 and s.unexpected == 0, describe(resumed)
        assert s.lingering == 0, f"{s.sink} left {s.lingering_detail}:\n{describe(resumed)}"
        if s.sink == KAFKA_SINK:
            # exactly the lost transactions' records are missing, and only from Kafka
            assert (s.records, s.missing) == (EXPECTED_RECORDS - lost_records, lost_records), describe(
                resumed
            )
        else:
            assert (s.records, s.missing) == (EXPECTED_RECORDS, 0), describe(resumed)
