"""open_storage: the backend chosen by location, S3 options from explicit values and the environment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from twophase.coordinator.storage import LocalCheckpointStorage, S3Options, default_s3_client, open_storage
from twophase.coordinator.storage.s3 import S3CheckpointStorage
from twophase.sinks.errors import ConfigError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class RecordingFactory:
    """Builds a real (never contacted) boto3 client and remembers the options it got."""

    def __init__(self) -> None:
        self.options: list[S3Options] = []

    def __call__(self, options: S3Options) -> S3Client:
        self.options.append(options)
        return default_s3_client(options.or_else(S3Options(region="us-east-1")))


def test_local_path_and_file_uri(tmp_path: Path) -> None:
    s = open_storage(str(tmp_path / "ck"), "job-1", env={})
    assert isinstance(s, LocalCheckpointStorage)
    assert s.job_dir == tmp_path / "ck" / "job-1"
    s2 = open_storage((tmp_path / "ck dir").as_uri(), "job-1", env={})
    assert isinstance(s2, LocalCheckpointStorage)
    assert s2.job_dir == tmp_path / "ck dir" / "job-1"
    assert not (tmp_path / "ck").exists()  # opening writes nothing


def test_s3_location_with_options_from_env() -> None:
    factory = RecordingFactory()
    env = {
        "TWOPHASE_S3_ENDPOINT": "http://127.0.0.1:9000",
        "TWOPHASE_S3_ACCESS_KEY": "env-access",
        "TWOPHASE_S3_SECRET_KEY": "env-secret",
        "TWOPHASE_S3_REGION": "eu-west-1",
    }
    s = open_storage("s3://bucket/some/prefix/", "job-1", s3_client_factory=factory, env=env)
    assert isinstance(s, S3CheckpointStorage)
    assert (s.bucket, s.prefix, s.job_prefix) == ("bucket", "some/prefix", "some/prefix/job-1/")
    assert factory.options == [
        S3Options("http://127.0.0.1:9000", "env-access", "env-secret", None, "eu-west-1")
    ]


def test_explicit_s3_options_win_over_env() -> None:
    factory = RecordingFactory()
    env = {"TWOPHASE_S3_ENDPOINT": "http://env:9000", "TWOPHASE_S3_REGION": "eu-west-1"}
    explicit = S3Options(endpoint_url="http://explicit:9000", access_key="a", secret_key="b")
    s = open_storage("s3://bucket", "job-1", s3_options=explicit, s3_client_factory=factory, env=env)
    assert isinstance(s, S3CheckpointStorage) and s.job_prefix == "job-1/"
    assert factory.options == [S3Options("http://explicit:9000", "a", "b", None, "eu-west-1")]


def test_default_client_uses_endpoint_path_style_and_no_botocore_retries() -> None:
    client = default_s3_client(S3Options("http://127.0.0.1:9000", "a", "b", region="us-east-1"))
    assert client.meta.endpoint_url == "http://127.0.0.1:9000"
    config: Any = client.meta.config
    assert config.s3 == {"addressing_style": "path"}
    assert config.retries["total_max_attempts"] == 1


def test_secrets_are_not_in_repr() -> None:
    text = repr(S3Options("http://h:1", "ACCESSKEY", "SECRETKEY", "TOKEN", "r"))
    assert "SECRETKEY" not in text and "ACCESSKEY" not in text and "TOKEN" not in text


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("hdfs://nn/checkpoints", "unsupported checkpoint location scheme 'hdfs'"),
        ("s3a://bucket/x", r"use s3://"),
        ("gs://bucket", "unsupported"),
        ("s3:///no-bucket", "needs a bucket"),
        ("file://remotehost/x", "no remote host"),
        ("", "empty"),
    ],
)
def test_bad_locations_refused(location: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        open_storage(location, "job-1", s3_client_factory=RecordingFactory(), env={})


def test_bad_job_id_refused_first(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="safe path segment"):
        open_storage(str(tmp_path), "../x", env={})


@pytest.mark.parametrize(
    ("options", "why"),
    [
        (S3Options(access_key="only-access"), "together"),
        (S3Options(endpoint_url="127.0.0.1:9000"), "http"),
    ],
)
def test_bad_s3_options_refused_before_a_client_exists(options: S3Options, why: str) -> None:
    factory = RecordingFactory()
    with pytest.raises(ConfigError, match=why):
        open_storage("s3://bucket", "job-1", s3_options=options, s3_client_factory=factory, env={})
    assert factory.options == []
