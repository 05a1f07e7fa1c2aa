"""The checkpoint location fails (issue #16, case 6): the job's checkpoints live on ``s3://`` and,
once its first checkpoint is durable and committed, PutObject under its checkpoint prefix is denied.

Revoking local folder permissions does not work as root, and MinIO applies bucket policies to
anonymous requests only, so the checkpoint storage signs as its own MinIO IAM user (``readwrite``)
and the fault attaches an explicit-Deny IAM policy to that user, effective at once (see
:mod:`twophase.integration.services.minio_server`).

Expected: the job fails cleanly (FAILED, restart strategy exhausted) with an error naming the
checkpoint object and S3's AccessDenied; every sink holds exactly the records of the last durable
checkpoint, none beyond. Once the permission is back, a resumed job finishes exactly once with
nothing lingering.
"""

from __future__ import annotations

import secrets
import uuid
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
from support.faults.verdicts import assert_exactly_once, describe

from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.storage import CheckpointStorage, open_storage
from twophase.integration.jobs.flights import FlightsEndpoints
from twophase.integration.services.minio_server import MinioServer
from twophase.sinks.errors import CheckpointStorageError, JobError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = JOB_CASE_MARKS


def causes(error: BaseException | None) -> list[BaseException]:
    """``error`` and its ``__cause__`` / ``__context__`` chain."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


# make faults (and make chaos) run it; secured_s3 covers a denied checkpoint PutObject in make test
@pytest.mark.faults_long
def test_checkpoint_put_denied_fails_cleanly_then_resumes(
    spark: SparkSession,
    tmp_path: Path,
    minio_controls: MinioServer,
    services: FlightsEndpoints,
    results: list[FaultResult],
) -> None:
    spec = new_spec(tmp_path, "checkpoint_denied", BUCKET)
    location = f"s3://{BUCKET}/checkpoints"
    user, secret = f"ckpt-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    policy = f"deny-{user}"
    creds = minio_controls.add_user(user, secret)
    options = creds.s3_options()

    def storage() -> CheckpointStorage:
        return open_storage(location, spec.job_id, s3_options=options)

    def deny(injector: Injector) -> None:
        minio_controls.deny(
            user, ["s3:PutObject"], [f"arn:aws:s3:::{BUCKET}/checkpoints/{spec.job_id}/*"], policy
        )
        injector.note(
            f"IAM Deny s3:PutObject on {location}/{spec.job_id}/* for the checkpoint storage's user"
        )

    # the first checkpoint is durable and committed; the next one can no longer be published
    failing = Injector(Moment("after_commit", 1), deny)
    try:
        result = run_case(
            spark,
            services,
            "checkpoint PUT denied",
            failing,
            spec,
            checkpoint_dir=location,
            storage=storage(),
            restart=RestartStrategy.fixed_delay(2, 500),
        )
        results.append(result)
        assert result.fired, describe(result)
        assert result.state is JobState.FAILED, describe(result)
        assert isinstance(result.error, JobError), describe(result)
        storage_errors = [e for e in causes(result.error) if isinstance(e, CheckpointStorageError)]
        assert storage_errors, f"no CheckpointStorageError in the failure's causes:\n{describe(result)}"
        assert "AccessDenied" in str(storage_errors[0]) and spec.job_id in str(storage_errors[0]), str(
            storage_errors[0]
        )

        durable = open_storage(location, spec.job_id, s3_options=options).latest()
        assert durable is not None and durable.checkpoint_id == 1, durable
        committed = sum(n for cid, n in result.epoch_records.items() if cid <= durable.checkpoint_id)
        assert 0 < committed < EXPECTED_RECORDS, result.epoch_records
        report = result.report
        assert report is not None
        for s in report.sinks:
            # exactly the durable checkpoint's records: nothing beyond it, nothing twice
            assert (s.error, s.records, s.duplicates, s.unexpected) == (None, committed, 0, 0), describe(
                result
            )
    finally:
        minio_controls.allow_again(user, policy)

    resumed = run_case(
        spark,
        services,
        "checkpoint PUT allowed again: resume",
        Injector(Moment("none"), lambda injector: None),
        spec,
        checkpoint_dir=location,
        storage=storage(),
    )
    results.append(resumed)
    assert_exactly_once(resumed, fired=False, checkpoint=False)
    final = open_storage(location, spec.job_id, s3_options=options).latest()
    assert final is not None and final.end_of_input, final
