"""open_storage: the backend chosen by location, S3 options from explicit values over the AWS chain."""

from __future__ import annotations

from dataclasses import replace
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
        return default_s3_client(options if options.region else replace(options, region="us-east-1"))


def test_local_path_and_file_uri(tmp_path: Path) -> None:
    s = open_storage(str(tmp_path / "ck"), "job-1", env={})
    assert isinstance(s, LocalCheckpointStorage)
    assert s.job_dir == tmp_path / "ck" / "job-1"
    s2 = open_storage((tmp_path / "ck dir").as_uri(), "job-1", env={})
    assert isinstance(s2, LocalCheckpointStorage)
    assert s2.job_dir == tmp_path / "ck dir" / "job-1"
    assert not (tmp_path / "ck").exists()  # opening writes nothing


def test_s3_location_takes_endpoint_and_region_from_the_standard_aws_variables() -> None:
    factory = RecordingFactory()
    env = {
        "AWS_ENDPOINT_URL": "http://generic:9000",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000",  # the service-specific one wins
        "AWS_REGION": "eu-west-1",
        "TWOPHASE_S3_ENDPOINT": "http://not-read:9000",  # the project's old variables are gone
    }
    s = open_storage("s3://bucket/some/prefix/", "job-1", s3_client_factory=factory, env=env)
    assert isinstance(s, S3CheckpointStorage)
    assert (s.bucket, s.prefix, s.job_prefix) == ("bucket", "some/prefix", "some/prefix/job-1/")
    assert factory.options == [S3Options(endpoint_url="http://127.0.0.1:9000", region="eu-west-1")]


def test_explicit_s3_options_win_over_env() -> None:
    factory = RecordingFactory()
    env = {"AWS_ENDPOINT_URL": "http://env:9000", "AWS_DEFAULT_REGION": "eu-west-1"}
    explicit = S3Options(endpoint_url="http://explicit:9000", access_key_id="a", secret_access_key="b")
    s = open_storage("s3://bucket", "job-1", s3_options=explicit, s3_client_factory=factory, env=env)
    assert isinstance(s, S3CheckpointStorage) and s.job_prefix == "job-1/"
    assert factory.options == [
        S3Options("http://explicit:9000", "eu-west-1", access_key_id="a", secret_access_key="b")
    ]


def test_configured_endpoints_can_be_ignored_as_the_sdks_allow() -> None:
    factory = RecordingFactory()
    env = {"AWS_ENDPOINT_URL": "http://env:9000", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}
    open_storage("s3://bucket", "job-1", s3_client_factory=factory, env=env)
    assert factory.options[0].endpoint_url is None


def test_default_client_uses_endpoint_path_style_and_no_botocore_retries() -> None:
    client = default_s3_client(S3Options("http://127.0.0.1:9000", "us-east-1", "a", "b"))
    assert client.meta.endpoint_url == "http://127.0.0.1:9000"
    config: Any = client.meta.config
    assert config.s3 == {"addressing_style": "path"}
    assert config.retries["total_max_attempts"] == 1


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("hdfs://nn/checkpoints", "unsupported checkpoint location scheme 'hdfs'"),
        ("s3a://bucket/x", r"use s3://"),
        ("hdfs://bucket", "use a local path, file://, s3://, abfss://, wasbs:// or gs://"),
        ("abfs://c@acct.dfs.core.windows.net/x", r"use abfss:// \(TLS\)"),
        ("wasbs://acct.blob.core.windows.net/x", "needs a container and an account host"),
        ("gs:///no-bucket", "not a gs://bucket"),
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
