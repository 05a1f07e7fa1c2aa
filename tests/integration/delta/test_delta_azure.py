"""The Delta sink on Azure Blob Storage / ADLS Gen2 (Azurite), no mocks (issue #46 item 2).

Data files go through pyarrow's Azure file system, commits through delta-rs, lingering deletes
through the Blob SDK. Each table is read back by readers that are not the writer: a fresh
``deltalake.DeltaTable`` and the Blob SDK's own listing. A restarted sink decides a repeated commit
from the table's log alone (ALREADY_COMMITTED) and a lingering attempt's files are deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from support.delta.local_write import write_checkpoint

from twophase import AzureStorageOptions, S3Options
from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome

pytestmark = pytest.mark.delta

JOB = "delta-azure"
SINK = "azorders"


def batch(ids: range) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array(list(ids), pa.int64()),
            "country": pa.array([["fr", "de", "it"][i % 3] for i in ids]),
        }
    )


@pytest.fixture
def table(azure_endpoint: AzureBlobEndpoint) -> Iterator[tuple[str, AzureStorageOptions]]:
    """A fresh container; the table's URI in it and the options that reach it."""
    container = f"delta-{uuid.uuid4().hex[:12]}"
    azure_endpoint.ensure_container(container)
    uri = f"abfss://{container}@{azure_endpoint.account_name}.dfs.core.windows.net/tables/orders"
    yield uri, AzureStorageOptions(connection_string=azure_endpoint.connection_string())
    azure_endpoint.service_client().delete_container(container)


def test_a_table_on_azurite_is_committed_recommitted_cleaned_and_read_back(
    table: tuple[str, AzureStorageOptions], azure_endpoint: AzureBlobEndpoint
) -> None:
    uri, options = table

    def sink() -> DeltaSink:
        return DeltaSink(SINK, DeltaSinkConfig(uri, partition_by=("country",), storage_options=options))

    writer = sink()
    first = write_checkpoint(writer, 1, [[batch(range(0, 100))], [batch(range(100, 250))]], JOB)
    assert writer.commit_checkpoint(1, first) is CommitOutcome.COMMITTED
    # a restarted driver decides the repeated commit from the table's own log
    assert sink().recover_and_commit_checkpoint(1, first) is CommitOutcome.ALREADY_COMMITTED

    # checkpoint 2's first attempt fails after writing; its second attempt commits
    failed = write_checkpoint(writer, 2, [[batch(range(900, 950))]], JOB, attempt=0)
    second = write_checkpoint(writer, 2, [[batch(range(250, 300))]], JOB, attempt=1)
    assert writer.commit_checkpoint(2, second) is CommitOutcome.COMMITTED
    assert sink().commit_checkpoint(2, second) is CommitOutcome.ALREADY_COMMITTED
    scope = LingeringScope[DeltaCommittable](JOB, SINK, up_to_checkpoint=2)
    assert sink().abort_lingering(scope) == sum(len(c.adds) for c in failed) > 0

    reader = DeltaTable(uri, storage_options=sink().config.delta_storage_options())
    assert reader.version() == 1  # one version per checkpoint: 0 and 1
    assert sorted(reader.to_pyarrow_table().column("id").to_pylist()) == list(range(300))
    container = uri.split("://", 1)[1].split("@", 1)[0]
    blobs = list(azure_endpoint.service_client().get_container_client(container).list_blob_names())
    data = [b for b in blobs if "/_delta_log/" not in b and b.endswith(".parquet")]
    assert len(data) == len(reader.file_uris())  # nothing but the committed data files is left


def test_azure_tables_name_the_options_they_need() -> None:
    uri = "abfss://c@acct.dfs.core.windows.net/t"
    assert isinstance(DeltaSinkConfig(uri).storage_options, AzureStorageOptions)
    with pytest.raises(ConfigError, match=r"tables take storage_options=twophase.AzureStorageOptions"):
        DeltaSinkConfig(uri, storage_options=S3Options(endpoint_url="http://127.0.0.1:9000"))
    with pytest.raises(ConfigError, match="delta-rs cannot take an azure-identity credential object"):
        DeltaSinkConfig(uri, storage_options=AzureStorageOptions(credential=object()))
    with pytest.raises(ConfigError, match="names no folder"):
        DeltaSinkConfig("abfss://c@acct.dfs.core.windows.net/")
    with pytest.raises(ConfigError, match="gs:// Delta tables are not supported yet"):
        DeltaSinkConfig("gs://bucket/t")
    sas = DeltaSinkConfig(uri, storage_options=AzureStorageOptions(sas_token="?sv=1&sig=s"))
    assert sas.delta_storage_options() == {"account_name": "acct", "sas_token": "sv=1&sig=s"}
    assert "sig=s" not in repr(sas)
