"""The README's "Write your own sink" example: a sink writing JSON-lines files into a local folder,
made visible by an atomic rename, checked by the conformance kit. And a sink whose commit is not
idempotent, which the kit must fail with a printed history.

Each subtask writes ``<folder>/_pending/<job>.<sink>.c<checkpoint>.p<partition>.a<attempt>.<token>.jsonl``
(the random token: attempt numbers start again at 0 in a retried stage, and a fenced driver's
attempts carry the same checkpoint id as the new driver's); pre-commit flushes and fsyncs it; commit
renames it to ``<folder>/<job>.<sink>.c<checkpoint>.p<partition>.jsonl`` (``os.replace``: atomic on
one file system). A reader reads only the folder's top level. The committed files are the sink's
own record: a repeated commit is decided from them, and ``last_committed_checkpoint`` answers the
highest checkpoint among them, so that checkpoint ids never start again below it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pytest

from twophase.sinks import (
    CommitOutcome,
    CommittableCodec,
    LingeringScope,
    TwoPhaseCommitSink,
    WriterContext,
)
from twophase.sinks.conformance import ContractViolation, SinkContract, check_sink

# -- the sink -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileCommittable:
    """A pre-committed file: where it waits and where a commit puts it."""

    pending: str
    final: str


@dataclass
class OpenFile:
    """A subtask's open transaction: its staging file (lives in the task only)."""

    path: Path
    final: Path
    out: IO[str]
    rows: int = 0


