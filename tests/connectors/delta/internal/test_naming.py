"""Data file names, partition folders and Add paths of the Delta sink."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from twophase.connectors.delta.internal import naming
from twophase.connectors.delta.internal.partitions import serialize_partition_value
from twophase.sinks.errors import SchemaError


def test_job_token_is_stable_short_hex_and_distinct_per_job_and_sink() -> None:
    t = naming.job_token("job-1", "delta")
    assert t == naming.job_token("job-1", "delta")
    assert len(t) == 12 and int(t, 16) >= 0
    assert len({t, naming.job_token("job-2", "delta"), naming.job_token("job-1", "delta2")}) == 3
    # the separator keeps ("ab", "c") and ("a", "bc") apart
    assert naming.job_token("ab", "c") != naming.job_token("a", "bc")


def test_data_file_name_round_trip() -> None:
    token = naming.job_token("j", "s")
    name = naming.data_file_name(3, 42, token, "0123456789abcdef0123456789abcdef")
    assert name == f"part-00003-42-{token}-0123456789abcdef0123456789abcdef.parquet"
    assert naming.parse_data_file_name(name) == naming.DataFileName(
        3, 42, token, "0123456789abcdef0123456789abcdef"
    )


@pytest.mark.parametrize(
    "name",
    [
        "part-00000-c6bb0f4b-e419-401c-bea5-5f638140e5c6-c000.snappy.parquet",  # delta-spark / delta-rs
        "part-00003-42-abc-0123456789abcdef0123456789abcdef.parquet",  # short token
        "part-00003-42-0123456789ab-0123456789abcdef0123456789abcdef.parquet.crc",
        "_delta_log",
    ],
)
def test_other_writers_files_are_not_ours(name: str) -> None:
    assert naming.parse_data_file_name(name) is None


def test_data_file_name_rejects_bad_parts() -> None:
    with pytest.raises(ValueError):
        naming.data_file_name(-1, 1, naming.job_token("j", "s"), "0" * 32)
    with pytest.raises(ValueError):
        naming.data_file_name(0, 1, "xyz", "0" * 32)


def test_partition_directory() -> None:
    assert naming.partition_directory(["p", "q"], ["a/b", None]) == "p=a%2Fb/q=__HIVE_DEFAULT_PARTITION__"
    assert naming.partition_directory([], []) == ""
    with pytest.raises(ValueError):
        naming.partition_directory(["p"], [])


def test_add_path_is_uri_encoded_relative_path() -> None:
    rel = "p=a b%3Ac/q=é/part-00000-1-x.parquet"
    encoded = naming.encode_add_path(rel)
    assert encoded == "p=a%20b%253Ac/q=%C3%A9/part-00000-1-x.parquet"
    assert naming.decode_add_path(encoded) == rel


def test_app_id() -> None:
    assert naming.app_id("job-1", "delta") == "job-1:delta"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),  # Spark stores an empty partition string as null
        ("x y", "x y"),
        (True, "true"),
        (-7, "-7"),
        (1.5, "1.5"),
        (float("inf"), "Infinity"),
        (decimal.Decimal("1.50"), "1.50"),
        (decimal.Decimal("1E-7"), "0.0000001"),
        (dt.date(2024, 2, 29), "2024-02-29"),
        (dt.datetime(2024, 1, 1, 12, 0, 0), "2024-01-01 12:00:00"),
        (dt.datetime(2024, 1, 1, 12, 0, 0, 5), "2024-01-01 12:00:00.000005"),
        (
            dt.datetime(2024, 1, 1, 13, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            "2024-01-01T12:00:00.123456Z",
        ),
    ],
)
def test_partition_value_serialization(value: object, expected: str | None) -> None:
    assert serialize_partition_value(value) == expected


def test_binary_partition_value_refused() -> None:
    with pytest.raises(SchemaError):
        serialize_partition_value(b"\x00")
