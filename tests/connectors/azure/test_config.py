"""The Azure file sink's configuration and names: typed errors before anything is written,
block ids as Azure wants them, secrets kept out of reprs, the declaration found by the registry."""

from __future__ import annotations

import pytest

from twophase.connectors.azure import AzureBlobSinkConfig
from twophase.connectors.azure.internal import naming
from twophase.connectors.azure.internal.committable import (
    COMMITTABLE_CODEC,
    AzureCommittable,
    StagedFile,
)
from twophase.connectors.objectstore.internal.layout import FileFormat
from twophase.coordinator.storage import AzureStorageOptions
from twophase.sinks.errors import ConfigError
from twophase.sinks.registry import CONNECTORS

LOCATION = "abfss://data@acct.dfs.core.windows.net/warehouse/events"


def test_a_valid_config_normalizes_its_fields() -> None:
    config = AzureBlobSinkConfig(location=LOCATION + "/", format="jsonl", partition_by=["day"])  # type: ignore[arg-type]
    assert config.container == "data"
    assert config.prefix == "warehouse/events"
    assert config.file_format is FileFormat.JSON_LINES
    assert config.partition_by == ("day",)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"location": "s3://b/p"}, "not an abfss:// or wasbs://"),
        ({"location": "abfs://data@acct.dfs.core.windows.net/p"}, "use abfss://"),
        ({"location": "abfss://Data_1@acct.dfs.core.windows.net/p"}, "invalid Azure container name"),
        ({"location": "abfss://data@acct.dfs.core.windows.net/a b"}, "Azure key prefix"),
        ({"location": "abfss://data@acct.dfs.core.windows.net/a/_twophase"}, "reserved segment"),
        ({"format": "avro"}, "unknown Azure file format"),
        ({"block_size_bytes": 1000}, "block_size_bytes must be within"),
        ({"partition_by": ("day", "day")}, "distinct"),
        ({"columns": ("key",), "partition_by": ("day",)}, "not among columns"),
        ({"json_column": "j"}, "JSON lines format only"),
        ({"max_open_files": 0}, "max_open_files"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"storage_options": {"account_key": "k"}}, "AzureStorageOptions"),
    ],
)
def test_bad_configuration_is_one_typed_line(fields: dict[str, object], message: str) -> None:
    fields.setdefault("location", LOCATION)
    with pytest.raises(ConfigError, match=message):
        AzureBlobSinkConfig(**fields)  # type: ignore[arg-type]


def test_secrets_stay_out_of_the_repr() -> None:
    options = AzureStorageOptions(account_key="s3cr3t-key", sas_token="sv=secret-sas")
    config = AzureBlobSinkConfig(location=LOCATION, storage_options=options)
    assert "s3cr3t" not in repr(config) and "secret-sas" not in repr(config)


def test_block_ids_have_one_length_and_refuse_what_azure_refuses() -> None:
    nonce = naming.new_nonce()
    ids = [naming.block_id(nonce, n) for n in (1, 99, 50_000)]
    assert len({len(i) for i in ids}) == 1 and len(ids[0]) <= 64
    assert naming.new_nonce() != nonce
    with pytest.raises(ValueError, match="sequence"):
        naming.block_id(nonce, 50_001)
    with pytest.raises(ValueError, match="nonce"):
        naming.block_id("xyz", 1)


def test_the_committable_round_trips_as_versioned_json() -> None:
    f = StagedFile("data", "p/part-00000-1-abcdefabcdef-" + "0" * 32 + ".jsonl", ("a1", "a2"), 10, 2, "x")
    committable = AzureCommittable(files=(f,))
    payload = COMMITTABLE_CODEC.to_json(committable)
    assert payload["kind"] == "azure.files"
    assert COMMITTABLE_CODEC.from_json(payload) == committable
    with pytest.raises(ValueError, match="repeat"):
        StagedFile("data", "b", ("a1", "a1"), 1, 1, "x")


def test_the_registry_knows_the_connector_by_its_declaration() -> None:
    declaration = CONNECTORS.get("azure")
    assert declaration.extra == "azure"
    assert declaration.config_class() is AzureBlobSinkConfig
