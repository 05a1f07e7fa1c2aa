"""DeltaSinkConfig validation, storage options, and committable decoding of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.connectors.delta.committable import CODEC
from twophase.connectors.delta.filesystem import open_location
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import CommittableDecodeError, ConfigError

S3_OPTIONS = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ACCESS_KEY_ID": "ak",
    "AWS_SECRET_ACCESS_KEY": "very-secret",
    "AWS_REGION": "eu-west-1",
    "AWS_ALLOW_HTTP": "true",
}


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
        ({"table_uri": "gs://bucket/t"}, "scheme 'gs'"),
        ({"table_uri": "s3:///t"}, "no bucket"),
        ({"table_uri": "/t", "partition_by": ("a", "a")}, "repeats"),
        ({"table_uri": "/t", "partition_by": ("",)}, "empty column"),
        ({"table_uri": "/t", "compression": "lzo"}, "compression"),
        ({"table_uri": "/t", "target_file_size_bytes": 0}, "target_file_size_bytes"),
        ({"table_uri": "/t", "row_group_rows": -1}, "row_group_rows"),
        ({"table_uri": "/t", "commit_attempts": True}, "commit_attempts"),
        ({"table_uri": "/t", "storage_options": {"k": 1}}, "str to str"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DeltaSinkConfig(**kwargs)  # type: ignore[arg-type]


def test_secrets_stay_out_of_repr_and_conditional_put_is_added_for_s3() -> None:
    c = DeltaSinkConfig("s3://bucket/prefix/t/", storage_options=S3_OPTIONS)
    assert c.table_uri == "s3://bucket/prefix/t" and c.is_s3
    assert "very-secret" not in repr(c) and "very-secret" not in repr(DeltaSink("d", c))
    options = c.delta_storage_options()
    assert options is not None and options["aws_conditional_put"] == "etag"
    assert options["AWS_SECRET_ACCESS_KEY"] == "very-secret"
    own = DeltaSinkConfig("s3://b/t", storage_options={**S3_OPTIONS, "AWS_CONDITIONAL_PUT": "none"})
    assert own.delta_storage_options() == {**S3_OPTIONS, "AWS_CONDITIONAL_PUT": "none"}


def test_s3_location_from_delta_rs_options() -> None:
    location = open_location(DeltaSinkConfig("s3://bucket/prefix/t", storage_options=S3_OPTIONS))
    assert location.root == "bucket/prefix/t" and not location.is_local
    assert location.s3_client_args["endpoint_url"] == "http://127.0.0.1:9000"
    assert location.s3_client_args["region_name"] == "eu-west-1"
    assert "very-secret" not in repr(location)
    assert location.relative("bucket/prefix/t/p=1/f.parquet") == "p=1/f.parquet"
    plain_http = {k: v for k, v in S3_OPTIONS.items() if k != "AWS_ALLOW_HTTP"}
    with pytest.raises(ConfigError, match="AWS_ALLOW_HTTP"):
        DeltaSink("d", DeltaSinkConfig("s3://b/t", storage_options=plain_http)).abort_lingering(
            LingeringScope[DeltaCommittable]("j", "d")
        )


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
