"""Every boto3 client the project builds trusts the CA bundle of the standard ``AWS_CA_BUNDLE``
(#27 item 5): the S3 sink's, the checkpoint storage's and the Delta sink's deletes all come from
``S3Options.boto3_client``. ``verify_tls=False`` still switches verification off."""

from __future__ import annotations

from typing import Any

import pytest

from twophase.connectors.s3 import S3SinkConfig
from twophase.connectors.s3.internal.uploads import make_client
from twophase.coordinator.storage import default_s3_client
from twophase.sinks.s3_options import S3Options

OPTIONS = S3Options(
    endpoint_url="https://127.0.0.1:1",
    region="us-east-1",
    access_key_id="key",
    secret_access_key="secret-key",
)


def verify_of(client: Any) -> object:
    return client._endpoint.http_session._verify


def test_clients_use_aws_ca_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("unused")
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    assert verify_of(OPTIONS.boto3_client()) == str(bundle)
    assert verify_of(default_s3_client(OPTIONS)) == str(bundle)
    assert verify_of(make_client(S3SinkConfig(bucket="bucket", prefix="p", storage_options=OPTIONS))) == str(
        bundle
    )


def test_without_a_bundle_verification_stays_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    assert verify_of(OPTIONS.boto3_client()) not in (False, None)  # the default bundle


def test_verify_tls_false_still_turns_verification_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem")
    unverified = S3Options(endpoint_url="https://127.0.0.1:1", region="us-east-1", verify_tls=False)
    assert verify_of(unverified.boto3_client()) is False
