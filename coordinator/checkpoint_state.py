"""What a checkpoint is while the coordinator handles it: settings, states, pending and completed
checkpoints, and the result of a notification (see :mod:`twophase.coordinator.checkpoint_coordinator`).

Checkpoint states: ``PENDING ──complete──► COMPLETED``, ``PENDING ──abort──► ABORTED`` and
``PENDING ──in_doubt──► IN_DOUBT`` (publish outcome unknown); :class:`PendingCheckpoint` names and
checks each transition, and only it changes its status.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from twophase.coordinator.ack_table import key_table
from twophase.coordinator.acknowledgement import Acknowledgement
from twophase.coordinator.metadata import CheckpointKind, CheckpointMetadata, CommittableRecord, SinkSnapshot
from twophase.coordinator.payload import payload_bytes
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.subtask_lifecycle import CommittablesOf, PendingTransaction, SubtaskLifecycle
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError, IllegalTransitionError

SubtaskKey = tuple[str, int]
"""(sink name, partition)."""


class CheckpointLimitError(IllegalTransitionError):
    """A trigger while ``max_concurrent_checkpoints`` checkpoints are pending."""


class DuplicateAcknowledgementError(IllegalTransitionError):
    """A second acknowledgement of one (sink, partition) in one checkpoint; its committables are not
    kept — abort them (``Epoch.discard``) or leave them to ``abort_lingering``."""


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpointing settings.

    Attributes:
        max_concurrent_checkpoints: pending checkpoints allowed at once (≥ 1).
        checkpoint_timeout_ms: a pending checkpoint older than this is aborted by
            :meth:`CheckpointCoordinator.check_timeouts`; ``None``: never.
        retained_checkpoints: completed checkpoints kept (≥ 1); savepoints are never deleted.

    Raises:
        ConfigError: an out-of-range value.
    """

    max_concurrent_checkpoints: int = 1
    checkpoint_timeout_ms: int | None = 600_000
    retained_checkpoints: int = 1

    def __post_init__(self) -> None:
        if self.max_concurrent_checkpoints < 1:
            raise ConfigError(
                f"max_concurrent_checkpoints must be >= 1, got {self.max_concurrent_checkpoints}"
            )
        if self.checkpoint_timeout_ms is not None and self.checkpoint_timeout_ms <= 0:
            raise ConfigError(f"checkpoint_timeout_ms must be > 0, got {self.checkpoint_timeout_ms}")
        if self.retained_checkpoints < 1:
            raise ConfigError(f"retained_checkpoints must be >= 1, got {self.retained_checkpoints}")


