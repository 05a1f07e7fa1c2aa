"""Operator actions on a job that is not running: what its checkpoints hold, recommit, abort lingering.

Built on public APIs only: checkpoint storage (``list_checkpoints``/``load``), the sinks'
``decode``, ``recover_and_commit`` / ``recover_and_commit_checkpoint`` and ``abort_lingering``.
The rules are the runtime's restore rules (DESIGN.md §6):

- **held** is every committable and in-progress state of every retained checkpoint and savepoint
  (:func:`lingering_scope`): nothing a durable checkpoint still needs is ever aborted;
- **recommit** commits the latest checkpoint's committables (:func:`recommit_latest`), each
  per-committable sink's one by one, a :class:`~twophase.sinks.api.CheckpointCommitSink`'s with
  one call per checkpoint, in checkpoint order; sinks the checkpoint flags fully finished are
  skipped; a transaction the external system lost fails loudly;
- **abort** calls each sink's ``abort_lingering`` with that scope (:func:`abort_lingering`).

Never run these while the job runs: its open transactions are in no checkpoint yet and would be
aborted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.run import lingering
from twophase.coordinator.run.recovery import recovery_transactions
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import LingeringScope
from twophase.sinks.errors import ConfigError, JobError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]

COMMIT_ATTEMPTS = 8
"""Attempts of one recommit that answers RETRY (or cannot reach the system) before giving up."""


@dataclass(frozen=True)
class JobCheckpoints:
    """A job's retained checkpoints and savepoints, loaded.

    Attributes:
        job_id: the job.
        refs: the retained checkpoints and savepoints, ascending by id.
        metas: their metadata, in the same order.
        committed: the latest one carries its committed marker (nothing left to re-commit).
    """

    job_id: str
    refs: tuple[CheckpointRef, ...]
    metas: tuple[CheckpointMetadata, ...]
    committed: bool = False

    @classmethod
    def load(cls, storage: CheckpointStorage) -> JobCheckpoints:
        """List and read every retained checkpoint and savepoint of ``storage``'s job.

        Raises:
            CorruptCheckpointError: one is unreadable: what it holds is unknown, so nothing may be
                aborted (no silent skipping).
            CheckpointStorageError: the storage cannot be listed.
        """
        refs = tuple(storage.list_checkpoints())
        committed = bool(refs) and storage.is_committed(refs[-1].location)
        return cls(storage.job_id, refs, tuple(storage.load(ref) for ref in refs), committed)

    @property
    def latest(self) -> CheckpointMetadata | None:
        """The newest checkpoint or savepoint (the one a restart restores), or ``None``."""
        return self.metas[-1] if self.metas else None


def lingering_scope(job_id: str, sink: AnySink, metas: Sequence[CheckpointMetadata]) -> LingeringScope[Any]:
    """What ``sink``'s ``abort_lingering`` must keep: everything any of ``metas`` holds for it (the
    runtime's own rule, :func:`twophase.coordinator.run.lingering.held_by`); every checkpoint id in scope.

    Raises:
        CommittableDecodeError: a held committable cannot be decoded: nothing may be aborted then.
    """
    return lingering.lingering_scope(
        job_id, sink, lingering.held_by(sink.name, metas), lingering.ALL_CHECKPOINTS
    )


def sinks_by_name(sinks: Sequence[AnySink]) -> dict[str, AnySink]:
    """``{name: sink}``.

    Raises:
        ConfigError: two sinks share a name.
    """
    out: dict[str, AnySink] = {}
    for sink in sinks:
        if sink.name in out:
            raise ConfigError(f"two sinks are named {sink.name!r}; sink names are unique within a job")
        out[sink.name] = sink
    return out


@dataclass
class SinkRecommit:
    """What :func:`recommit_latest` did for one sink.

    Attributes:
        committed: transactions committed now.
        already_committed: transactions that had been committed before.
        checkpoints: the checkpoint ids the committables were pre-committed for, ascending.
    """

    committed: int = 0
    already_committed: int = 0
    checkpoints: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"committed", "already_committed", "checkpoints"}``."""
        return {
            "committed": self.committed,
            "already_committed": self.already_committed,
            "checkpoints": self.checkpoints,
        }


