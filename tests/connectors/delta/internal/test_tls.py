"""The Delta sink trusts ``AWS_CA_BUNDLE``: delta-rs through an extended ``SSL_CERT_FILE`` (trust
only added), pyarrow through ``tls_ca_file_path`` (tests/integration/secured_s3 has the real TLS)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from twophase.connectors.delta.internal.tls import aws_ca_bundle, trust_aws_ca_bundle_in_delta_rs
from twophase.sinks.errors import ConfigError

CA = b"-----BEGIN CERTIFICATE-----\nprivate-ca\n-----END CERTIFICATE-----\n"
SYSTEM = b"-----BEGIN CERTIFICATE-----\nsystem-ca\n-----END CERTIFICATE-----\n"


@pytest.fixture
def bundle(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_bytes(CA)
    return str(path)


def test_nothing_changes_without_aws_ca_bundle() -> None:
    env = {"SSL_CERT_FILE": "/etc/whatever.pem"}
    assert trust_aws_ca_bundle_in_delta_rs(env) is None
    assert env == {"SSL_CERT_FILE": "/etc/whatever.pem"}


def test_ssl_cert_file_gets_the_private_ca_added_to_what_it_trusted(bundle: str, tmp_path: Path) -> None:
    system = tmp_path / "system.pem"
    system.write_bytes(SYSTEM)
    env = {"AWS_CA_BUNDLE": bundle, "SSL_CERT_FILE": str(system)}
    combined = trust_aws_ca_bundle_in_delta_rs(env)
    assert combined is not None and env["SSL_CERT_FILE"] == combined
    content = Path(combined).read_bytes()
    assert SYSTEM in content and CA in content
    assert trust_aws_ca_bundle_in_delta_rs(env) == combined  # idempotent
    assert system.read_bytes() == SYSTEM  # the original is left alone


def test_same_file_is_left_as_it_is(bundle: str) -> None:
    env = {"AWS_CA_BUNDLE": bundle, "SSL_CERT_FILE": bundle}
    assert trust_aws_ca_bundle_in_delta_rs(env) == bundle and env["SSL_CERT_FILE"] == bundle


def test_a_bundle_that_is_not_a_file_is_a_config_error(tmp_path: Path) -> None:
    env = {"AWS_CA_BUNDLE": str(tmp_path / "missing.pem")}
    with pytest.raises(ConfigError, match=r"AWS_CA_BUNDLE=.*is not a file"):
        aws_ca_bundle(env)
    with pytest.raises(ConfigError, match="AWS_CA_BUNDLE"):
        trust_aws_ca_bundle_in_delta_rs(env)


def test_a_plain_http_table_leaves_ssl_cert_file_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from twophase.connectors.delta import DeltaSinkConfig
    from twophase.sinks.s3_options import S3Options

    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "stale.pem"))  # names no file: unused over http
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    config = DeltaSinkConfig("s3://bucket/t", storage_options=S3Options(endpoint_url="http://127.0.0.1:9000"))
    assert config.delta_storage_options() is not None
    assert os.environ["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
