"""MinIO faults under the flights job (issue #16, case 4): S3 Parquet and the Delta table (on
``s3://``) live on a MinIO that is killed and restarted (same data directory, port and
credentials) mid-epoch and mid-commit, or stalled with SIGSTOP. Kafka is the three-broker cluster,
left healthy. After each fault the job must finish through its restart strategy and every sink
hold the 12,208 flights exactly once with nothing lingering.
"""

from __future__ import annotations

import re
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
    Moment,
    new_spec,
    run_case,
)
from support.faults.verdicts import (
    assert_exactly_once,
    assert_resumed_with_lost_records,
    lost_error,
)

from twophase.integration.jobs.flights import S3_SINK, FlightsEndpoints
from twophase.integration.services.minio_server import MinioServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = JOB_CASE_MARKS

DOWN_S = 10.0
"""How long a killed MinIO stays down."""
STALL_S = 20.0
"""How long MinIO stays SIGSTOPped (connections accepted by the kernel, nothing answered)."""


def kill_minio(minio: MinioServer) -> Action:
    def action(injector: Injector) -> None:
        minio.kill()
        injector.note("kill -9 MinIO")

        def restart() -> None:
            injector.note(f"MinIO answered {minio.restart():.1f} s after its restart")

        injector.later(DOWN_S, restart, "restart MinIO on its data directory and port")

    return action


@pytest.mark.faults_long
@pytest.mark.parametrize("moment", ["write", "mid_commit"])
def test_minio_killed_and_restarted(
    moment: str,
    spark: SparkSession,
    tmp_path: Path,
    minio_controls: MinioServer,
    services: FlightsEndpoints,
    results: list[FaultResult],
) -> None:
    """Case 4a/b: kill -9 of MinIO mid-epoch (the tasks are writing) and mid-commit (after the
    first of the checkpoint's commits), restarted 10 s later."""
    spec = new_spec(tmp_path, f"minio_kill_{moment}", BUCKET)
    result = run_case(
        spark, services, "MinIO kill -9", Injector(MOMENTS[moment], kill_minio(minio_controls)), spec
    )
    results.append(result)
    lost = lost_error(result)
    if moment == "mid_commit" and lost is not None:
        # MinIO deletes a completing upload's part metadata before it renames the parts into the
        # object (cmd/erasure-multipart.go, CompleteMultipartUpload); a kill -9 between the two
        # leaves an upload no retry can complete (InvalidPart). The job must name the loss, and a
        # resume past it must leave nothing doubled or lingering.
        message = str(lost)
        assert f"sink '{S3_SINK}' checkpoint" in message and "ignore_lost_on_recovery=True" in message, (
            message
        )
        named = sum(int(n) for n in re.findall(r"record_count=(\d+)", message))
        resumed = run_case(
            spark,
            services,
            "MinIO kill -9: resume, LOST ignored",
            Injector(Moment("none"), lambda injector: None),
            spec,
            ignore_lost_on_recovery=True,
        )
        results.append(resumed)
        assert_resumed_with_lost_records(resumed, S3_SINK, named)
        return
    assert_exactly_once(result)


@pytest.mark.faults_long
@pytest.mark.parametrize("moment", ["write", "persist_commit"])
def test_minio_paused(
    moment: str,
    spark: SparkSession,
    tmp_path: Path,
    minio_controls: MinioServer,
    services: FlightsEndpoints,
    results: list[FaultResult],
) -> None:
    """Case 4c: MinIO SIGSTOPped for 20 s mid-epoch, or between persist and commit, then resumed."""
    spec = new_spec(tmp_path, f"minio_pause_{moment}", BUCKET)

    def action(injector: Injector) -> None:
        minio_controls.pause()
        injector.note(f"SIGSTOP MinIO for {STALL_S:g} s")
        injector.later(STALL_S, minio_controls.resume, "SIGCONT MinIO")

    result = run_case(spark, services, "MinIO SIGSTOP 20 s", Injector(MOMENTS[moment], action), spec)
    results.append(result)
    assert_exactly_once(result)
