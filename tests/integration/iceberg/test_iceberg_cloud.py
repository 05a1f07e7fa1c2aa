"""The Iceberg sink with its table on Azure Blob Storage (Azurite) and on GCS (fake-gcs-server),
a SQLite catalog, no mocks (issue #46 item 2).

Each store: a checkpoint committed, the same checkpoint committed again by a new instance
(ALREADY_COMMITTED, decided from the snapshot summaries), a dead attempt's file deleted by the
lingering cleanup. Read back by readers that are not the writer: a fresh pyiceberg catalog and
table load (for GCS with pyiceberg's own ``PyArrowFileIO``; for Azure with ``CloudFileIO``, since
pyiceberg 0.12's cannot open ``abfss://container@account…`` locations) and the store's own SDK
listing the table's data files.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog
from support.azure_container import fresh_container

from twophase import AzureStorageOptions, GcsStorageOptions, S3Options
from twophase.connectors.iceberg import IcebergCommittable, IcebergSink, IcebergSinkConfig
from twophase.connectors.iceberg.internal import fileio
from twophase.connectors.iceberg.internal.catalog import catalog_properties
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.integration.services.gcs_server import GcsEndpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome

from .test_iceberg_sink import JOB, paths, pre_commit, rows


@dataclass(frozen=True)
class Store:
    """A fresh container or bucket: the warehouse in it, the sink's options, the data files the
    store's SDK lists, and the FileIO properties of an independent reader."""

    warehouse: str
    options: AzureStorageOptions | GcsStorageOptions
    data_files: Callable[[], set[str]]
    reader_io: dict[str, str]


def _azure(endpoint: AzureBlobEndpoint) -> Iterator[Store]:
    with fresh_container(endpoint, "ice") as c:
        yield Store(
            f"{c.root}/wh",
            c.options,
            lambda: {f"{c.root}/{b}" for b in c.client.list_blob_names() if b.endswith(".parquet")},
            {"py-io-impl": fileio.IMPL},
        )


def _gcs(endpoint: GcsEndpoint) -> Iterator[Store]:
    bucket = f"ice-{uuid.uuid4().hex[:12]}"
    endpoint.ensure_bucket(bucket)
    sdk = endpoint.client()
    yield Store(
        f"gs://{bucket}/wh",
        GcsStorageOptions(emulator_host=endpoint.url),
        lambda: {f"gs://{bucket}/{b.name}" for b in sdk.list_blobs(bucket) if b.name.endswith(".parquet")},
        {  # pyiceberg's own FileIO: the emulator ignores the token, which is there only because
            # pyiceberg cannot ask pyarrow for anonymous access
            "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
            "gcs.service.host": endpoint.url,
            "gcs.oauth2.token": "emulator",
            "gcs.oauth2.token-expires-at": "4102444800000",
        },
    )
    for blob in sdk.list_blobs(bucket):
        blob.delete()
    sdk.bucket(bucket).delete()


@pytest.fixture(params=["azure", "gcs"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    endpoint: Any = request.getfixturevalue(f"{request.param}_endpoint")
    yield from (_azure(endpoint) if request.param == "azure" else _gcs(endpoint))


def test_a_table_is_committed_recommitted_cleaned_and_read_back(store: Store, tmp_path: Path) -> None:
    def config() -> IcebergSinkConfig:
        return IcebergSinkConfig(
            table="db.orders",
            catalog_uri=str(tmp_path / "catalog.db"),
            warehouse=store.warehouse,
            create_table=True,
            partition_by=("region", "day(ts)"),
            storage_options=store.options,
            lingering_grace_ms=0,
        )

    sink = IcebergSink("lake", config())
    sink.validate(rows(0, 1).schema)
    committed = pre_commit(sink, 1, [rows(0, 30), rows(30, 30)], attempt=1)
    dead = pre_commit(sink, 1, [rows(0, 5)], attempt=0)  # a dead attempt of the same checkpoint
    assert sink.commit_checkpoint(1, committed) is CommitOutcome.COMMITTED
    again = IcebergSink("lake", config())  # another process: only the configuration
    assert again.recover_and_commit_checkpoint(1, committed) is CommitOutcome.ALREADY_COMMITTED
    assert paths(dead) | paths(committed) == store.data_files()
    scope = LingeringScope[IcebergCommittable](JOB, "lake", up_to_checkpoint=1)
    assert again.abort_lingering(scope) == len(paths(dead)) > 0
    assert store.data_files() == paths(committed)

    properties = {**catalog_properties(sink.config), **store.reader_io}
    table = load_catalog(sink.config.catalog_name, **properties).load_table(sink.config.identifier)
    assert table.location().startswith(store.warehouse)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(60))
    assert {t.file.file_path for t in table.scan().plan_files()} == paths(committed)


def test_cloud_warehouses_name_the_options_they_need(tmp_path: Path) -> None:
    catalog = str(tmp_path / "catalog.db")
    azure = "abfss://c@acct.dfs.core.windows.net/wh"
    assert isinstance(
        IcebergSinkConfig("db.t", catalog, warehouse=azure).storage_options, AzureStorageOptions
    )
    assert isinstance(
        IcebergSinkConfig("db.t", catalog, warehouse="gs://b/wh").storage_options, GcsStorageOptions
    )
    with pytest.raises(ConfigError, match=r"gs://b/wh takes storage_options=twophase.GcsStorageOptions"):
        IcebergSinkConfig("db.t", catalog, warehouse="gs://b/wh", storage_options=S3Options(region="x"))
    with pytest.raises(ConfigError, match=r"takes storage_options=twophase.AzureStorageOptions"):
        IcebergSinkConfig("db.t", catalog, warehouse=azure, storage_options=GcsStorageOptions())
    with pytest.raises(ConfigError, match="Azure tables need their account"):
        IcebergSinkConfig("db.t", catalog, storage_options=AzureStorageOptions(account_key="k"))
    with pytest.raises(ConfigError, match="cannot take an azure-identity credential"):
        IcebergSinkConfig("db.t", catalog, warehouse=azure, storage_options=AzureStorageOptions(credential=1))
    with pytest.raises(ConfigError, match="cannot take a credentials object"):
        IcebergSinkConfig(
            "db.t", catalog, warehouse="gs://b/w", storage_options=GcsStorageOptions(credentials=1)
        )
    keyed = IcebergSinkConfig(
        "db.t", catalog, warehouse=azure, storage_options=AzureStorageOptions(sas_token="?sv=1&sig=s3cret")
    )
    assert "s3cret" not in repr(keyed) and keyed.redact("x ?sv=1&sig=s3cret") == "x ***"
    assert catalog_properties(keyed)["adls.sas-token"] == "sv=1&sig=s3cret"
    assert catalog_properties(keyed)["adls.account-name"] == "acct"