class LocalFilesSink(TwoPhaseCommitSink[OpenFile, FileCommittable]):
    """Writes each subtask's records as one JSON-lines file, visible once committed."""

    codec = CommittableCodec(FileCommittable, kind="example.local_file")

    def __init__(self, name: str, folder: str) -> None:
        self.name = name
        self.folder = Path(folder)

    def _file(self, ctx: WriterContext, *, final: bool) -> Path:
        stem = f"{ctx.job_id}.{self.name}.c{ctx.checkpoint_id}.p{ctx.partition}"
        if final:
            return self.folder / f"{stem}.jsonl"
        # attempt numbers repeat across stage retries and drivers: the token keeps names apart
        return self.folder / "_pending" / f"{stem}.a{ctx.attempt}.{uuid.uuid4().hex}.jsonl"

    # executor side
    def begin_transaction(self, ctx: WriterContext) -> OpenFile:
        path = self._file(ctx, final=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        return OpenFile(path, self._file(ctx, final=True), path.open("w", encoding="utf-8"))

    def write(self, txn: OpenFile, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            txn.out.write(json.dumps(row) + "\n")
        txn.rows += batch.num_rows

    def pre_commit(self, txn: OpenFile) -> FileCommittable | None:
        txn.out.flush()
        os.fsync(txn.out.fileno())
        txn.out.close()
        if txn.rows == 0:  # an empty transaction releases itself and yields nothing
            txn.path.unlink()
            return None
        return FileCommittable(str(txn.path), str(txn.final))

    def abort_open(self, txn: OpenFile) -> None:
        txn.out.close()
        txn.path.unlink(missing_ok=True)

    # driver side
    def commit(self, committable: FileCommittable) -> CommitOutcome:
        pending, final = Path(committable.pending), Path(committable.final)
        if pending.exists():
            os.replace(pending, final)  # atomic: readers see the whole file or nothing
            return CommitOutcome.COMMITTED
        return CommitOutcome.ALREADY_COMMITTED if final.exists() else CommitOutcome.LOST

    def abort(self, committable: FileCommittable) -> None:
        Path(committable.pending).unlink(missing_ok=True)

    def abort_lingering(self, scope: LingeringScope[FileCommittable]) -> int:
        held = {c.pending for c in scope.held}
        aborted = 0
        for path in (self.folder / "_pending").glob(f"{scope.job_id}.{scope.sink_name}.c*.jsonl"):
            checkpoint = int(path.name.split(".")[2][1:])
            if str(path) not in held and checkpoint <= scope.up_to_checkpoint:
                path.unlink(missing_ok=True)
                aborted += 1
        return aborted

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        committed = self.folder.glob(f"{job_id}.{self.name}.c*.jsonl")
        return max((int(path.name.split(".")[2][1:]) for path in committed), default=None)


# -- its conformance test -------------------------------------------------------------------------


class TestLocalFilesSink(SinkContract[Path]):
    """The kit's random lives over :class:`LocalFilesSink`, each in a fresh folder."""

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.lives = 0

    def new_system(self) -> Path:
        self.lives += 1
        return self.root / f"life-{self.lives}"

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return LocalFilesSink("files", str(system))

    def read_committed(self, system: Path) -> list[str]:
        return [json.loads(line)["key"] for f in system.glob("*.jsonl") for line in f.open(encoding="utf-8")]

    def lingering(self, system: Path) -> list[str]:
        return [p.name for p in (system / "_pending").glob("*")]

    def lose(self, system: Path, committables: Any) -> bool:
        for c in committables:  # as if someone cleaned the staging folder
            Path(c.pending).unlink(missing_ok=True)
        return True


# -- a broken sink: the kit must catch it ---------------------------------------------------------


class RenameOnlySink(LocalFilesSink):
    """Commits by renaming, without asking whether the rename already happened: a second commit
    of the same committable (a recovery, a replayed notification) fails."""

    def commit(self, committable: FileCommittable) -> CommitOutcome:
        os.replace(committable.pending, committable.final)
        return CommitOutcome.COMMITTED


class RenameOnlySinkContract(TestLocalFilesSink):
    """Not collected (no ``Test`` prefix): run by the test below."""

    lose = SinkContract.lose  # this sink cannot tell LOST either; only idempotence is shown here

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return RenameOnlySink("files", str(system))


def test_a_commit_that_is_not_idempotent_fails_with_the_history(tmp_path: Path) -> None:
    contract = RenameOnlySinkContract()
    contract.root, contract.lives = tmp_path, 0
    with pytest.raises(ContractViolation) as failed:
        check_sink(contract)
    message = str(failed.value)
    assert failed.value.check in (
        "commit is not idempotent",  # the kit's second commit raised
        "a pre-committed transaction must commit, once, whatever retries it",  # a restore's did
    )
    assert "FileNotFoundError" in message
    assert "history of this life:\n  1. the driver starts" in message
    assert "driver: commit_batch -> [COMMITTED" in message  # the default loops commit


# -- a sink that commits its batch itself (#42 item 3) --------------------------------------------


class PooledRenameSink(LocalFilesSink):
    """Overrides ``commit_batch``: renames the whole batch from a pool of threads, each file
    decided as :meth:`LocalFilesSink.commit` decides it."""

    def commit_batch(self, committables: Sequence[FileCommittable]) -> list[CommitOutcome]:
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(self.commit, committables))

    def recover_and_commit_batch(self, committables: Sequence[FileCommittable]) -> list[CommitOutcome]:
        return self.commit_batch(committables)


class TestPooledRenameSink(TestLocalFilesSink):
    """The kit's lives over a sink that overrides ``commit_batch``."""

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return PooledRenameSink("files", str(system))


class UnorderedBatchSink(PooledRenameSink):
    """Answers a batch's outcomes sorted (COMMITTED first), not in input order: the runtime would
    take one committable's outcome for another's."""

    def commit_batch(self, committables: Sequence[FileCommittable]) -> list[CommitOutcome]:
        return sorted(super().commit_batch(committables), key=lambda o: o is not CommitOutcome.COMMITTED)


class ShortBatchSink(PooledRenameSink):
    """Drops the outcome of a batch's last committable (a failed row lost on the way)."""

    def commit_batch(self, committables: Sequence[FileCommittable]) -> list[CommitOutcome]:
        return (
            super().commit_batch(committables)[:-1]
            if len(committables) > 1
            else super().commit_batch(committables)
        )


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
@pytest.mark.parametrize("broken", [UnorderedBatchSink, ShortBatchSink])
def test_a_batch_whose_outcomes_do_not_match_its_committables_fails(
    tmp_path: Path, broken: type[PooledRenameSink]
) -> None:
    class Contract(TestLocalFilesSink):
        lose = SinkContract.lose  # a partial batch shows it without losses

        def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
            return broken("files", str(system))

    contract = Contract()
    contract.root, contract.lives = tmp_path, 0
    with pytest.raises(ContractViolation) as failed:
        check_sink(contract)
    assert failed.value.check == "commit_batch answers one outcome per committable, in input order"
    assert "history of this life:" in str(failed.value)


# -- a sink that forgets its floor: the kit must catch it -----------------------------------------


class NoFloorSink(LocalFilesSink):
    """The example sink with ``last_committed_checkpoint`` forced to ``None``: when the job's
    checkpoint storage is lost, checkpoint ids start again at 1, and a new checkpoint 1 is
    committed under the name of the old one (issue #43)."""

    def last_committed_checkpoint(self, job_id: str) -> int | None:
        return None


class NoFloorSinkContract(TestLocalFilesSink):
    """Not collected (no ``Test`` prefix): run by the test below."""

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return NoFloorSink("files", str(system))


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_a_sink_without_its_checkpoint_floor_fails_naming_last_committed_checkpoint(tmp_path: Path) -> None:
    contract = NoFloorSinkContract()
    contract.root, contract.lives = tmp_path, 0
    with pytest.raises(ContractViolation) as failed:
        check_sink(contract)
    assert "last_committed_checkpoint" in str(failed.value)


# -- a sink naming its staging files by attempt number alone: the kit must catch it ---------------


class AttemptNamedSink(LocalFilesSink):
    """The example sink without the token in its staging names: a zombie of a retried stage (same
    attempt number, SPARK-24552) or a fenced driver (same checkpoint id and attempt) truncates or
    deletes the staging file of the attempt whose checkpoint commits."""

    def _file(self, ctx: WriterContext, *, final: bool) -> Path:
        stem = f"{ctx.job_id}.{self.name}.c{ctx.checkpoint_id}.p{ctx.partition}"
        return (
            self.folder / f"{stem}.jsonl"
            if final
            else self.folder / "_pending" / f"{stem}.a{ctx.attempt}.jsonl"
        )


class AttemptNamedSinkContract(TestLocalFilesSink):
    """Not collected (no ``Test`` prefix): run by the test below."""

    def make_sink(self, system: Path) -> TwoPhaseCommitSink[Any, Any]:
        return AttemptNamedSink("files", str(system))


@pytest.mark.long  # minutes of CI time: runs in `make chaos` (#45 item 7: CI under 25 minutes)
def test_staging_names_unique_by_attempt_number_alone_fail(tmp_path: Path) -> None:
    contract = AttemptNamedSinkContract()
    contract.root, contract.lives = tmp_path, 0
    with pytest.raises(ContractViolation) as failed:
        check_sink(contract)
    assert "LOST" in str(failed.value)  # the committing attempt's staging file is gone
