"""S3SinkConfig validation and secret masking."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from twophase.connectors.s3 import FileFormat, RollingPolicy, S3SinkConfig
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

SECRET = "s3cr3t-value-never-shown"


def config(**fields: Any) -> S3SinkConfig:
    fields.setdefault("bucket", "bucket")
    fields.setdefault("prefix", "data")
    return S3SinkConfig(**fields)


def test_defaults_and_normalization() -> None:
    c = config(prefix="/a/b/", format="jsonl", partition_by=["x"])
    assert c.prefix == "a/b"
    assert c.format is FileFormat.JSON_LINES and c.file_format.spans_checkpoints
    assert c.partition_by == ("x",)
    assert config().file_format is FileFormat.PARQUET and not config().file_format.spans_checkpoints
    assert hash(c) == hash(config(prefix="a/b", format=FileFormat.JSON_LINES, partition_by=("x",)))


def test_secrets_are_masked_in_repr_and_str_but_survive_pickling() -> None:
    keys = S3Options(access_key_id="AKIAEXAMPLE", secret_access_key=SECRET, session_token=SECRET + "-token")
    c = config(storage_options=keys)
    for text in (repr(c), str(c), f"{c}"):
        assert SECRET not in text and "AKIAEXAMPLE" not in text
        assert "secret_access_key='***'" in text and "bucket='bucket'" in text
    assert "session_token" not in repr(config())
    # executors need the keys: the pickled config (shipped by Spark) keeps them
    restored = pickle.loads(pickle.dumps(c))
    assert restored == c and restored.storage_options.secret_access_key == SECRET


def test_pass_through_put_arguments() -> None:
    c = config(server_side_encryption="aws:kms", sse_kms_key_id="key-1", storage_class="STANDARD_IA")
    assert c.extra_put_args() == {
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "key-1",
        "StorageClass": "STANDARD_IA",
    }
    assert config().extra_put_args() == {}


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"bucket": "Bad_Bucket"}, "bucket"),
        ({"prefix": "a b"}, "illegal characters"),
        ({"format": "avro"}, "unknown S3 file format"),
        ({"part_size_bytes": 5 * 1024 * 1024 - 1}, "part_size_bytes"),
        ({"part_size_bytes": 6 * 1024**3}, "part_size_bytes"),
        ({"uploads_in_flight": -1}, "uploads_in_flight"),
        ({"uploads_in_flight": 17}, "uploads_in_flight"),
        ({"partition_by": ("a", "a")}, "partition_by"),
        ({"partition_by": "a"}, "partition_by"),
        ({"max_open_files": 0}, "max_open_files"),
        ({"parquet_compression": "lzo"}, "parquet_compression"),
        ({"json_column": "v"}, "json_column"),
        ({"format": "jsonl", "json_column": "v", "partition_by": ("v",)}, "json_column"),
        ({"storage_options": {"endpoint_url": "http://h:1"}}, "must be an S3Options"),
        ({"server_side_encryption": "rot13"}, "server_side_encryption"),
        ({"sse_kms_key_id": "k"}, "sse_kms_key_id"),
        ({"sse_kms_key_id": "k", "server_side_encryption": "AES256"}, "sse_kms_key_id"),
        ({"storage_class": "CHEAP"}, "storage_class"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"read_timeout_ms": 0}, "read_timeout_ms"),
    ],
)
def test_invalid_fields_raise_config_error(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        config(**fields)


def test_rolling_policy_validation() -> None:
    with pytest.raises(ConfigError, match="max_file_bytes"):
        RollingPolicy(max_file_bytes=0)
    with pytest.raises(ConfigError, match="inactivity_interval_ms"):
        RollingPolicy(inactivity_interval_ms=0)
    assert RollingPolicy(rollover_interval_ms=None, inactivity_interval_ms=None).on_checkpoint is False
