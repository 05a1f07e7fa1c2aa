"""Stateful test of the Delta sink's re-commit after a restore, on a real local table (issue #43).

The restore re-commits the newest checkpoint as if its ``_committed`` marker had been refused
(committed or not, the sink alone must tell), while the table's maintenance runs between steps:
a txn written already past ``delta.setTransactionRetentionDuration`` (the driver stayed down past
it), OPTIMIZE, VACUUM with no retention, log cleanup with no ``delta.logRetentionDuration``, and
another writer appending; the committer itself writes a log checkpoint every third version and
cleans the log after it, as it does every ``delta.checkpointInterval`` versions, and no commit
of it may clean the log without writing one (delta-rs's own post-commit hook would, unseen).
After every step every id is in the table exactly once, read by pyarrow from the snapshot's
files (not the writer), or the sink failed loudly by name: ``FATAL`` naming both table
properties, only where the txn expired and the log was cleaned, or ``LOST`` for a checkpoint
never committed whose files VACUUM deleted.

The history is paged two commits at a time, and the driver's and executors' clocks are one, so
the clock-skew allowance is 0.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from twophase.connectors.delta import DeltaCommittable, DeltaSink, DeltaSinkConfig
from twophase.connectors.delta.internal import committer, lingering
from twophase.sinks.context import WriterContext
from twophase.sinks.outcome import CommitOutcome

JOB = "job-1"
TABLE_PROPERTIES = {
    "delta.setTransactionRetentionDuration": "interval 1 hour",
    # cleaned by the log_cleanup rule, and by the committer after each log checkpoint it writes
    "delta.logRetentionDuration": "interval 0 seconds",
    "delta.checkpointInterval": "3",  # the committer's own log checkpoints, within a history's reach
}
PAST_RETENTION_S = 2 * 3600


def ids_batch(ids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64())})


class Records(logging.Handler):
    """Keeps the committer's ERROR lines."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Recommit(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="twophase-delta-recommit-")
        self.path = str(Path(self.root) / "table")
        self.sink = self.new_sink()
        self.errors = Records()
        logging.getLogger(committer.__name__).addHandler(self.errors)
        self.next_checkpoint = 1
        self.next_id = 0
        self.expected: list[int] = []
        self.newest: tuple[int, list[DeltaCommittable], list[int]] | None = (
            None  # checkpoint, committables, ids
        )
        self.pending = False  # the newest checkpoint was written but its commit never ran
        self.vacuumed_since_pending = False
        self.txn_expired = False  # the newest commit's txn is already past the retention
        self.log_cleaned = False
        self.log_checkpoint: int | None = None  # the newest log checkpoint's version seen
        self.oldest_log_entry: int | None = None  # the oldest JSON commit in the log, as last seen
        self.failed = False  # the sink failed loudly: the job stops committing

    def new_sink(self) -> DeltaSink:
        return DeltaSink("delta", DeltaSinkConfig(table_uri=self.path, table_configuration=TABLE_PROPERTIES))

    def write(self, partitions: int) -> tuple[int, list[DeltaCommittable], list[int]]:
        checkpoint_id = self.next_checkpoint
        self.next_checkpoint += 1
        out, ids = [], []
        for p in range(partitions):
            ctx = WriterContext(JOB, "delta", checkpoint_id, p, 0, partitions)
            txn = self.sink.begin_transaction(ctx)
            self.sink.write(txn, ids_batch([self.next_id]))
            ids.append(self.next_id)
            self.next_id += 1
            c = self.sink.pre_commit(txn)
            assert c is not None
            out.append(c)
        return checkpoint_id, out, ids

    def loud(self, outcome: CommitOutcome) -> None:
        """A FATAL is allowed only where the table lost the evidence, and must name why."""
        assert outcome is CommitOutcome.FATAL, outcome
        assert self.txn_expired and self.log_cleaned, "FATAL while the table still holds the evidence"
        named = [line for line in self.errors.lines if "delta.setTransactionRetentionDuration" in line]
        assert named and "delta.logRetentionDuration" in named[-1], self.errors.lines
        self.failed = True

    def newest_log_checkpoint(self) -> int | None:
        last = Path(self.path, "_delta_log", "_last_checkpoint")
        return int(json.loads(last.read_text())["version"]) if last.exists() else None

    def oldest_json(self) -> int | None:
        versions = [int(p.name.split(".")[0]) for p in Path(self.path, "_delta_log").glob("*.json")]
        return min(versions, default=None)

    def saw_log_cleaned(self) -> None:
        """After another writer's or maintenance's commits: the log cleaned if its oldest entry
        moved."""
        oldest = self.oldest_json()
        if self.oldest_log_entry is not None and oldest != self.oldest_log_entry:
            self.log_cleaned = True
        self.oldest_log_entry = oldest

    def committed(self, outcome: CommitOutcome, ids: list[int], expire_txn: bool) -> None:
        newest, oldest = self.newest_log_checkpoint(), self.oldest_json()
        if newest != self.log_checkpoint:  # the committer wrote one, and cleaned the log after it
            self.log_checkpoint = newest
            self.log_cleaned = True
            event("the committer wrote a log checkpoint and cleaned the log")
        elif self.oldest_log_entry is not None:  # delta-rs's own hook would clean it at every commit
            assert oldest == self.oldest_log_entry, "a commit cleaned the log without a log checkpoint"
        self.oldest_log_entry = oldest
        if outcome is CommitOutcome.COMMITTED:
            self.expected += ids
            self.pending = False
            self.txn_expired = expire_txn
        else:
            self.loud(outcome)

    @precondition(lambda self: not self.failed and not self.pending)
    @rule(partitions=st.integers(2, 3), commits=st.booleans(), expire_txn=st.booleans())
    def checkpoint(self, partitions: int, commits: bool, expire_txn: bool) -> None:
        """Write a checkpoint (two files at least, so that OPTIMIZE compacts) and commit it, its
        txn already past the retention if ``expire_txn`` (the driver then stays down); or the
        driver dies before the commit (``commits`` false)."""
        self.newest = checkpoint_id, committables, ids = self.write(partitions)
        self.pending = True
        self.vacuumed_since_pending = False
        if not commits:
            return
        if expire_txn:
            with mock.patch("time.time", return_value=time.time() - PAST_RETENTION_S):
                outcome = self.sink.commit_checkpoint(checkpoint_id, committables)
        else:
            outcome = self.sink.commit_checkpoint(checkpoint_id, committables)
        self.committed(outcome, ids, expire_txn)

    @precondition(lambda self: not self.failed and self.newest is not None)
    @rule()
    def restore_recommits_the_newest_checkpoint(self) -> None:
        """A new driver; the marker was refused, so the newest checkpoint is committed again."""
        assert self.newest is not None
        checkpoint_id, committables, ids = self.newest
        self.sink = self.new_sink()
        outcome = self.sink.recover_and_commit_checkpoint(checkpoint_id, committables)
        event(f"re-commit of a {'pending' if self.pending else 'committed'} checkpoint: {outcome.value}")
        if not self.pending:
            if outcome is not CommitOutcome.ALREADY_COMMITTED:
                self.loud(outcome)
        elif outcome is CommitOutcome.LOST:
            assert self.vacuumed_since_pending, "LOST while the checkpoint's files were there"
            self.pending = False
            self.newest = None
        else:
            self.committed(outcome, ids, expire_txn=False)

    @rule(
        steps=st.lists(
            st.sampled_from(["optimize", "vacuum", "log_checkpoint", "log_cleanup"]), min_size=1, max_size=3
        )
    )
    def maintenance(self, steps: list[str]) -> None:
        """OPTIMIZE; VACUUM with no retention; a log checkpoint alone; a log checkpoint, then log
        cleanup with no retention."""
        if not DeltaTable.is_deltatable(self.path):
            return
        for step in steps:
            table = DeltaTable(self.path)
            if step == "optimize":
                table.optimize.compact()
            elif step == "vacuum":
                # full: every file no commit references, as Spark's VACUUM does, not only removed ones
                table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=True)
                self.vacuumed_since_pending = True
            elif step == "log_checkpoint":  # as a maintenance job may write one, without cleanup
                table.create_checkpoint()
                self.log_checkpoint = self.newest_log_checkpoint()
            else:
                table.create_checkpoint()
                table.cleanup_metadata()
                self.log_cleaned = True
                self.log_checkpoint = self.newest_log_checkpoint()
        self.saw_log_cleaned()  # by the cleanup step, or by OPTIMIZE's own post-commit hook

    @rule()
    def another_writer_appends(self) -> None:
        foreign_id = -1 - self.next_id  # negative: never one of ours
        self.next_id += 1
        write_deltalake(self.path, pa.Table.from_batches([ids_batch([foreign_id])]), mode="append")
        self.expected.append(foreign_id)
        self.log_checkpoint = self.newest_log_checkpoint()  # its post-commit hook may write one
        self.saw_log_cleaned()  # and clean the log after it

    @invariant()
    def every_id_exactly_once(self) -> None:
        if DeltaTable.is_deltatable(self.path):
            uris = DeltaTable(self.path).file_uris()
            ids = ds.dataset(uris, format="parquet").to_table(columns=["id"]).column("id").to_pylist()
            assert sorted(ids) == sorted(self.expected)

    def teardown(self) -> None:
        logging.getLogger(committer.__name__).removeHandler(self.errors)
        shutil.rmtree(self.root, ignore_errors=True)


def test_a_restore_recommits_exactly_once_whatever_the_maintenance() -> None:
    with (
        mock.patch.object(lingering, "FIRST_HISTORY_PAGE", 2),
        mock.patch.object(lingering, "CLOCK_SKEW_ALLOWANCE_MS", 0),
    ):
        run_state_machine_as_test(
            Recommit,
            settings=settings(max_examples=100, stateful_step_count=20, deadline=None, derandomize=True),
        )
