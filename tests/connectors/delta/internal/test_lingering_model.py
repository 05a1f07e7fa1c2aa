"""Stateful test of the Delta sink's lingering cleanup on a real local table.

Checkpoints commit, fail an attempt, are skipped; OPTIMIZE removes committed files from the
snapshot; another writer appends; the driver restarts (its memory of removed files is lost). After
every cleanup no file a commit of ours added is gone, no file of an uncommitted checkpoint is left,
and the table reads back exactly. The history is paged two commits at a time so that its paging
is reached.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.connectors.delta.internal import lingering, naming
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome

JOB = "job-1"


def ids_batch(ids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64())})


class LingeringCleanup(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="twophase-delta-lingering-")
        self.path = str(Path(self.root) / "table")
        self.sink = self.new_sink()
        self.next_checkpoint = 1
        self.next_id = 0
        self.expected: list[int] = []
        self.committed_files: set[str] = set()  # every file a commit of ours added
        self.uncommitted_files: set[str] = set()  # files of ours no commit will ever add

    def new_sink(self) -> DeltaSink:
        return DeltaSink("delta", DeltaSinkConfig(table_uri=self.path))

    def write(self, checkpoint_id: int, partitions: int, attempt: int) -> list[DeltaCommittable]:
        out = []
        for p in range(partitions):
            ctx = WriterContext(JOB, "delta", checkpoint_id, p, attempt, partitions)
            txn = self.sink.begin_transaction(ctx)
            self.sink.write(txn, ids_batch([self.next_id]))
            self.next_id += 1
            c = self.sink.pre_commit(txn)
            assert c is not None
            out.append(c)
        return out

    @staticmethod
    def files(committables: list[DeltaCommittable]) -> set[str]:
        return {naming.decode_add_path(a.path) for c in committables for a in c.adds}

    @rule(partitions=st.integers(1, 3), failed_attempt=st.booleans())
    def commit_checkpoint(self, partitions: int, failed_attempt: bool) -> None:
        c = self.next_checkpoint
        self.next_checkpoint += 1
        if failed_attempt:
            self.uncommitted_files |= self.files(self.write(c, partitions, attempt=0))
        first = self.next_id
        ok = self.write(c, partitions, attempt=1 if failed_attempt else 0)
        assert self.sink.commit_checkpoint(c, ok) is CommitOutcome.COMMITTED
        self.expected += range(first, self.next_id)
        self.committed_files |= self.files(ok)

    @rule(partitions=st.integers(1, 2))
    def skip_checkpoint(self, partitions: int) -> None:
        c = self.next_checkpoint
        self.next_checkpoint += 1
        self.uncommitted_files |= self.files(self.write(c, partitions, attempt=0))

    @rule()
    def optimize(self) -> None:
        if DeltaTable.is_deltatable(self.path):
            DeltaTable(self.path).optimize.compact()

    @rule()
    def another_writer_appends(self) -> None:
        foreign_id = -1 - self.next_id  # negative: never one of ours
        self.next_id += 1
        write_deltalake(self.path, pa.Table.from_batches([ids_batch([foreign_id])]), mode="append")
        self.expected.append(foreign_id)

    @rule()
    def driver_restarts(self) -> None:
        self.sink = self.new_sink()

    @rule()
    def cleanup(self) -> None:
        self.sink.abort_lingering(LingeringScope[DeltaCommittable](JOB, "delta"))
        on_disk = {str(p.relative_to(self.path)) for p in Path(self.path).rglob("*.parquet")}
        assert self.committed_files <= on_disk, f"deleted committed files: {self.committed_files - on_disk}"
        assert not self.uncommitted_files & on_disk, f"left: {self.uncommitted_files & on_disk}"

    @invariant()
    def reads_back_exactly(self) -> None:
        if DeltaTable.is_deltatable(self.path):
            ids = DeltaTable(self.path).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
            assert sorted(ids) == sorted(self.expected)

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def test_cleanup_deletes_exactly_the_files_no_commit_added() -> None:
    with mock.patch.object(lingering, "FIRST_HISTORY_PAGE", 2):
        run_state_machine_as_test(
            LingeringCleanup,
            settings=settings(max_examples=30, stateful_step_count=20, deadline=None, derandomize=True),
        )
