"""The flights job against secured services, end to end (#27 items 2 and 7).

The job runs as the chaos suite runs it (a subprocess, restarted until it finishes) in the
``secured`` configuration: Kafka over SASL_SSL with SCRAM-SHA-512, the sink's principal holding
only the ACLs ``docs/secured-kafka.md`` lists, and MinIO over TLS (CA through ``AWS_CA_BUNDLE``)
with a least-privilege IAM user on the run's prefixes, twophase's checkpoints on ``s3://``. Other
principals read back: a ``read_committed`` consumer with Read only, the S3 root keys over TLS for
the files and the Delta table; ``admin`` lists open transactions. Every record exactly once, 0
lingering, and no password or secret key in the job's log, its work directory, the objects it
wrote or the endpoints' reprs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from twophase.integration.chaos.runner import TrialPlan, run_trial
from twophase.integration.chaos.secured import READER_USER, SINK_USER, SecuredFlights, secured_flights
from twophase.integration.jobs.flights import KAFKA_SINK, FlightsEndpoints
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.integration.readback import read_topic
from twophase.sinks.errors import ServiceUnavailableError

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.spark, pytest.mark.slow, pytest.mark.long]

DAYS = 3
FILES_PER_TRIGGER = 2  # 2 micro-batches, then the final checkpoint


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredFlights]:
    """SASL_SSL Kafka with ACLs and MinIO over TLS, for this module."""
    with secured_flights(tmp_path_factory.mktemp("secured-services")) as services:
        yield services


def _secrets(secured: SecuredFlights, job: FlightsEndpoints) -> dict[str, str]:
    return {
        "sink password": secured.kafka.password(SINK_USER),
        "reader password": secured.kafka.password(READER_USER),
        "kafka admin password": secured.kafka.password("admin"),
        "job's S3 secret key": job.s3.secret_key,
        "S3 root secret key": secured.minio.endpoint.secret_key,
    }


def _holders(root: Path, secrets: dict[str, str]) -> list[str]:
    found = []
    for path in (p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{name} in {path}" for name, value in secrets.items() if value.encode() in data]
    return found


def test_flights_job_runs_exactly_once_against_secured_services(
    secured: SecuredFlights, tmp_path: Path
) -> None:
    result = run_trial(
        TrialPlan(0, "fault", fault="after_persist:2", config="secured"),  # re-commit on restart
        tmp_path,
        None,
        None,
        DAYS,
        FILES_PER_TRIGGER,
        run_id=uuid.uuid4().hex[:8],
        keep=True,
        secured=secured,
    )
    assert result.fault_fired and result.exit_codes == [137, 0], result.exit_codes
    assert result.passed, result.violations
    report = result.report
    assert report is not None and report.ok
    for sink in report.sinks:
        assert sink.records == report.expected_records > 0, sink
        assert sink.duplicates == sink.missing == sink.lingering == 0, sink
    assert "read with deltalake" in report.sink("delta").detail  # over TLS with the root keys

    spec = FlightsJobSpec.load(tmp_path / result.job_id)
    assert spec.checkpoint_uri.startswith("s3://") and spec.delta_uri.startswith("s3://")
    job = secured.prepare(spec)  # the job's endpoints (idempotent: the same IAM user)
    reader = secured.reader()
    assert job.kafka_security["sasl.username"] == SINK_USER
    assert job.kafka_security["sasl.mechanism"] == "SCRAM-SHA-512"
    assert job.kafka_security["security.protocol"] == "SASL_SSL"
    assert reader.kafka_security["sasl.username"] == READER_USER  # the reader is not the writer
    assert job.s3.access_key != reader.s3.access_key and job.s3.endpoint_url.startswith("https://")

    # the reader may read, never write; the writer may not read its own topic
    records = read_topic(reader.kafka_bootstrap, spec.topic, security=reader.kafka_security, timeout_s=30)
    assert len(records) == report.expected_records
    with pytest.raises((ServiceUnavailableError, KafkaException)):  # Describe and Write only
        read_topic(job.kafka_bootstrap, spec.topic, security=job.kafka_security, timeout_s=10)
    assert secured.kafka.open_transactions(f"twophase-{spec.job_id}-{KAFKA_SINK}") == []

    secrets = _secrets(secured, job)
    for endpoints in (job, reader, secured.admin()):
        shown = repr(endpoints)
        assert not [name for name, value in secrets.items() if value in shown], shown
    assert "sasl.password" not in repr(job)
    # the job's log, manifest, Spark checkpoint and scratch: no secret
    assert _holders(tmp_path / result.job_id, secrets) == []
    # every object the job wrote (checkpoint metadata, Delta log, files), read with the root keys
    client = secured.minio.endpoint.boto3_client()
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=spec.bucket)
        for o in page.get("Contents", [])
        if spec.job_id in o["Key"]
    ]
    assert any(k.startswith("checkpoints/") for k in keys) and any(k.startswith("delta/") for k in keys)
    leaked = [
        f"{name} in {key}"
        for key in keys
        for name, value in secrets.items()
        if value.encode() in client.get_object(Bucket=spec.bucket, Key=key)["Body"].read()
    ]
    assert leaked == []
