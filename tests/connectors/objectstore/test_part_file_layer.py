"""The object-store file layer (#46 item 3): no connector of its own; the part-file writer routes
rows to one file per partition path and rolls them (size, ``max_open_files``, the store's part
limit, the checkpoint) whatever the store; the sinks built on it keep their messages; and the
committables of the previous release decode and encode byte for byte as before."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from twophase.connectors.azure import AzureBlobSink, AzureBlobSinkConfig, AzureCommittable
from twophase.connectors.azure.internal.committable import COMMITTABLE_CODEC as AZURE_CODEC
from twophase.connectors.gcs import GcsCommittable, GcsFileSink, GcsFileSinkConfig
from twophase.connectors.gcs.internal.committable import COMMITTABLE_CODEC as GCS_CODEC
from twophase.connectors.objectstore.internal.config import PartFileSinkConfig
from twophase.connectors.objectstore.internal.layout import RollingPolicy
from twophase.connectors.objectstore.internal.writer import PartFile, PartFileTransaction
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import ConfigError, IllegalTransitionError
from twophase.sinks.registry import ConnectorRegistry

# What the previous release (d5aad7f) wrote into checkpoints, as its codecs encoded it.
AZURE_V1 = {
    "kind": "azure.files",
    "version": 1,
    "body": {
        "files": [
            {
                "container": "data",
                "blob": "p/day=2026-12-01/part-00000-3-abcdefabcdef-" + "0" * 32 + ".parquet",
                "block_ids": ["0123456789abcdef000001", "0123456789abcdef000002"],
                "byte_count": 9000000,
                "record_count": 1000,
                "content_type": "application/vnd.apache.parquet",
            }
        ]
    },
}
GCS_V1 = {
    "kind": "gcs.files",
    "version": 1,
    "body": {
        "files": [
            {
                "bucket": "b",
                "name": "p/part-00000-3-abcdefabcdef-" + "1" * 32 + ".jsonl",
                "session_uri": "https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=x",
                "persisted_bytes": 262144,
                "tail": {"$b64": "eyJrIjogMX0K"},
                "byte_count": 262153,
                "crc32c": "AAAAAA==",
                "md5": "1B2M2Y8AsgTpgAmY7PhCfg==",
                "record_count": 7,
                "content_type": "application/x-ndjson",
            }
        ]
    },
}


@pytest.mark.parametrize(("codec", "payload"), [(AZURE_CODEC, AZURE_V1), (GCS_CODEC, GCS_V1)])
def test_committables_of_the_previous_release_decode_and_encode_as_before(codec: Any, payload: Any) -> None:
    committable = codec.from_json(payload)
    assert json.dumps(codec.to_json(committable), sort_keys=True) == json.dumps(payload, sort_keys=True)


def test_the_layer_is_no_connector() -> None:
    kinds = ConnectorRegistry().all()
    assert "objectstore" not in kinds and {"azure", "gcs", "s3"} <= set(kinds)


def test_the_sinks_on_the_layer_keep_their_messages() -> None:
    azure = AzureBlobSinkConfig(location="wasbs://data@acct.blob.core.windows.net/p")
    gcs = GcsFileSinkConfig(location="gs://bucket/p")
    with pytest.raises(ConfigError, match=r"^an Azure Blob Storage sink needs a non-empty name$"):
        AzureBlobSink("", azure)
    with pytest.raises(ConfigError, match=r"^a GCS file sink needs a non-empty name$"):
        GcsFileSink("", gcs)
    with pytest.raises(ConfigError, match=r"^config must be an AzureBlobSinkConfig, got GcsFileSinkConfig$"):
        AzureBlobSink("out", gcs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^config must be a GcsFileSinkConfig, got AzureBlobSinkConfig$"):
        GcsFileSink("out", azure)  # type: ignore[arg-type]
    assert repr(GcsFileSink("out", gcs)).startswith("GcsFileSink(name='out', config=GcsFileSinkConfig(")


# --- the part-file writer on an in-memory store --------------------------------------------------


@dataclass(frozen=True)
class MemoryConfig(PartFileSinkConfig):
    """``mem://<prefix>``: parts of ``part_bytes``, at most ``max_parts`` a file."""

    STORE: ClassVar[str] = "memory"

    part_bytes: int = 16
    max_parts: int = 1000

    @property
    def location_path(self) -> str:
        return self.location.removeprefix("mem://")


@dataclass(frozen=True)
class Rolled:
    name: str
    data: bytes
    record_count: int
    byte_count: int


