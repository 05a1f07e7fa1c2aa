"""IcebergSinkConfig validation and redaction; the committable's JSON codec."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from twophase.connectors.iceberg import IcebergCommittable, IcebergDataFile, IcebergSinkConfig
from twophase.connectors.iceberg.internal.catalog import catalog_properties
from twophase.connectors.iceberg.internal.committable import CODEC
from twophase.sinks.errors import CommittableDecodeError, ConfigError
from twophase.sinks.s3_options import S3Options

SECRETS = ("s3-secret-value", "catalog-password-value", "uri-password-value")


def test_a_bare_path_is_a_sqlite_catalog(tmp_path: os.PathLike[str]) -> None:
    config = IcebergSinkConfig(table="db.t", catalog_uri="catalog.db")
    assert config.catalog_scheme == "file" and os.path.isabs(config.catalog_uri)
    assert catalog_properties(config)["uri"] == f"sqlite:///{config.catalog_uri}"
    assert config.identifier == ("db", "t")
    assert IcebergSinkConfig(table="a.b.t", catalog_uri="c.db").identifier == ("a", "b", "t")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"table": "t"}, "namespace"),
        ({"table": "db..t"}, "namespace"),
        ({"catalog_uri": ""}, "catalog_uri"),
        ({"catalog_uri": "mysql://x/y"}, "not supported"),
        ({"catalog_uri": "postgresql://x/y"}, "psycopg"),
        ({"create_table": True}, "warehouse"),
        ({"partition_by": "region"}, "sequence"),
        ({"partition_by": ("bucket(id",)}, "is not 'col'"),
        ({"partition_by": ("a", "a")}, "repeats"),
        ({"columns": ()}, "at least one"),
        ({"target_file_rows": 0}, "positive"),
        ({"commit_attempts": True}, "positive"),
        ({"lingering_grace_ms": -1}, ">= 0"),
    ],
)
def test_bad_configuration_is_one_typed_line(overrides: dict[str, object], message: str) -> None:
    values: dict[str, object] = {"table": "db.t", "catalog_uri": "/tmp/c.db", **overrides}
    with pytest.raises(ConfigError, match=message) as e:
        IcebergSinkConfig(**values)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_partition_fields_parse_transforms() -> None:
    config = IcebergSinkConfig(
        table="db.t", catalog_uri="/tmp/c.db", partition_by=("region", "day(ts)", "bucket[16](id)")
    )
    assert config.partition_fields() == (("identity", "region"), ("day", "ts"), ("bucket[16]", "id"))


def test_secrets_never_reach_repr_or_redacted_text() -> None:
    config = IcebergSinkConfig(
        table="db.t",
        catalog_uri=f"postgresql+psycopg://iceberg:{SECRETS[2]}@127.0.0.1:1/cat",
        catalog_password=SECRETS[1],
        storage_options=S3Options(
            endpoint_url="http://127.0.0.1:9000", access_key_id="key-id", secret_access_key=SECRETS[0]
        ),
    )
    shown = repr(config) + str(config)
    assert not any(s in shown for s in SECRETS)
    assert "***" in shown
    text = f"failed: {SECRETS[0]} {SECRETS[1]} {SECRETS[2]}"
    assert not any(s in config.redact(text) for s in SECRETS)
    # the password given apart is merged into the URI only for the catalog itself
    assert SECRETS[1] in catalog_properties(config)["uri"]


def _committable() -> IcebergCommittable:
    data_file = IcebergDataFile(
        path="s3://b/wh/db.db/t/data/twophase-0123456789ab/part-00000-1-0-" + "a" * 32 + ".parquet",
        size=1234,
        record_count=10,
        spec_id=0,
        partition=(b"eu", None),
        column_sizes=((1, 100), (2, 50)),
        value_counts=((1, 10),),
        null_value_counts=((1, 0),),
        nan_value_counts=(),
        lower_bounds=((1, b"\x00\x01"),),
        upper_bounds=((1, b"\xff"),),
        split_offsets=(4,),
    )
    return IcebergCommittable(
        table="db.t",
        table_uuid="5f0c0a4e-0000-0000-0000-000000000000",
        job_id="orders",
        sink_name="lake",
        checkpoint_id=7,
        partition=0,
        attempt=1,
        num_partitions=2,
        schema_id=0,
        files=(data_file,),
    )


def test_the_committable_round_trips_as_versioned_json() -> None:
    c = _committable()
    payload = CODEC.to_json(c)
    assert payload["kind"] == "iceberg.data_files" and payload["version"] == 1
    assert CODEC.from_json(json.loads(json.dumps(payload))) == c
    assert c.num_records == 10 and c.num_bytes == 1234


def test_a_foreign_or_newer_payload_is_refused() -> None:
    payload = CODEC.to_json(_committable())
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json({**payload, "version": 2})
    with pytest.raises(CommittableDecodeError):
        CODEC.from_json({**payload, "kind": "delta.add_files"})


def test_the_committable_holds_no_secret(make_config: Callable[..., IcebergSinkConfig]) -> None:
    # the committable carries paths and metrics only; the sink's secrets live in its config
    text = CODEC.dumps(_committable())
    assert "secret" not in text and "password" not in text
