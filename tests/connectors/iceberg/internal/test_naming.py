"""Data file paths of the Iceberg sink: pure functions."""

from __future__ import annotations

import uuid

import pytest

from twophase.connectors.iceberg.internal import naming


def test_job_token_is_stable_and_tells_jobs_and_sinks_apart() -> None:
    token = naming.job_token("orders", "lake")
    assert token == naming.job_token("orders", "lake")
    assert len(token) == naming.TOKEN_HEX_DIGITS and int(token, 16) >= 0
    assert token != naming.job_token("orders", "lake2")
    assert token != naming.job_token("orders2", "lake")
    with pytest.raises(ValueError):
        naming.job_token("", "lake")


def test_a_data_file_name_round_trips() -> None:
    file_id = uuid.uuid4().hex
    name = naming.data_file_name(3, 17, 2, file_id)
    assert name == f"part-00003-17-2-{file_id}.parquet"
    assert naming.parse_data_file_name(name) == naming.DataFileName(3, 17, 2, file_id)


def test_the_path_puts_every_file_under_the_job_prefix() -> None:
    token = naming.job_token("j", "s")
    prefix = naming.job_data_prefix("s3://bucket/wh/db.db/t/", token)
    assert prefix == f"s3://bucket/wh/db.db/t/data/twophase-{token}"
    name = naming.data_file_name(0, 1, 0, "0" * 32)
    assert naming.data_file_path(prefix, "region=eu/ts_day=2024-01-01", name) == (
        f"{prefix}/region=eu/ts_day=2024-01-01/{name}"
    )
    assert naming.data_file_path(prefix, "", name) == f"{prefix}/{name}"
    assert naming.parse_data_file_path(f"{prefix}/region=eu/{name}") == naming.DataFileName(0, 1, 0, "0" * 32)


@pytest.mark.parametrize(
    "name",
    [
        "00000-0-abc.parquet",
        "part-00001-1-0-xyz.parquet",
        "part-1-1-0-" + "0" * 32 + ".parquet",
        "part-00001-1-0.parquet",
    ],
)
def test_other_files_are_not_ours(name: str) -> None:
    assert naming.parse_data_file_name(name) is None


def test_bad_parts_are_refused() -> None:
    with pytest.raises(ValueError):
        naming.data_file_name(-1, 1, 0, "0" * 32)
    with pytest.raises(ValueError):
        naming.data_file_name(0, 1, 0, "not-hex")
    with pytest.raises(ValueError):
        naming.job_data_prefix("s3://b/t", "short")
