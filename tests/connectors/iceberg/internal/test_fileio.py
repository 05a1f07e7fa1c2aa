"""CloudFileIO: pyarrow paths of Azure locations leave the account's host out (pyiceberg 0.12 keeps
it, apache/iceberg-python#2698); every other location is parsed as pyiceberg parses it."""

from __future__ import annotations

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from twophase.connectors.iceberg.internal.fileio import CloudFileIO


@pytest.mark.parametrize(
    ("location", "path"),
    [
        ("abfss://c@acct.dfs.core.windows.net/wh/db/t/data/f.parquet", "c/wh/db/t/data/f.parquet"),
        ("wasbs://c@acct.blob.core.windows.net/wh/f.parquet", "c/wh/f.parquet"),
        ("abfss://c/wh/f.parquet", "c/wh/f.parquet"),
    ],
)
def test_azure_paths_name_the_container_only(location: str, path: str) -> None:
    scheme, _, parsed = CloudFileIO.parse_location(location)
    assert (scheme, parsed) == (location.split("://")[0], path)


@pytest.mark.parametrize("location", ["s3://b/wh/f.parquet", "gs://b/wh/f.parquet", "/tmp/wh/f.parquet"])
def test_other_locations_parse_as_pyiceberg_parses_them(location: str) -> None:
    assert CloudFileIO.parse_location(location) == PyArrowFileIO.parse_location(location)
