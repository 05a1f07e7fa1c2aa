"""Model-based test of the S3 sink's Spark-staged writes (issue #44 item 4): random lives of a
staged sink on an S3 model, checked against an accounting.

Spark's side is simulated on the S3 model as the S3A magic committer leaves it (the rest is the
real sink): per write a marker with the id Spark names the files after, per task attempt a file
upload at ``part-<split>-<id>-c000.snappy.parquet`` that is either still being written when the
attempt dies (an upload with a part and no record), closed (a ``.pending`` record in the attempt's
folder), aborted by Spark (nothing left), or committed (the task's ``.pendingset``; an attempt that
dies after committing leaves it for the next attempt to overwrite, so its upload loses its record).
A write whose tasks did not all commit fails, as Spark's job does, and the epoch writes again under
a new job uuid. The driver's side is the protocol's order in little: read back what the write
staged, persist it in a checkpoint, commit it, sweep (routine, up to the committed checkpoint);
the driver may die between any two of them or midway through a commit, and a restore sweeps
every checkpoint with the retained ones held, then commits them again.

The accounting: a persisted checkpoint promises each of its files once; nothing else may become
visible. After every step no file is visible twice or unpromised; at the end (every checkpoint
committed, a restore's sweep) every promise is kept and nothing lingers: no pending upload under
the prefix, no marker, no magic folder.

``TWOPHASE_MODEL_EXAMPLES`` (default 30) and ``TWOPHASE_MODEL_SEED`` (default: derandomized).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from support.model_run import model_case
from support.s3_model import S3Model

from twophase.connectors.s3 import S3Committable, S3Sink, S3SinkConfig
from twophase.connectors.s3.internal import staged_write
from twophase.sinks.context import LingeringScope
from twophase.sinks.outcome import CommitOutcome

BUCKET = "bucket"
PREFIX = "data/out"
JOB = "job-1"
ALL = 2**62

ATTEMPT_FATES = ("mid_file", "closed", "aborted", "committed", "committed_then_died")
"""What becomes of one task attempt (see the module docstring)."""

fates = st.lists(st.sampled_from(ATTEMPT_FATES), min_size=1, max_size=3)


@dataclass
class Checkpoint:
    """A persisted checkpoint: its committables and the contents it promises."""

    checkpoint_id: int
    committables: list[S3Committable]
    promised: set[bytes] = field(default_factory=set)
    committed: bool = False


class SparkWrite:
    """One staged write as Spark's tasks and the magic committer leave it on the S3 model."""

    def __init__(self, s3: S3Model, target: staged_write.StagedTarget, file_id: str) -> None:
        self.s3, self.target, self.file_id = s3, target, file_id
        s3.put_object(Bucket=BUCKET, Key=target.marker, Body=f"{target.job_uuid}\n{file_id}\n".encode())

    def attempt(self, checkpoint_id: int, split: int, number: int, fate: str) -> bool:
        """Run attempt ``number`` of task ``split`` to ``fate``; True if the task is committed."""
        key = f"{PREFIX}/part-{split:05d}-{self.file_id}-c000.snappy.parquet"
        upload = str(self.s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"])
        body = content(checkpoint_id, split)
        part = self.s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=body)
        record = {"bucket": BUCKET, "destinationKey": key, "uploadId": upload, "etags": [part["ETag"]]}
        task = f"{self.target.folder}job-{self.target.job_uuid}/00"
        if fate == "mid_file":
            return False
        if fate == "aborted":  # Spark's abortTask: the magic committer aborts what the attempt closed
            self.s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload)
            return False
        if fate == "closed":
            pending = f"{task}/tasks/attempt_1_0001_m_{split:06d}_{number}/__base/part-{split:05d}.pending"
            self.s3.put_object(Bucket=BUCKET, Key=pending, Body=json.dumps(record).encode())
            return False
        pendingset = f"{task}/task_1_0001_m_{split:06d}.pendingset"
        self.s3.put_object(Bucket=BUCKET, Key=pendingset, Body=json.dumps({"commits": [record]}).encode())
        return fate == "committed"


def content(checkpoint_id: int, split: int) -> bytes:
    """The rows one task writes for ``checkpoint_id``: the same for every attempt of it."""
    return f"c{checkpoint_id}s{split}".encode()