@dataclass(frozen=True)
class RecommitReport:
    """What :func:`recommit_latest` did.

    Attributes:
        checkpoint_id: the checkpoint whose committables were recommitted (``None``: no checkpoint).
        sinks: sink name → what was committed.
        skipped: sinks the checkpoint flags fully finished (nothing left to commit).
    """

    checkpoint_id: int | None
    sinks: Mapping[str, SinkRecommit]
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"checkpoint_id", "sinks": {name: {...}}, "skipped"}``."""
        return {
            "checkpoint_id": self.checkpoint_id,
            "sinks": {name: r.to_json() for name, r in self.sinks.items()},
            "skipped": list(self.skipped),
        }


def recommit_latest(job_id: str, sinks: Sequence[AnySink], checkpoints: JobCheckpoints) -> RecommitReport:
    """Commit the latest checkpoint's committables without running the job (idempotent): the
    runtime's restore rules (:func:`twophase.coordinator.run.recovery.recovery_transactions`), through
    the runtime's committer (retries with backoff, LOST fails loudly).

    Raises:
        JobError: the checkpoint holds committables of sinks not in ``sinks`` (recommitting part of a
            checkpoint is refused).
        TransactionLostError: a transaction was lost; CommitFailedError: a commit failed.
        CommittableDecodeError: a committable cannot be decoded.
    """
    by_name = sinks_by_name(sinks)
    meta = checkpoints.latest
    if meta is None:
        return RecommitReport(None, {})
    if checkpoints.committed:  # its committed marker: everything it holds is committed already
        return RecommitReport(meta.checkpoint_id, {})
    finished = set(meta.fully_finished)
    unknown = sorted(
        n for n, s in meta.sinks.items() if n not in by_name and n not in finished and s.committables
    )
    if unknown:
        raise JobError(
            f"checkpoint {meta.checkpoint_id} of job {job_id!r} holds committables of sinks {unknown} that "
            f"the given sinks {sorted(by_name)} do not include; refusing to recommit part of a checkpoint"
        )
    report: dict[str, SinkRecommit] = {}
    every = recovery_transactions(meta, by_name, 0)
    for name in dict.fromkeys(t.sink_name for t in every):
        done = report[name] = SinkRecommit()
        txns = [t for t in every if t.sink_name == name]
        done.checkpoints = sorted({t.checkpoint_id for t in txns})
        committer = CommitterOperator(job_id, by_name, CommitPolicy(max_attempts=COMMIT_ATTEMPTS))
        committer.commit_all(txns, recovery=True, cancellable=False)
        metrics = committer.metrics
        done.committed, done.already_committed = metrics.committed, metrics.already_committed
        log_event(
            log,
            logging.INFO,
            "recommitted",
            job=job_id,
            sink=name,
            checkpoint=meta.checkpoint_id,
            committed=done.committed,
            already_committed=done.already_committed,
        )
    skipped = tuple(sorted(finished & set(meta.sinks)))
    return RecommitReport(meta.checkpoint_id, report, skipped)


def abort_lingering(
    job_id: str, sinks: Sequence[AnySink], checkpoints: JobCheckpoints, *, force: bool = False
) -> dict[str, int]:
    """Each sink's ``abort_lingering`` with everything the retained checkpoints hold kept.

    Args:
        job_id: the job whose transactions are aborted (never another job's).
        sinks: the job's sinks.
        checkpoints: the job's retained checkpoints and savepoints.
        force: also abort when the job has no checkpoint at all (e.g. it crashed before its first
            one). Without it that is refused: a wrong ``--checkpoint-dir`` or job id looks the same.

    Returns:
        sink name → transactions (uploads, files) aborted.

    Raises:
        ConfigError: no checkpoint and not ``force``; two sinks share a name.
        CommittableDecodeError: a held committable cannot be decoded (nothing is aborted).
    """
    by_name = sinks_by_name(sinks)
    if not checkpoints.metas and not force:
        raise ConfigError(
            f"job {job_id!r} has no checkpoint in this checkpoint directory, so nothing tells what a "
            "durable checkpoint still needs; check --checkpoint-dir and the job id, or pass --force "
            "to abort everything the job left (only for a job that never completed a checkpoint)"
        )
    # every scope first: a decode error must stop the command before anything is aborted
    scopes = {name: lingering_scope(job_id, sink, checkpoints.metas) for name, sink in by_name.items()}
    aborted: dict[str, int] = {}
    for name, sink in by_name.items():
        aborted[name] = sink.abort_lingering(scopes[name])
        log_event(log, logging.INFO, "aborted lingering", job=job_id, sink=name, count=aborted[name])
    return aborted