class CheckpointStatus(enum.Enum):
    """Where one checkpoint is."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"
    IN_DOUBT = "IN_DOUBT"
    """Publishing failed with an unknown outcome: it may be durable; the restore decides."""


@dataclass
class PendingCheckpoint:
    """A triggered checkpoint and its acknowledgements (see the module docstring).

    Attributes:
        checkpoint_id: its id.
        kind: checkpoint, savepoint or final.
        triggered_ms: trigger time, ms since the epoch.
        expected: the (sink, partition) acknowledgements it needs.
        num_partitions: sink → the epoch's parallelism.
        source_position: the engine position it covers, stored in the metadata.
        end_of_input: the job reached end of input.
        expected_keys: :attr:`expected` as a (sink, partition) table, if the trigger has it already
            (the coordinator keeps it per set of participants: issue #42); else built on first use.
    """

    checkpoint_id: int
    kind: CheckpointKind
    triggered_ms: int
    expected: frozenset[SubtaskKey]
    num_partitions: Mapping[str, int]
    source_position: JsonObject | None = None
    end_of_input: bool = False
    status: CheckpointStatus = CheckpointStatus.PENDING
    acks: dict[SubtaskKey, Acknowledgement] = field(default_factory=dict)
    abort_reason: str | None = None
    expected_keys: pa.Table | None = field(default=None, repr=False, compare=False)
    _txns: dict[SubtaskKey, tuple[PendingTransaction[Any], ...]] = field(
        default_factory=dict, init=False, repr=False
    )
    """(sink, partition) → the pending transactions its acknowledgement made (the same objects
    its lifecycle holds): verification decodes each at most once, and the committer reuses it."""

    def expected_table(self) -> pa.Table:
        """:attr:`expected` as a (sink, partition) table (:func:`~twophase.coordinator.ack_table.key_table`),
        built once: what a table of acknowledgements is checked against."""
        if self.expected_keys is None:
            self.expected_keys = key_table(self.expected)
        return self.expected_keys

    def record(
        self, key: SubtaskKey, ack: Acknowledgement, transactions: Sequence[PendingTransaction[Any]]
    ) -> None:
        """Keep ``ack`` as subtask ``key``'s acknowledgement, with the pending ``transactions`` it
        made (the coordinator checked both first).

        Raises:
            IllegalTransitionError: the checkpoint is no longer pending.
        """
        self._require_pending(f"acknowledge {key[0]}[{key[1]}]")
        self.acks[key] = ack
        self._txns[key] = tuple(transactions)

    def acknowledged(self, sink: str) -> tuple[Sequence[Any], list[JsonObject]] | None:
        """What ``sink``'s subtasks acknowledged, in partition order: their committables (each
        decoded on first access, once: :class:`~twophase.coordinator.subtask_lifecycle.CommittablesOf`)
        and their in-progress states; ``None`` if none acknowledged."""
        keys = sorted(k for k in self.acks if k[0] == sink)
        if not keys:
            return None
        committables = CommittablesOf([t for k in keys for t in self._txns[k]])
        states = [st for k in keys if (st := self.acks[k].in_progress) is not None]
        return committables, states

    def complete(self) -> None:
        """PENDING → COMPLETED: its metadata is published.

        Raises:
            IllegalTransitionError: not pending.
        """
        self._require_pending("complete")
        self.status = CheckpointStatus.COMPLETED

    def mark_in_doubt(self) -> None:
        """PENDING → IN_DOUBT: its publish may or may not have landed.

        Raises:
            IllegalTransitionError: not pending.
        """
        self._require_pending("in_doubt")
        self.status = CheckpointStatus.IN_DOUBT

    def abort(self, reason: str) -> None:
        """PENDING → ABORTED, for ``reason``.

        Raises:
            IllegalTransitionError: not pending.
        """
        self._require_pending("abort")
        self.status = CheckpointStatus.ABORTED
        self.abort_reason = reason

    def _require_pending(self, transition: str) -> None:
        if self.status is not CheckpointStatus.PENDING:
            raise IllegalTransitionError(f"checkpoint {self.checkpoint_id}", self.status.value, transition)

    @property
    def missing(self) -> frozenset[SubtaskKey]:
        """Expected acknowledgements not yet received."""
        return self.expected - self.acks.keys()

    @property
    def is_fully_acknowledged(self) -> bool:
        """True once every expected acknowledgement arrived."""
        return not self.missing

    @property
    def records(self) -> int | None:
        """Records written in the epoch, if every acknowledgement said: the largest per-sink sum
        (every sink of an epoch takes the same input, so this is the epoch's record count)."""
        per_sink: dict[str, int] = {}
        for a in self.acks.values():
            if a.records is None:
                return None
            per_sink[a.sink] = per_sink.get(a.sink, 0) + a.records
        return max(per_sink.values(), default=0)


@dataclass(frozen=True)
class CompletedCheckpoint:
    """A checkpoint published to storage.

    Attributes:
        metadata: what was published.
        ref: where.
        persist_ms: time to build and publish, ms.
        records: records written in its epoch, if known.
        acknowledgements: acknowledgements it received.
        committables: sink → the committables ``metadata`` holds for it (the coordinator's pending
            transactions', each decoded on first access, once), in the order of its
            ``committables``: handed to the metadata cache so that nothing decodes the published
            payloads again.
        retired: checkpoints retention deleted after this one was published.
    """

    metadata: CheckpointMetadata
    ref: CheckpointRef
    persist_ms: float
    records: int | None
    acknowledgements: int
    committables: Mapping[str, Sequence[Any]] = field(default_factory=dict, repr=False, compare=False)
    retired: tuple[CheckpointRef, ...] = ()


@dataclass(frozen=True)
class NotifyResult:
    """What one ``notify_checkpoint_complete`` did.

    Attributes:
        checkpoint_id: the notified checkpoint.
        committed: transactions committed now (synchronous commit); with asynchronous commit,
            those handed to the committer thread.
        aborted: transactions aborted (pre-committed for later checkpoints by subtasks that closed).
        finished: subtasks that reached FINISHED with this notification.
        commit_ms: time spent, ms (submission time only when asynchronous).
        already_committed: transactions found committed earlier (synchronous commit).
    """

    checkpoint_id: int
    committed: int
    aborted: int
    finished: int
    commit_ms: float
    already_committed: int = 0


def metadata_of(
    job_id: str,
    pc: PendingCheckpoint,
    sinks: Mapping[str, TwoPhaseCommitSink[Any, Any]],
    subtasks: Mapping[str, Mapping[int, SubtaskLifecycle[Any]]],
    fully_finished: Set[str],
    parallelism: Mapping[str, int],
    now_ms: int,
) -> tuple[CheckpointMetadata, dict[str, Sequence[Any]]]:
    """What checkpoint ``pc`` publishes: per sink not fully finished, every transaction not yet
    confirmed committed with a checkpoint id ≤ ``pc``'s (its own and older pending ones, so the
    latest checkpoint alone is enough to recover), payload bytes as received (nothing decoded or
    encoded), and the in-progress state of live subtasks. A pure function of the coordinator's state
    (``subtasks``: sink → partition → lifecycle).

    Returns:
        the metadata, and per sink the same transactions' committables (decoded on first access)
        in the order of its ``committables`` (what :attr:`CompletedCheckpoint.committables` hands on).
    """
    c = pc.checkpoint_id
    snaps: dict[str, SinkSnapshot] = {}
    decoded: dict[str, Sequence[Any]] = {}
    for name, sink in sinks.items():
        if name in fully_finished:
            continue
        of_sink = subtasks.get(name, {})
        lcs = [(p, of_sink[p]) for p in sorted(of_sink)]
        # stable: partitions in order, so by checkpoint id is by (checkpoint id, partition)
        txns: list[PendingTransaction[Any]] = sorted(
            (t for _, lc in lcs for t in lc.uncommitted(c)), key=operator.attrgetter("checkpoint_id")
        )
        in_progress = {
            p: st for p, lc in lcs if lc.state.is_live and (st := lc.in_progress_for(c)) is not None
        }
        snaps[name] = SinkSnapshot(
            num_partitions=pc.num_partitions.get(name, parallelism.get(name, 0)),
            committables=tuple(
                CommittableRecord(
                    t.partition,
                    t.attempt,
                    t.payload if t.payload is not None else payload_bytes(sink.encode(t.committable)),
                    t.checkpoint_id,
                )
                for t in txns
            ),
            in_progress=in_progress,
        )
        decoded[name] = CommittablesOf(txns)
    metadata = CheckpointMetadata(
        job_id=job_id,
        checkpoint_id=c,
        kind=pc.kind,
        timestamp_ms=now_ms,
        sinks=snaps,
        source_position=pc.source_position,
        fully_finished=tuple(sorted(fully_finished)),
        end_of_input=pc.end_of_input,
    )
    return metadata, decoded