class StagedWriteModel(RuleBasedStateMachine):
    """Lives of one Spark-staged S3 sink (see the module docstring)."""

    @initialize()
    def start(self) -> None:
        self.s3 = S3Model()
        config = S3SinkConfig(
            bucket=BUCKET,
            prefix=PREFIX,
            format="parquet",
            write_path="spark",
            retry_initial_backoff_ms=1,
            retry_max_backoff_ms=2,
        )
        self.sink = S3Sink("out", config, client_factory=lambda _c: cast("Any", self.s3))
        self.checkpoints: list[Checkpoint] = []
        self.next_checkpoint = 1
        self.writes = 0

    # --- the steps ---------------------------------------------------------------------------

    @rule(
        tasks=st.lists(fates, min_size=1, max_size=4),
        dies=st.sampled_from(("no", "no", "after_write", "after_persist", "mid_commit", "after_commit")),
    )
    def epoch(self, tasks: list[list[str]], dies: str) -> None:
        """Stage an epoch until a write succeeds, then persist, commit and sweep it; the driver
        may die at ``dies`` (then the restore rule runs on the next step)."""
        checkpoint_id = self.next_checkpoint
        for fates_of_task in [tasks, [["committed"]] * len(tasks)]:  # a failed write is written again
            self.writes += 1
            target = self.sink.staged_target(JOB, checkpoint_id)
            write = SparkWrite(self.s3, target, f"{self.writes:08d}-0000-4000-8000-{checkpoint_id:012d}")
            done = [
                any(write.attempt(checkpoint_id, split, n, fate) for n, fate in enumerate(attempts))
                for split, attempts in enumerate(fates_of_task)
            ]
            if all(done):
                break
        staged = self.sink.read_staged(target)
        assert sorted(staged) == list(range(len(tasks)))  # one committable per task, its record's
        if dies == "after_write":
            self.restore()
            return
        promised = {content(checkpoint_id, s) for s in range(len(tasks))}
        checkpoint = Checkpoint(checkpoint_id, [staged[s] for s in sorted(staged)], promised)
        self.checkpoints.append(checkpoint)
        self.next_checkpoint += 1
        if dies == "after_persist":
            self.restore()
            return
        if dies == "mid_commit":
            self.sink.commit_batch(checkpoint.committables[:1])
            self.restore()
            return
        self.commit(checkpoint)
        if dies == "after_commit":
            self.restore()
            return
        self.sink.abort_lingering(self.scope(checkpoint_id, routine=True))

    @rule()
    def driver_dies_between_epochs(self) -> None:
        self.restore()

    # --- the driver ------------------------------------------------------------------------------

    def scope(self, up_to: int, *, routine: bool = False) -> LingeringScope[S3Committable]:
        held = tuple(c for cp in self.checkpoints if not cp.committed for c in cp.committables)
        return LingeringScope(JOB, "out", held=held, up_to_checkpoint=up_to, routine=routine)

    def commit(self, checkpoint: Checkpoint) -> None:
        outcomes = self.sink.commit_batch(checkpoint.committables)
        assert set(outcomes) <= {CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED}, outcomes
        checkpoint.committed = True

    def restore(self) -> None:
        """A new driver: sweep every checkpoint with the uncommitted ones held, then commit them."""
        self.sink.abort_lingering(self.scope(ALL))
        for checkpoint in self.checkpoints:
            if not checkpoint.committed:
                self.commit(checkpoint)

    # --- the accounting --------------------------------------------------------------------------

    def visible(self) -> list[bytes]:
        return [b for (bucket, key), b in self.s3.objects.items() if key.startswith(f"{PREFIX}/part-")]

    @invariant()
    def nothing_visible_twice_or_unpromised(self) -> None:
        if not hasattr(self, "s3"):
            return
        seen = self.visible()
        promised = {b for cp in self.checkpoints for b in cp.promised}
        assert len(seen) == len(set(seen)), sorted(seen)
        assert set(seen) <= promised, sorted(set(seen) - promised)

    def teardown(self) -> None:
        if not hasattr(self, "s3"):
            return
        self.restore()
        self.sink.abort_lingering(self.scope(ALL))
        assert sorted(self.visible()) == sorted(b for cp in self.checkpoints for b in cp.promised)
        lingering = [u.key for u in self.s3.uploads.values() if u.key.startswith(f"{PREFIX}/")]
        assert lingering == [], lingering
        records = [k for k in self.s3.object_keys() if "/staged/" in k or "__magic_job-" in k]
        assert records == [], records


test_staged_write_model = model_case(StagedWriteModel, 12)
