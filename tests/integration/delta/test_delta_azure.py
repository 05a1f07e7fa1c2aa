"""The Delta sink on Azure Blob Storage (Azurite): Spark tasks write the data files through
pyarrow's Azure file system, the driver commits with delta-rs, lingering files of a failed attempt
are cleaned, and deltalake (not the writer) reads the table back exactly (issue #46).

Spark itself cannot read the table back here: that needs hadoop-azure, which the test Spark does
not ship; deltalake reads it through its own Azure client.
"""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable
from support.delta.spark_write import write_and_commit, write_epoch

from twophase import AzureStorageOptions, S3Options
from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.integration.services.azurite import AzureBlobEndpoint
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError
from twophase.sinks.outcome import CommitOutcome

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.delta]

JOB = "delta-azure"


def frame(spark: SparkSession, start: int, stop: int) -> DataFrame:
    rows = [(i, f"name-{i}", ["fr", "de", None][i % 3]) for i in range(start, stop)]
    return spark.createDataFrame(rows, "id long, name string, country string").repartition(2)


@pytest.fixture(autouse=True)
def python_workers(spark: SparkSession) -> None:
    spark.sparkContext.pythonExec = sys.executable


def test_a_table_on_azurite_is_committed_cleaned_and_read_back_exactly(
    spark: SparkSession, azure_endpoint: AzureBlobEndpoint
) -> None:
    container = f"delta-{uuid.uuid4().hex[:12]}"
    azure_endpoint.ensure_container(container)
    uri = f"abfss://{container}@{azure_endpoint.account_name}.dfs.core.windows.net/tables/orders"
    options = AzureStorageOptions(connection_string=azure_endpoint.connection_string())
    config = DeltaSinkConfig(uri, partition_by=("country",), storage_options=options)
    sink = DeltaSink("azorders", config)
    first, second = frame(spark, 0, 200), frame(spark, 200, 500)
    expected: list[Any] = [r["id"] for df in (first, second) for r in df.collect()]
    assert write_and_commit(first, sink, JOB, 1) is CommitOutcome.COMMITTED
    committables = write_epoch(second, sink, JOB, 2)
    assert sink.commit_checkpoint(2, committables) is CommitOutcome.COMMITTED
    # a failed attempt's files of checkpoint 3 linger until abort_lingering
    lingering = write_epoch(frame(spark, 500, 520), sink, JOB, 3)
    scope = LingeringScope[DeltaCommittable](JOB, "azorders")
    assert sink.abort_lingering(scope) == sum(len(c.adds) for c in lingering)

    # a restarted driver's sink finds checkpoint 2 committed from the table's own log
    fresh = DeltaSink("azorders", DeltaSinkConfig(uri, partition_by=("country",), storage_options=options))
    decoded = [fresh.decode(sink.encode(c)) for c in committables]
    assert fresh.recover_and_commit_checkpoint(2, decoded) is CommitOutcome.ALREADY_COMMITTED
    table = DeltaTable(uri, storage_options=config.delta_storage_options())
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == sorted(expected)
    assert table.version() == 1
    blobs = azure_endpoint.service_client().get_container_client(container).list_blob_names()
    data = [b for b in blobs if "_delta_log" not in b]
    assert len(data) == len(table.file_uris())  # nothing but the committed data files is left
    assert fresh.config.delta_storage_options() == config.delta_storage_options()


def test_azure_tables_take_azure_options_only() -> None:
    uri = "abfss://c@acct.dfs.core.windows.net/t"
    assert isinstance(DeltaSinkConfig(uri).storage_options, AzureStorageOptions)
    with pytest.raises(ConfigError, match="must be an AzureStorageOptions"):
        DeltaSinkConfig(uri, storage_options=S3Options(endpoint_url="http://127.0.0.1:9000"))
    with pytest.raises(ConfigError, match="names no folder"):
        DeltaSinkConfig("abfss://c@acct.dfs.core.windows.net/")
    options = DeltaSinkConfig(
        uri, storage_options=AzureStorageOptions(sas_token="?sv=1&sig=s")
    ).delta_storage_options()
    assert options == {"account_name": "acct", "sas_token": "sv=1&sig=s"}
