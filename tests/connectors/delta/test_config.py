"""DeltaSinkConfig validation, storage options, and committable decoding of bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
from twophase.connectors.delta.internal.committable import CODEC
from twophase.connectors.delta.internal.filesystem import open_location
from twophase.sinks.errors import CommittableDecodeError, ConfigError
from twophase.sinks.s3_options import S3Options

S3_OPTIONS = S3Options(
    endpoint_url="http://127.0.0.1:9000",
    region="eu-west-1",
    access_key_id="ak",
    secret_access_key="very-secret",
)


def test_defaults_and_normalisation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = DeltaSinkConfig("rel/table/", partition_by=["a", "b"])  # type: ignore[arg-type]
    assert c.table_uri == str(tmp_path / "rel" / "table")
    assert c.partition_by == ("a", "b")
    assert DeltaSinkConfig(f"file://{tmp_path}/t").table_uri == f"{tmp_path}/t"
    assert DeltaSinkConfig("/x", partition_by="p").partition_by == ("p",)  # type: ignore[arg-type]
    assert not c.is_s3 and c.delta_storage_options() is None
    assert (c.compression, c.target_file_size_bytes, c.merge_schema) == ("snappy", 128 * 1024 * 1024, False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table_uri": ""}, "non-empty"),
        ({"table_uri": "gs://bucket/t"}, "gs:// Delta tables are not supported yet"),
        ({"table_uri": "hdfs://nn/t"}, "scheme 'hdfs'"),
        ({"table_uri": "s3:///t"}, "no bucket"),
        ({"table_uri": "/t", "partition_by": ("a", "a")}, "repeats"),
        ({"table_uri": "/t", "partition_by": ("",)}, "empty column"),
        ({"table_uri": "/t", "compression": "lzo"}, "compression"),
        ({"table_uri": "/t", "target_file_size_bytes": 0}, "target_file_size_bytes"),
        ({"table_uri": "/t", "row_group_rows": -1}, "row_group_rows"),
        ({"table_uri": "/t", "commit_attempts": True}, "commit_attempts"),
        ({"table_uri": "/t", "storage_options": {"AWS_REGION": "x"}}, "must be a twophase.S3Options"),
        ({"table_uri": "s3://b/t", "storage_options": S3Options(verify_tls=False)}, "verify_tls=False"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DeltaSinkConfig(**kwargs)  # type: ignore[arg-type]


def test_secrets_stay_out_of_repr_and_conditional_put_is_added_for_s3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    c = DeltaSinkConfig("s3://bucket/prefix/t/", storage_options=S3_OPTIONS)
    assert c.table_uri == "s3://bucket/prefix/t" and c.is_s3
    assert "very-secret" not in repr(c) and "very-secret" not in repr(DeltaSink("d", c))
    assert c.delta_storage_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "ak",
        "AWS_SECRET_ACCESS_KEY": "very-secret",
        "AWS_ALLOW_HTTP": "true",  # delta-rs refuses http:// without it
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "aws_conditional_put": "etag",
    }
    own = DeltaSinkConfig("s3://b/t", storage_options=S3_OPTIONS, s3_conditional_put=None)
    options = own.delta_storage_options()
    assert options is not None and "aws_conditional_put" not in options


def test_delta_rs_takes_the_endpoint_and_region_from_the_aws_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.test")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    options = DeltaSinkConfig("s3://b/t").delta_storage_options()
    assert options == {
        "AWS_ENDPOINT_URL": "https://s3.example.test",
        "AWS_REGION": "ap-south-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "aws_conditional_put": "etag",
    }


def test_s3_location_from_the_options() -> None:
    location = open_location(DeltaSinkConfig("s3://bucket/prefix/t", storage_options=S3_OPTIONS))
    assert location.root == "bucket/prefix/t" and not location.is_local
    assert location.s3.endpoint_url == "http://127.0.0.1:9000"
    assert location.s3.region == "eu-west-1"
    assert "very-secret" not in repr(location)
    assert location.relative("bucket/prefix/t/p=1/f.parquet") == "p=1/f.parquet"


def test_pyarrow_14_gets_no_keyword_it_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.fs as pafs

    real = pafs.S3FileSystem
    newer = ("force_virtual_addressing", "tls_ca_file_path")

    def pyarrow_14(**kwargs: object) -> pafs.S3FileSystem:  # S3FileSystem of pyarrow 14.0.1
        for key in newer:
            if key in kwargs:
                raise TypeError(f"__init__() got an unexpected keyword argument '{key}'")
        return real(**kwargs)

    monkeypatch.setattr(pafs, "S3FileSystem", pyarrow_14)
    assert not open_location(DeltaSinkConfig("s3://bucket/t", storage_options=S3_OPTIONS)).is_local
    virtual = dataclasses.replace(S3_OPTIONS, path_style=False)
    with pytest.raises(
        ConfigError, match=r"virtual-hosted .* has no S3FileSystem\(force_virtual_addressing=...\)"
    ):
        open_location(DeltaSinkConfig("s3://bucket/t", storage_options=virtual))


def test_sink_name_is_checked() -> None:
    with pytest.raises(ConfigError):
        DeltaSink("", DeltaSinkConfig("/t"))
    with pytest.raises(ConfigError):
        DeltaSink("a:b", DeltaSinkConfig("/t"))


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "kafka.transaction", "version": 1, "body": {}},
        {"kind": "delta.add_files", "version": 2, "body": {}},
        {"kind": "delta.add_files", "version": 1, "body": {"table_uri": "/t"}},
        {"kind": "delta.add_files", "version": 1},
    ],
)
def test_malformed_committables_are_refused(payload: dict[str, object]) -> None:
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json(payload)
