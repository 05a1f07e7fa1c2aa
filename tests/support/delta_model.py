"""A model of a Delta table's log and a checkpoint-commit sink on it, for model-based tests.

It keeps what Delta's exactly-once rests on (PROTOCOL.md, "Add" actions and "Transaction
Identifiers"): data files are invisible until a commit's Add references them; a commit is one new
version holding every Add of one checkpoint plus ``txn(appId, version)``; the table records the
highest ``txn`` version per appId, so a commit whose version is not above it is ALREADY_COMMITTED;
a concurrent writer makes a commit conflict (the committer re-reads and retries). The real Delta
connector (deltalake on a real log) has its own tests; this model is fast enough for thousands of
examples.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from twophase.sinks.api import CheckpointCommitSink
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome, CommittableSize


@dataclass(frozen=True)
class ModelDeltaFile:
    """A pre-committed data file: its name and the checkpoint it was written for."""

    app_id: str
    checkpoint_id: int
    name: str
    records: int


CODEC: CommittableCodec[ModelDeltaFile] = CommittableCodec(ModelDeltaFile, "test.delta_model", version=1)


@dataclass
class DeltaLogModel:
    """A table: data files, committed versions, ``txn`` versions per appId."""

    files: dict[str, list[str]] = field(default_factory=dict)
    """Every data file written (name → records), referenced or not."""
    versions: list[tuple[tuple[str, ...], dict[str, int]]] = field(default_factory=list)
    """Each commit: (files added, txn versions set)."""
    txn: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    """Commits of another writer about to win the next races (each makes one commit conflict)."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Serialises commits, as the log's put-if-absent of the next version does."""

    def referenced(self) -> set[str]:
        """Files some version added (this model never removes)."""
        return {f for adds, _ in self.versions for f in adds}

    def committed_records(self) -> list[str]:
        """Records a reader of the table sees."""
        return sorted(r for f in self.referenced() for r in self.files[f])


@dataclass
class _Txn:
    ctx: WriterContext
    records: list[str] = field(default_factory=list)


class ModelDeltaSink(CheckpointCommitSink[_Txn, ModelDeltaFile]):
    """One Delta commit per checkpoint with ``txn(appId=<job>:<sink>, version=c)``, on :class:`DeltaLogModel`.

    Args:
        name: the sink's name.
        log: the table.
        column: the string column written.
    """

    def __init__(self, name: str, log: DeltaLogModel, column: str = "key") -> None:
        self.name = name
        self.log = log
        self.column = column
        self.codec = CODEC
        self._ids = itertools.count(1)

    def begin_transaction(self, ctx: WriterContext) -> _Txn:
        return _Txn(ctx)

    def write(self, txn: _Txn, batch: pa.RecordBatch) -> None:
        txn.records.extend(str(v) for v in batch.column(self.column).to_pylist())

    def pre_commit(self, txn: _Txn) -> ModelDeltaFile | None:
        if not txn.records:
            return None
        c = txn.ctx
        name = f"{c.job_id}:{self.name}/part-{c.partition}-{c.checkpoint_id}-a{c.attempt}-{next(self._ids)}"
        self.log.files[name] = list(txn.records)
        return ModelDeltaFile(f"{c.job_id}:{self.name}", c.checkpoint_id, name, len(txn.records))

    def commit(self, committable: ModelDeltaFile) -> CommitOutcome:
        return self.commit_checkpoint(committable.checkpoint_id, [committable])

    def commit_checkpoint(self, checkpoint_id: int, committables: Sequence[ModelDeltaFile]) -> CommitOutcome:
        with self.log.lock:
            return self._commit(checkpoint_id, committables)

    def _commit(self, checkpoint_id: int, committables: Sequence[ModelDeltaFile]) -> CommitOutcome:
        app = committables[0].app_id
        if self.log.txn.get(app, 0) >= checkpoint_id:
            return CommitOutcome.ALREADY_COMMITTED
        if any(c.name not in self.log.files for c in committables):
            return CommitOutcome.LOST
        if self.log.conflicts:
            self.log.conflicts -= 1
            self.log.versions.append(((), {}))  # another writer's append won the race
            return CommitOutcome.RETRY  # the committer re-reads and tries again
        self.log.versions.append((tuple(c.name for c in committables), {app: checkpoint_id}))
        self.log.txn[app] = checkpoint_id
        return CommitOutcome.COMMITTED

    def abort(self, committable: ModelDeltaFile) -> None:
        if committable.name not in self.log.referenced():
            self.log.files.pop(committable.name, None)

    def abort_lingering(self, scope: LingeringScope[ModelDeltaFile]) -> int:
        """Deletes this job's unreferenced files; puts off every routine cleanup, the most a sink
        may (``LingeringScope.routine``, as the real Delta sink's schedule can). The model's end
        check (no lingering file) then holds only if every end of a run makes a cleanup that is
        not routine."""
        if scope.routine:
            return 0
        held = {c.name for c in scope.held}
        referenced = self.log.referenced()
        prefix = f"{scope.job_id}:{self.name}/part-"
        mine = [
            f
            for f in self.log.files
            if f.startswith(prefix)
            and f not in referenced
            and f not in held
            and int(f[len(prefix) :].split("-")[1]) <= scope.up_to_checkpoint  # newer: maybe running
        ]
        for f in mine:
            del self.log.files[f]
        return len(mine)

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        return self.log.txn.get(f"{job_id}:{self.name}")

    def measure(self, committable: ModelDeltaFile) -> CommittableSize:
        return CommittableSize(records=committable.records)

    def unreferenced_files(self, job_id: str) -> list[str]:
        """Data files of this job and sink that no commit references (lingering)."""
        referenced = self.log.referenced()
        return sorted(
            f for f in self.log.files if f.startswith(f"{job_id}:{self.name}/") and f not in referenced
        )
