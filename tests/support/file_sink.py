"""A two-phase-commit sink writing JSON-lines files: the reference sink of the Spark suites.

It has real 2PC semantics on a POSIX file system, so the runtime's guarantees can be tested on
Spark without external services:

- ``begin_transaction`` opens a staging file
  ``<root>/_staging/<job>/<sink>/c<checkpoint>-p<partition>-a<attempt>-<uuid>.jsonl``;
- ``pre_commit`` flushes and fsyncs it; the committable names the staging and the final file;
- ``commit`` renames it into ``<root>/data/`` (atomic); a missing staging file whose final file
  exists is ``ALREADY_COMMITTED``, both missing is ``LOST``;
- ``abort`` / ``abort_lingering`` delete staging files that no checkpoint holds.

A test may run code once ``abort_lingering`` is done (:attr:`JsonLinesFileSink.after_abort_lingering`):
in a sweep of several sinks, after this sink's cleanup and before the next sink's: where the
two-drivers model starts a newer driver inside a stale driver's sweep (issue #42).

:func:`read_committed` reads back exactly what is visible to a downstream reader.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import LingeringScope, WriterContext
from twophase.sinks.outcome import CommitOutcome

_STAGING = re.compile(r"^c(\d+)-p(\d+)-a(\d+)-[0-9a-f]{32}\.jsonl$")


@dataclass(frozen=True)
class FileCommittable:
    """A pre-committed staging file: its path, where commit moves it, and its record count."""

    staging: str
    final: str
    records: int


@dataclass
class _OpenFile:
    ctx: WriterContext
    staging: Path
    handle: IO[str]
    records: int = 0


class JsonLinesFileSink(TwoPhaseCommitSink[_OpenFile, FileCommittable]):
    """Writes every record as one JSON line; visible only after commit renames the file.

    Args:
        name: the sink's name within the job.
        root: the output folder (created on demand).

    Attributes:
        after_abort_lingering: test hook called with the scope at the end of each
            ``abort_lingering``, once this sink's staging files are deleted (``None``: nothing).
    """

    codec = CommittableCodec(FileCommittable, kind="test.jsonl-file", version=1)

    def __init__(self, name: str, root: str | Path) -> None:
        self.name = name
        self.root = str(root)
        self.after_abort_lingering: Callable[[LingeringScope[FileCommittable]], None] | None = None

    def _staging_dir(self, job_id: str) -> Path:
        return Path(self.root) / "_staging" / job_id / self.name

    def begin_transaction(self, ctx: WriterContext) -> _OpenFile:
        staging_dir = self._staging_dir(ctx.job_id)
        staging_dir.mkdir(parents=True, exist_ok=True)
        name = f"c{ctx.checkpoint_id}-p{ctx.partition}-a{ctx.attempt}-{uuid.uuid4().hex}.jsonl"
        path = staging_dir / name
        return _OpenFile(ctx=ctx, staging=path, handle=path.open("w", encoding="utf-8"))

    def write(self, txn: _OpenFile, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            txn.handle.write(json.dumps(row, default=str, sort_keys=True))
            txn.handle.write("\n")
        txn.records += batch.num_rows

    def pre_commit(self, txn: _OpenFile) -> FileCommittable | None:
        txn.handle.flush()
        os.fsync(txn.handle.fileno())
        txn.handle.close()
        if txn.records == 0:
            txn.staging.unlink(missing_ok=True)
            return None
        final = Path(self.root) / "data" / self.name / txn.staging.name
        return FileCommittable(staging=str(txn.staging), final=str(final), records=txn.records)

    def abort_open(self, txn: _OpenFile) -> None:
        if not txn.handle.closed:
            txn.handle.close()
        txn.staging.unlink(missing_ok=True)

    def commit(self, committable: FileCommittable) -> CommitOutcome:
        staging, final = Path(committable.staging), Path(committable.final)
        if staging.exists():
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, final)
            return CommitOutcome.COMMITTED
        if final.exists():
            return CommitOutcome.ALREADY_COMMITTED
        return CommitOutcome.LOST

    def abort(self, committable: FileCommittable) -> None:
        Path(committable.staging).unlink(missing_ok=True)

    def abort_lingering(self, scope: LingeringScope[FileCommittable]) -> int:
        held = {Path(c.staging).name for c in scope.held}
        aborted = 0
        staging_dir = self._staging_dir(scope.job_id)
        for path in staging_dir.iterdir() if staging_dir.exists() else ():
            m = _STAGING.match(path.name)
            if m is None or path.name in held or int(m.group(1)) > scope.up_to_checkpoint:
                continue
            path.unlink(missing_ok=True)
            aborted += 1
        if self.after_abort_lingering is not None:
            self.after_abort_lingering(scope)
        return aborted


def read_committed(root: str | Path, sink_name: str) -> list[dict[str, Any]]:
    """Every record committed by ``sink_name`` under ``root``, in file order."""
    out: list[dict[str, Any]] = []
    data = Path(root) / "data" / sink_name
    if not data.exists():
        return out
    for path in sorted(data.iterdir()):
        with path.open(encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out


def staging_files(root: str | Path, job_id: str, sink_name: str) -> list[str]:
    """Staging files still present (lingering state): should be empty after a clean finish."""
    d = Path(root) / "_staging" / job_id / sink_name
    return sorted(p.name for p in d.iterdir()) if d.exists() else []
