"""A whole job over TLS with a least-privilege user, and no secret anywhere it left (#27 items 5, 6).

``secured_job.py`` runs in a process of its own (its own Spark, with ``AWS_CA_BUNDLE`` and the
event log on): a ``Job`` with an S3 and a Delta sink and checkpoints on ``s3://``, and a
``.format("twophase")`` query whose keys are ``s3.*`` options. Then:

- another principal (the root user) reads back exact records from each output, and
  ``twophase lingering --json`` (the job user's keys from the standard AWS variables) finds
  nothing lingering;
- the job user's secret key is searched for in everything the run left: every file of its work
  folder (Python's log, Spark's checkpoint folders, the event log), Spark's scratch folder (the
  job scans it before it ends: it is removed at exit), Spark's own log (the process's stderr) and
  stdout, the queries' ``explain`` and progress, the configs' reprs, error messages, reprs and
  tracebacks, the Prometheus scrape, the CLI's ``--json`` output and every object under the job's
  prefix. It appears nowhere; Spark's event log shows the
  ``fs.s3a`` keys of its configuration redacted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from twophase.integration.services.s3_tls import TlsMinioServer

from .conftest import BUCKET, JobUser, MakeUser

# ~80 s (its own Spark): in `make chaos` with the other long cases, not in `make test`
pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.delta, pytest.mark.long]

HERE = Path(__file__).parent
CLI = Path(sys.executable).parent / "twophase"


@pytest.fixture
def run(
    tls_minio: TlsMinioServer, make_user: MakeUser, tmp_path: Path
) -> Iterator[tuple[JobUser, Path, dict[str, str]]]:
    user = make_user()
    work = tmp_path / "work"
    work.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION"))
    }
    env |= {
        "SECURED_JOB_ENDPOINT": user.endpoint.endpoint_url,
        "SECURED_JOB_REGION": user.endpoint.region,
        "SECURED_JOB_ACCESS_KEY": user.endpoint.access_key,
        "SECURED_JOB_SECRET_KEY": user.endpoint.secret_key,
        "SECURED_JOB_BUCKET": BUCKET,
        "SECURED_JOB_PREFIX": user.prefix,
        "AWS_CA_BUNDLE": str(tls_minio.certificates.ca_bundle),
        "TWOPHASE_SPARK_SCRATCH": str(work / "scratch"),
        "PYSPARK_PYTHON": sys.executable,
    }
    with (work / "stdout.txt").open("w") as stdout, (work / "spark-stderr.txt").open("w") as stderr:
        done = subprocess.run(
            [sys.executable, str(HERE / "secured_job.py"), str(work)],
            env=env,
            stdout=stdout,
            stderr=stderr,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, (work / "spark-stderr.txt").read_text()[-6000:]
    yield user, work, env


def cli(args: list[str], user: JobUser, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI with the job user's keys in the standard AWS variables (not in its arguments)."""
    cli_env = env | {
        "AWS_ACCESS_KEY_ID": user.endpoint.access_key,
        "AWS_SECRET_ACCESS_KEY": user.endpoint.secret_key,
        "AWS_ENDPOINT_URL": user.endpoint.endpoint_url,
        "AWS_REGION": user.endpoint.region,
        "PYTHONPATH": str(HERE),
    }
    return subprocess.run(
        [str(CLI), *args], env=cli_env, capture_output=True, text=True, timeout=300, check=False
    )


def texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)


