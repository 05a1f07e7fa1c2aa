"""A refusal is permanent (#45 item 8), on TLS MinIO with the documented least-privilege policy:

- a user without ``s3:DeleteObject`` ends the job at once under the DEFAULT restart strategy (three
  restarts), with no restart, in one line naming the permission, and the line lists the objects
  the job could not delete (before: three restarts, 17 tracebacks, 6 tails nobody was told of);
- a wrong CA file in ``AWS_CA_BUNDLE`` ends the job at once, in one line naming the certificate
  and ``AWS_CA_BUNDLE`` (before: ``ServiceUnavailableError`` after 5 attempts, as an outage).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.exactly_once.support import make_input

from twophase.connectors.s3 import S3Sink
from twophase.coordinator.spark.job import Job
from twophase.integration.services import S3Endpoint
from twophase.integration.services.certificates import make_tls_files
from twophase.integration.services.s3_tls import LEAST_PRIVILEGE_ACTIONS, TlsMinioServer
from twophase.sinks.errors import JobRefusedError, S3AccessDeniedError, TlsCertificateError

from .conftest import BUCKET, MakeUser, jsonl_config

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]


def _run(
    spark: Any, tmp: Path, endpoint: S3Endpoint, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[BaseException, Any]:
    """A bounded job of three epochs into an S3 sink whose files stay open across checkpoints
    (so each checkpoint leaves tails), default restart strategy; the error and the handle.

    The session's Spark may predate ``AWS_CA_BUNDLE``: its Python workers get this process's
    value through ``SparkContext.environment``, which PySpark hands to every Python function."""
    monkeypatch.setitem(spark.sparkContext.environment, "AWS_CA_BUNDLE", os.environ["AWS_CA_BUNDLE"])
    make_input(tmp, files=3, rows_per_file=20)
    config = jsonl_config(endpoint, prefix)
    job = Job(spark, f"refused-{uuid.uuid4().hex[:6]}", str(tmp / "chk")).sink(S3Sink("files", config))
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp / "input"))
        .selectExpr("CAST(id AS STRING) AS v")
    )
    handle = None
    try:
        handle = job.start(
            stream, spark_checkpoint_location=str(tmp / "spark"), trigger={"availableNow": True}
        )
        handle.await_termination(600)
    except Exception as e:
        return e, handle
    raise AssertionError("the job was not refused")


def _keys(tls_minio: TlsMinioServer, prefix: str) -> list[str]:
    client: Any = tls_minio.endpoint.boto3_client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_a_missing_delete_permission_ends_the_job_at_once_naming_what_it_left(
    spark: Any,
    tls_minio: TlsMinioServer,
    make_user: MakeUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = make_user(tuple(a for a in LEAST_PRIVILEGE_ACTIONS if a != "s3:DeleteObject"))
    error, handle = _run(spark, tmp_path, user.endpoint, user.prefix, monkeypatch)
    assert isinstance(error, JobRefusedError), repr(error)
    message = str(error)
    assert "\n" not in message, message
    for name in ("not restarted", "S3 denied s3:DeleteObject", f"s3://{BUCKET}/{user.prefix}/"):
        assert name in message, message
    assert error.refusal == S3AccessDeniedError.__name__
    assert handle is not None and handle.runtime.restarts.restarts == []
    # what it left: the superseded tails the routine lingering cleanup could not delete, each
    # still in S3 (the newest checkpoint's own tails stay: a restart resumes them)
    listed = set(re.findall(r"s3://\S+?\.tail", message.split("; left ", 1)[1]))
    assert listed, message
    assert listed <= {f"s3://{BUCKET}/{k}" for k in _keys(tls_minio, user.prefix)}


def test_a_wrong_ca_file_ends_the_job_at_once_naming_the_certificate_setting(
    spark: Any,
    tls_minio: TlsMinioServer,
    make_user: MakeUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = make_user()
    other = make_tls_files(tmp_path / "other-ca", name="other")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(other.ca_cert))
    error, handle = _run(spark, tmp_path, user.endpoint, user.prefix, monkeypatch)
    refusal = error if isinstance(error, TlsCertificateError) else error.__cause__
    assert isinstance(refusal, TlsCertificateError), repr(error)
    message = str(error)
    assert "\n" not in message, message
    for name in ("certificate", "AWS_CA_BUNDLE", str(other.ca_cert), user.endpoint.endpoint_url):
        assert name in message, message
    assert "attempts" not in message, message
    assert "s3 call failed, retrying" not in caplog.text  # refused at the first call
    assert handle is None or handle.runtime.restarts.restarts == []
