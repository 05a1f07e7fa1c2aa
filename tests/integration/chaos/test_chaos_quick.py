"""The quick chaos subset (``make test``): the flights job on 14 days crashed three ways, each
restarted until it finished, each sink verified exactly once with nothing lingering.

The full matrix (every applicable fault point and hit in six configurations, plus kill -9 at seeded
moments, 300 trials) runs with ``make chaos``; its tables go into ``CHAOS.md``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from twophase.integration.chaos.runner import TrialPlan, run_trial
from twophase.integration.jobs.flights import FlightsEndpoints
from twophase.integration.services import S3Endpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.s3,
    pytest.mark.delta,
    pytest.mark.slow,
]

DAYS = 14
FILES_PER_TRIGGER = 7  # 2 micro-batches of 2 partitions, then the final checkpoint

QUICK: list[Any] = [
    # durable, not committed: re-commit on restart; every make compat cell and make chaos run it
    pytest.param(
        TrialPlan(0, "fault", fault="after_persist:2"), marks=[pytest.mark.compat, pytest.mark.long]
    ),
    pytest.param(  # a worker dies pre-committed; task retried (crash points cover it in make test)
        TrialPlan(1, "fault", fault="after_pre_commit:3"), marks=pytest.mark.long
    ),
    pytest.param(  # kill -9 of driver, JVM and workers mid-run (make chaos runs hundreds)
        TrialPlan(2, "kill", kill_after_s=(17.0,)), marks=pytest.mark.long
    ),
]


@pytest.mark.parametrize("plan", QUICK, ids=lambda p: str(p.label).replace(" ", "_"))
def test_flights_job_survives_crash_exactly_once(
    plan: TrialPlan, tmp_path: Path, kafka_bootstrap: str, s3_endpoint: S3Endpoint, spark_s3: SparkSession
) -> None:
    endpoints = FlightsEndpoints(kafka_bootstrap, s3_endpoint)
    result = run_trial(
        plan,
        tmp_path,
        endpoints,
        spark_s3,
        DAYS,
        FILES_PER_TRIGGER,
        run_id=uuid.uuid4().hex[:8],
    )
    log = (tmp_path / result.job_id / "job.log").read_text()[-6000:] if not result.passed else ""
    assert result.passed, f"{result.violations}\n{log}"
    assert result.exit_codes[-1] == 0
    if plan.kind == "fault":
        assert result.fault_fired
    else:
        assert result.kills == 1 or result.exit_codes == [0]  # the run may finish before the kill moment
    assert result.report is not None
    for sink in result.report.sinks:
        assert (sink.records, sink.duplicates, sink.missing, sink.lingering) == (12208, 0, 0, 0), sink