class MemoryFile(PartFile[Rolled]):
    config: MemoryConfig

    def __init__(self, store: dict[str, list[bytes]], config: MemoryConfig, *args: Any) -> None:
        super().__init__(store, config, *args)
        self.store = store
        self.part_bytes = config.part_bytes

    @property
    def parts_sent(self) -> int:
        return len(self.store.get(self.name, []))

    @property
    def max_parts(self) -> int:
        return self.config.max_parts

    def send_full_parts(self) -> None:
        while len(self.buffer) >= self.part_bytes:
            self.store.setdefault(self.name, []).append(self.buffer.drain(self.part_bytes))

    def finish(self) -> Rolled:
        self.send_full_parts()
        self.store.setdefault(self.name, []).append(self.buffer.drain_all())
        data = b"".join(self.store[self.name])
        return Rolled(self.name, data, self.record_count, len(data))

    def discard(self) -> None:
        if self.name.endswith(".jsonl") and "day=b" in self.name:
            raise OSError("the store refused")
        self.store.pop(self.name, None)

    def log_rolled(self, pending: Rolled) -> None:
        pass


def _rows(days: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": [f"k{i}" for i in range(len(days))], "day": days})


MemoryTransaction = PartFileTransaction[MemoryFile, Rolled, tuple[Rolled, ...]]


def _txn(**fields: Any) -> MemoryTransaction:
    config = MemoryConfig(location="mem://out", format="jsonl", partition_by=("day",), **fields)
    ctx = WriterContext("job", "s", 3, 1, 0, 2)
    return MemoryTransaction(ctx, config, {}, MemoryFile, lambda files: files, clock=lambda: 1000)


def _keys(rolled: Rolled) -> list[str]:
    return [json.loads(line)["key"] for line in rolled.data.decode().splitlines()]


def test_rows_go_to_one_file_per_partition_path_and_every_file_rolls_at_the_checkpoint() -> None:
    txn = _txn()
    txn.write(_rows(["a", "b", "a"]))
    txn.write(_rows(["b"]))
    files = txn.pre_commit()
    assert files is not None
    assert [f.name.split("/")[1] for f in files] == ["day=a", "day=b"]
    assert all(f.name.startswith("out/day=") and "/part-00001-3-" in f.name for f in files)
    assert [_keys(f) for f in files] == [["k0", "k2"], ["k1", "k0"]]
    assert [f.record_count for f in files] == [2, 2]
    with pytest.raises(IllegalTransitionError, match="PartFileTransaction"):
        txn.write(_rows(["a"]))


def test_files_roll_on_size_on_the_part_limit_and_on_max_open_files() -> None:
    sized = _txn(rolling=RollingPolicy(max_file_bytes=30))
    sized.write(_rows(["a"] * 3))
    sized.write(_rows(["a"]))
    assert len(sized.rolled) == 1 and len(sized.files) == 1
    limited = _txn(max_parts=1)
    limited.write(_rows(["a"] * 3))
    assert len(limited.rolled) == 1
    crowded = _txn(max_open_files=1)
    crowded.write(_rows(["a"]))
    crowded.write(_rows(["b"]))
    assert [f.name.split("/")[1] for f in crowded.rolled] == ["day=a"]
    assert list(crowded.files) == ["day=b"]
    assert _txn().pre_commit() is None


def test_abort_open_undoes_every_file_opened_and_logs_what_it_cannot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    txn = _txn(max_open_files=1)
    txn.write(_rows(["a", "a", "a"]))
    txn.write(_rows(["b", "b", "b"]))
    assert len(txn.ops) == 2
    with caplog.at_level(logging.WARNING):
        txn.abort_open()
        txn.abort_open()  # idempotent
    assert [n.split("/")[1] for n in txn.ops] == ["day=b"]  # the store refused that one
    assert [r.getMessage().split("/day=")[0] for r in caplog.records] == ["abort_open: could not undo out"]


def test_each_store_s_transaction_keeps_its_name_in_transition_errors() -> None:
    from twophase.connectors.azure.internal import writer as azure_writer
    from twophase.connectors.gcs.internal import writer as gcs_writer

    ctx = WriterContext("job", "s", 3, 1, 0, 2)
    azure = AzureBlobSinkConfig(location="wasbs://data@acct.blob.core.windows.net/p")
    gcs = GcsFileSinkConfig(location="gs://bucket/p")
    azure_txn = azure_writer.AzureTransaction(ctx, azure, None, azure_writer.OpenFile, AzureCommittable)
    gcs_txn = gcs_writer.GcsTransaction(ctx, gcs, None, gcs_writer.OpenFile, GcsCommittable)
    for txn, name in ((azure_txn, "AzureTransaction"), (gcs_txn, "GcsTransaction")):
        assert txn.pre_commit() is None  # nothing written: no request
        with pytest.raises(IllegalTransitionError, match=name):
            txn.write(_rows(["a"]))