def test_secured_job_reads_back_exactly_and_leaks_no_secret(
    tls_minio: TlsMinioServer, run: tuple[JobUser, Path, dict[str, str]]
) -> None:
    from deltalake import DeltaTable

    user, work, env = run
    artifacts = json.loads((work / "artifacts.json").read_text())
    assert artifacts["api_state"] == "FINISHED", artifacts["api_state"]
    expected = list(range(300))

    # read back by another principal, with other clients
    root = tls_minio.endpoint
    fs = root.s3_options().resolved(os.environ)
    from twophase.connectors.delta.config import DeltaSinkConfig
    from twophase.connectors.delta.internal.filesystem import open_location

    arrow_fs = open_location(DeltaSinkConfig(f"s3://{BUCKET}/x", storage_options=fs)).fs
    for sub in ("files", "ds"):
        got = ds.dataset(f"{BUCKET}/{user.prefix}/{sub}", filesystem=arrow_fs, format="parquet").to_table()
        assert sorted(got.column("id").to_pylist()) == expected, sub
    uri = f"s3://{BUCKET}/{user.prefix}/table"
    table = DeltaTable(uri, storage_options=DeltaSinkConfig(uri, storage_options=fs).delta_storage_options())
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == expected

    # nothing lingers: the CLI, as the job user through the standard AWS variables
    job_id = artifacts["job_id"]
    chk = f"s3://{BUCKET}/{user.prefix}/chk"
    lingering = cli(
        ["lingering", "--json", "--checkpoint-dir", chk, "--job-id", job_id, "--sinks", "secured_job:sinks"],
        user,
        env,
    )
    assert lingering.returncode == 0, lingering.stderr[-3000:]
    listed = json.loads(lingering.stdout)
    assert [(s["sink"], s["lingering"], s["undecidable"]) for s in listed["sinks"]] == [
        ("files", 0, 0),
        ("table", 0, 0),
    ]
    checkpoints = cli(
        ["checkpoints", "list", "--json", "--checkpoint-dir", chk, "--job-id", job_id], user, env
    )
    assert checkpoints.returncode == 0, checkpoints.stderr[-3000:]
    assert json.loads(checkpoints.stdout)["checkpoints"]
    client = root.boto3_client()
    uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert [u["Key"] for u in uploads if u["Key"].startswith(user.prefix)] == []

    # the errors say what is wrong without the keys
    # a bucket outside the policy answers 403, as S3 does without s3:ListBucket on it
    assert "s3://twophase-no-such-bucket" in artifacts["missing_bucket"]["str"]
    assert "S3 denied s3:" in artifacts["denied"]["str"], artifacts["denied"]
    # a refusal on an executor ends the job with the task's traceback, whose one typed line says it
    refused = {
        line.split("S3AccessDeniedError: ", 1)[1]
        for line in artifacts["job_denied"]["str"].splitlines()
        if "S3AccessDeniedError: " in line
    }
    assert len(refused) == 1, artifacts["job_denied"]["str"][-3000:]
    assert refused.pop().startswith(f"S3 denied s3:PutObject on s3://{BUCKET}/outside-the-policy/files/part-")
    assert artifacts["api_explain"] and artifacts["ds_explain"] and "twophase" in artifacts["metrics"]

    # the secret appears nowhere
    secret = user.endpoint.secret_key
    leaks: list[str] = []
    for path in sorted(p for p in work.rglob("*") if p.is_file()):
        if secret.encode() in path.read_bytes():
            leaks.append(str(path.relative_to(work)))
    for i, text in enumerate(texts(artifacts)):
        if secret in text:
            leaks.append(f"artifact text {i}: {text[:200]}")
    for name, done in (("lingering", lingering), ("checkpoints", checkpoints)):
        if secret in done.stdout + done.stderr:
            leaks.append(f"cli {name}")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=user.prefix + "/")
    objects = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert any("/chk/" in k for k in objects) and any("_delta_log" in k for k in objects)
    for key in objects:
        if secret.encode() in client.get_object(Bucket=BUCKET, Key=key)["Body"].read():
            leaks.append(f"s3://{BUCKET}/{key}")
    assert artifacts["scratch_files"] > 0 and artifacts["scratch_hits"] == []
    assert leaks == []

    # what Spark shows itself: its configuration in the event log, with the keys redacted
    events = "".join(p.read_text() for p in (work / "events").rglob("*") if p.is_file())
    assert '"spark.hadoop.fs.s3a.secret.key":"*********(redacted)"' in events
    assert (work / "spark-stderr.txt").stat().st_size > 0 and (work / "python.log").stat().st_size > 0
