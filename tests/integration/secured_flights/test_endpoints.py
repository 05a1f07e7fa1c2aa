"""The flights job's endpoints for secured services, without services: the Kafka login travels to a
job process in its environment only, and no repr shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twophase.connectors.s3 import S3Sink
from twophase.integration.chaos.runner import service_env
from twophase.integration.jobs.flights import (
    KAFKA_SECURITY_ENV,
    FlightsEndpoints,
    FlightsJobSpec,
    build_sinks,
    endpoints_from_environment,
)
from twophase.integration.services import S3Endpoint
from twophase.sinks.errors import ConfigError

PASSWORD = "kafka-pw-4f1d2c"
SECRET = "s3-secret-9a8b7c6d5e"
SECURITY = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "flights_sink",
    "sasl.password": PASSWORD,
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def _endpoints() -> FlightsEndpoints:
    s3 = S3Endpoint("https://127.0.0.1:9443", "job-abc", SECRET, "us-east-1")
    return FlightsEndpoints("127.0.0.1:9094", s3, kafka_security=SECURITY, ca_bundle="/etc/ssl/minio-ca.pem")


def test_no_repr_shows_the_password_or_the_secret_key(tmp_path: Path) -> None:
    endpoints = _endpoints()
    kafka, s3_sink, delta = build_sinks(FlightsJobSpec("j1", str(tmp_path)), endpoints)
    assert isinstance(s3_sink, S3Sink)
    assert kafka.config.client_config["sasl.password"] == PASSWORD  # the sink logs in with it
    for shown in (repr(endpoints), repr(kafka.config), repr(s3_sink.config), repr(delta.config)):
        assert PASSWORD not in shown and SECRET not in shown, shown


def test_a_job_process_gets_the_login_in_its_environment_and_uses_it_without_a_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = service_env(_endpoints())
    assert json.loads(env[KAFKA_SECURITY_ENV]) == SECURITY
    assert env["AWS_CA_BUNDLE"] == "/etc/ssl/minio-ca.pem"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # nothing listens on these ports: the secured path takes the endpoints as given
    endpoints = endpoints_from_environment()
    assert endpoints == _endpoints() and dict(endpoints.kafka_security) == SECURITY
    assert endpoints.ca_bundle == "/etc/ssl/minio-ca.pem"


def test_settings_that_are_not_a_json_object_are_refused_without_echoing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in service_env(_endpoints()).items():
        monkeypatch.setenv(name, value)
    for bad in (f"sasl.password={PASSWORD}", json.dumps([PASSWORD])):
        monkeypatch.setenv(KAFKA_SECURITY_ENV, bad)
        with pytest.raises(ConfigError, match=KAFKA_SECURITY_ENV) as caught:
            endpoints_from_environment()
        assert PASSWORD not in str(caught.value)
