"""What the integration suites of the part-file sinks (Azure Blob Storage on Azurite, GCS on
fake-gcs-server) share: writer contexts, rows, writing one pre-committed transaction, decoding a
committed file with pyarrow (a reader that is not the writer), the read-back checks of a
partitioned Parquet commit, and the conformance kit's settings for both."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any, ClassVar, Protocol, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twophase.connectors.objectstore.internal.layout import RollingPolicy
from twophase.connectors.objectstore.internal.naming import parse_data_key
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.conformance import SinkContract
from twophase.sinks.context import WriterContext

C = TypeVar("C")


S = TypeVar("S", bound="Place")


class Place(Protocol):
    """One test's prefix in a store, seen through the store's SDK (the reader)."""

    def keys(self) -> list[str]:
        """Every committed record's ``key``."""
        ...

    def sink(self, **fields: Any) -> TwoPhaseCommitSink[Any, Any]:
        """The store's file sink ``out`` writing under this prefix, with config ``fields``."""
        ...

    def moved(self: S, prefix: str) -> S:
        """The same store and place (container, bucket) under another ``prefix``."""
        ...


def writer_ctx(checkpoint: int, partition: int = 0, attempt: int = 0, job: str = "job") -> WriterContext:
    """Sink ``out`` of ``job``, subtask ``partition`` of 2, at ``checkpoint``."""
    return WriterContext(job, "out", checkpoint, partition, attempt, 2)


def rows(n: int, start: int = 0) -> pa.RecordBatch:
    """``n`` rows ``k<start>``…: a key, a day (two values: two partitions) and an amount."""
    return pa.RecordBatch.from_pydict(
        {
            "key": [f"k{i}" for i in range(start, start + n)],
            "day": [f"2026-12-0{1 + i % 2}" for i in range(start, start + n)],
            "amount": [i * 1.5 for i in range(start, start + n)],
        }
    )


def padded_rows(n: int) -> pa.RecordBatch:
    """``n`` rows of a key and 100 bytes of padding (about 110 bytes a JSON line)."""
    return pa.RecordBatch.from_pydict({"key": [f"k{i}" for i in range(n)], "pad": ["x" * 100] * n})


def pre_committed(sink: TwoPhaseCommitSink[Any, C], ctx: WriterContext, *batches: pa.RecordBatch) -> C:
    """Write ``batches`` in one transaction of ``ctx`` and pre-commit it (something was written)."""
    txn = sink.begin_transaction(ctx)
    for b in batches:
        sink.write(txn, b)
    committable = sink.pre_commit(txn)
    assert committable is not None
    return committable


def decode_file(name: str, data: bytes) -> pa.Table:
    """A committed file's bytes as a table: Parquet by pyarrow, JSON lines by ``json``."""
    if name.endswith(".parquet"):
        return pq.read_table(io.BytesIO(data))
    return pa.Table.from_pylist([json.loads(line) for line in data.decode().splitlines()])


def check_partitioned_read_back(prefix: str, names: list[str], tables: list[pa.Table]) -> None:
    """The committed files of :func:`rows` ``(10)`` partitioned by day: one file per day under its
    Hive path, named as the sink names data files, every key once, no partition column inside."""
    assert [n.split("/")[2] for n in names] == ["day=2026-12-01", "day=2026-12-02"]
    assert all(parse_data_key(prefix, n) is not None for n in names)
    assert sorted(k for t in tables for k in t.column("key").to_pylist()) == sorted(
        f"k{i}" for i in range(10)
    )
    assert all(t.schema.names == ["key", "amount"] for t in tables)  # partition column not in files


class PartFileContract(SinkContract[S]):
    """The conformance kit on a part-file sink: JSON lines files of at most 60 bytes (several
    roll within one epoch, each its own file); a subclass with ``file_format = "parquet"`` runs
    Parquet files, one per subtask and checkpoint. Each system is a fresh prefix beside the
    suite's fixture ``home`` (module-scoped: the store and place every test shares)."""

    max_examples = 8
    file_format: ClassVar[str] = "jsonl"

    @pytest.fixture(autouse=True)
    def _home(self, home: S) -> None:
        self.home = home

    def new_system(self) -> S:
        return self.home.moved(f"kit/{uuid.uuid4().hex[:12]}")

    def make_sink(self, system: S) -> TwoPhaseCommitSink[Any, Any]:
        return system.sink(format=self.file_format, rolling=RollingPolicy(max_file_bytes=60))

    def read_committed(self, system: S) -> list[str]:
        return system.keys()
