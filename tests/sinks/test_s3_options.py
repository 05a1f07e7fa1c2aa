"""S3Options: explicit settings over the standard AWS chain, string options, and secrets kept out."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

SECRET = "wJalrXUtnFEMI-never-shown"


def test_unset_fields_resolve_from_the_standard_variables_service_specific_first() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://generic:1",
        "AWS_ENDPOINT_URL_S3": "http://s3-only:2",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert S3Options().resolved(env) == S3Options(endpoint_url="http://s3-only:2", region="eu-west-1")
    assert S3Options().resolved({"AWS_ENDPOINT_URL": "http://generic:1"}).endpoint_url == "http://generic:1"
    assert S3Options().resolved({"AWS_REGION": "a", "AWS_DEFAULT_REGION": "b"}).region == "a"
    assert S3Options().resolved({}) == S3Options()


def test_explicit_fields_win_over_the_environment() -> None:
    explicit = S3Options(endpoint_url="http://mine:9000", region="us-west-2")
    env = {"AWS_ENDPOINT_URL_S3": "http://env:1", "AWS_REGION": "eu-west-1"}
    assert explicit.resolved(env) == explicit


def test_string_options_as_a_data_source_passes_them() -> None:
    options = {
        "s3.Endpoint_URL": "http://127.0.0.1:9000",
        "s3.path_style": "false",
        "s3.verify_tls": "true",
        "s3.profile": "analytics",
        "job": "not-an-s3-option",
    }
    parsed = S3Options.from_strings(options, "s3.")
    assert parsed == S3Options(
        endpoint_url="http://127.0.0.1:9000", profile="analytics", path_style=False, verify_tls=True
    )
    assert not parsed.use_path_style
    with pytest.raises(ConfigError, match=r"unknown S3 option 's3\.endpoint'"):
        S3Options.from_strings({"s3.endpoint": "http://h:1"}, "s3.")
    with pytest.raises(ConfigError, match="must be true or false"):
        S3Options.from_strings({"s3.path_style": "sometimes"}, "s3.")


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"access_key_id": "a"}, "together"),
        ({"secret_access_key": "s"}, "together"),
        ({"session_token": "t"}, "session_token needs"),
        ({"access_key_id": "a", "secret_access_key": "s", "profile": "p"}, "not both"),
        ({"endpoint_url": "127.0.0.1:9000"}, "http"),
        ({"endpoint_url": "ftp://host"}, "http"),
    ],
)
def test_bad_settings_are_config_errors(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        S3Options(**fields)


def test_an_endpoint_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(ConfigError, match="must not carry credentials") as info:
        S3Options(endpoint_url=f"ftp://user:{SECRET}@host:9000")
    assert SECRET not in str(info.value)


def test_empty_strings_count_as_unset() -> None:
    assert S3Options(endpoint_url="", region="", profile="") == S3Options()


def test_secrets_stay_out_of_repr_but_survive_pickling() -> None:
    options = S3Options(access_key_id="AKIAEXAMPLE", secret_access_key=SECRET, session_token=SECRET + "t")
    for text in (repr(options), str(options), f"{options}"):
        assert SECRET not in text and "AKIAEXAMPLE" not in text
        assert "secret_access_key='***'" in text
    restored = pickle.loads(pickle.dumps(options))  # executors need the keys
    assert restored == options and restored.secret_access_key == SECRET


def test_path_style_follows_the_endpoint_unless_set() -> None:
    assert not S3Options().use_path_style
    assert S3Options(endpoint_url="http://minio:9000").use_path_style
    assert not S3Options(endpoint_url="http://minio:9000", path_style=False).use_path_style
    assert S3Options(path_style=True).use_path_style


def test_the_boto3_client_gets_endpoint_addressing_tls_and_no_retries() -> None:
    client = S3Options(
        endpoint_url="https://s3.example.test", region="eu-west-1", verify_tls=False
    ).boto3_client(connect_timeout_ms=1500, read_timeout_ms=2500)
    config: Any = client.meta.config
    assert client.meta.endpoint_url == "https://s3.example.test"
    assert client.meta.region_name == "eu-west-1"
    assert config.s3 == {"addressing_style": "path"}
    assert config.retries["total_max_attempts"] == 1
    assert (config.connect_timeout, config.read_timeout) == (1.5, 2.5)
    raw: Any = client  # botocore keeps the TLS setting on its private endpoint
    assert raw._endpoint.http_session._verify is False


def test_delta_rs_spelling_allows_http_and_path_style_for_a_local_server() -> None:
    options = S3Options(
        endpoint_url="http://127.0.0.1:9000", region="us-east-1", access_key_id="a", secret_access_key="s"
    )
    assert options.delta_rs_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    assert S3Options().delta_rs_options() == {}  # AWS itself: delta-rs resolves its own chain
    assert S3Options(profile="p", verify_tls=False).delta_rs_options() == {
        "AWS_PROFILE": "p",
        "AWS_ALLOW_INVALID_CERTIFICATES": "true",
    }


def test_a_profile_is_resolved_for_clients_that_cannot_take_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[analytics]\naws_access_key_id = AKIAPROFILE\naws_secret_access_key = {SECRET}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    assert S3Options(profile="analytics").frozen_credentials() == ("AKIAPROFILE", SECRET, None)
    assert S3Options(access_key_id="a", secret_access_key="s").frozen_credentials() == ("a", "s", None)
    assert S3Options().frozen_credentials() is None
