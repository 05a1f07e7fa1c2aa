"""The checkpoint coordinator: triggers checkpoints, collects acknowledgements, persists, notifies.

One instance per job run (a restore builds a new one). Protocol (Flink's ``CheckpointCoordinator``
and ``TwoPhaseCommitSinkFunction``, FLIP-147, DESIGN.md §5):

1. :meth:`~CheckpointCoordinator.trigger` opens a pending checkpoint with the next id and the
   acknowledgements it expects (one per participating sink and partition); at most
   ``max_concurrent_checkpoints`` may be pending (no queueing: the caller decides).
2. :meth:`~CheckpointCoordinator.acknowledge` records one subtask's committable and in-progress
   state; a duplicate is refused and not kept; a late one for an aborted checkpoint is aborted.
3. :meth:`~CheckpointCoordinator.complete` publishes the metadata atomically, THEN the checkpoint
   counts as complete; checkpoints complete in trigger order. The metadata holds every
   transaction not yet confirmed committed, so the latest checkpoint alone recovers the job.
4. :meth:`~CheckpointCoordinator.notify_checkpoint_complete` commits every pending transaction ≤ c,
   in order, on every live subtask (Flink's rule: subsumed, late and out-of-order notifications);
   a subtask waiting for its final checkpoint closes on the first notification of a checkpoint
   triggered after its finish() (FLIP-147).
5. :meth:`~CheckpointCoordinator.abort_checkpoint` aborts the checkpoint and every newer pending
   one (their epochs build on its data) and their pre-committed transactions. Only a publish
   proven not published (``CheckpointNotPublishedError``) aborts its checkpoint; any other error
   is an unknown outcome and aborts nothing of its own: its transactions stay in doubt.

Sinks whose subtasks all FINISHED with nothing left to commit are flagged fully finished (FLIP-147).
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pac

from twophase.coordinator.checkpoint.checkpoint_state import (
    CheckpointConfig,
    CheckpointLimitError,
    CompletedCheckpoint,
    DuplicateAcknowledgementError,
    NotifyResult,
    PendingCheckpoint,
    SubtaskKey,
    metadata_of,
    pending_columns,
)
from twophase.coordinator.checkpoint.committed_marker import CommittedMarker
from twophase.coordinator.checkpoint.driver_fence import DriverFence
from twophase.coordinator.commit.commit_calls import NamedCall, TxnCall
from twophase.coordinator.commit.committer_operator import CommitterOperator
from twophase.coordinator.state import ack_table, collector
from twophase.coordinator.state.acknowledgement import ACK_SCHEMA, Acknowledgement, acknowledgements_in
from twophase.coordinator.state.clock import Clock, system_clock_ms
from twophase.coordinator.state.faults import fault_point
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.state.payload import decode_payload
from twophase.coordinator.state.subtask_lifecycle import (
    LedgerBlock,
    PendingTransaction,
    SinkLedger,
    SubtaskLifecycle,
    SubtaskState,
    TxnStatus,
    confirm_calls,
)
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    ConfigError,
    DriverFencedError,
    IllegalTransitionError,
)
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


_CHECKPOINT_ID = operator.attrgetter("checkpoint_id")
_CHECKPOINT_PARTITION = operator.attrgetter("checkpoint_id", "partition")
_PARTITION_ATTEMPT = operator.attrgetter("partition", "attempt")


def codec_header(sink: AnySink) -> ack_table.CodecHeader | None:
    """The payload header ``sink``'s codec reads (kind, versions), checked for every payload at
    intake against the header its executor stamped; ``None`` for a sink that overrides ``decode``
    (it alone says what it reads: its payloads are not checked at intake, and decoded at commit)."""
    codec = getattr(sink, "codec", None)
    if type(sink).decode is not TwoPhaseCommitSink.decode or not isinstance(codec, CommittableCodec):
        return None
    return ack_table.CodecHeader(codec.kind, codec.readable_versions)


class ExpectedSubtasks(Set[SubtaskKey]):
    """The (sink, partition) pairs of ``parts_of`` (sink → its partitions) as a read-only set,
    without a tuple per pair (issue #42: a frozenset of them made 3·10⁵ tuples at a run's first
    trigger at 10⁵ × 3): membership is a lookup in the sink's own partition set, the size a sum;
    iterating makes the pairs as it goes, and set operations give frozensets.

    Args:
        parts_of: sink → its partitions (kept; never changed afterwards: the coordinator's own).
    """

    __slots__ = ("_len", "_parts")

    def __init__(self, parts_of: Mapping[str, frozenset[int]]) -> None:
        self._parts = parts_of
        self._len = sum(map(len, parts_of.values()))

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        parts = self._parts.get(key[0])
        return parts is not None and key[1] in parts

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[SubtaskKey]:
        return ((name, p) for name, parts in self._parts.items() for p in parts)

    def __repr__(self) -> str:
        return f"ExpectedSubtasks({ {name: len(parts) for name, parts in self._parts.items()} })"


@dataclass(frozen=True)
class TableIntake:
    """What :meth:`CheckpointCoordinator.acknowledge_table` did with one table of acknowledgements.

    Attributes:
        recorded: acknowledgements recorded (0 when the checkpoint was aborted meanwhile: every
            row's transaction was aborted instead).
        duplicates: the acknowledgements not recorded because their (sink, partition) was
            acknowledged already (earlier in the table, or before it): their transactions are
            not aborted here (the caller discards them), in arrival order.
        records: sink → records the recorded acknowledgements wrote.
    """

    recorded: int
    duplicates: tuple[Acknowledgement, ...]
    records: Mapping[str, int]


class CheckpointCoordinator:
    """Checkpoints of one job run; see the module docstring.

    Args:
        job_id: the job's stable id.
        sinks: the job's sinks (unique names).
        storage: checkpoint storage.
        committer: commits and aborts.
        config: checkpointing settings.
        clock: ms clock.
        fault: fault-point hook (``"before_persist"``, ``"after_persist"``).
        first_checkpoint_id: the next id to trigger (restored id + 1, or above every stored id).
        restored: the checkpoint restored from, if any (in-progress state, fully finished sinks).
        marker: the job's committed marker: told of each published checkpoint, and written by
            whichever thread lands the commit of everything the checkpoint holds.
        fence: this driver's epoch: checked before every publish and every commit, so a driver
            a newer one fenced neither publishes nor commits (issue #43).

    Not thread-safe: one driver thread drives it.
    """

    def __init__(
        self,
        job_id: str,
        sinks: Sequence[AnySink],
        storage: CheckpointStorage,
        committer: CommitterOperator,
        config: CheckpointConfig | None = None,
        *,
        clock: Clock = system_clock_ms,
        fault: Callable[[str], None] = fault_point,
        first_checkpoint_id: int = 1,
        restored: CheckpointMetadata | None = None,
        marker: CommittedMarker | None = None,
        fence: DriverFence | None = None,
    ) -> None:
        self.job_id = job_id
        self.sinks: dict[str, AnySink] = {s.name: s for s in sinks}
        if len(self.sinks) != len(sinks):
            raise ConfigError("sink names must be unique within a job")
        self._decoders: dict[str, Callable[[bytes], Any]] = {
            name: functools.partial(decode_payload, sink) for name, sink in self.sinks.items()
        }
        self._headers = {
            name: h for name, sink in self.sinks.items() if (h := codec_header(sink)) is not None
        }
        self.storage = storage
        self.committer = committer
        self.config = config or CheckpointConfig()
        self.clock = clock
        self._fault = fault
        self.next_checkpoint_id = max(first_checkpoint_id, 1)
        self.last_triggered_id = self.next_checkpoint_id - 1
        self._pending: dict[int, PendingCheckpoint] = {}
        self._aborted: set[int] = set()
        self.completed: list[CompletedCheckpoint] = []
        """The latest checkpoint completed in this run (at most one: an older one's metadata and
        committables would stay in memory for the run's life, a checkpoint's worth per epoch)."""
        self._completed_ids: set[int] = set()
        self._subtasks: dict[SubtaskKey, SubtaskLifecycle[Any]] = {}
        """The lifecycles made: only the subtasks that need one (issue #42): the exceptions (one
        that left RUNNING or was acknowledged one by one), those that ever held in-progress state
        (restored with one, or an acknowledgement carried one), and those asked for
        (:meth:`subtask`). Every other known subtask (:attr:`_known`) has none: it is RUNNING,
        holds no state, and its transactions are rows of its sink's ledger, exactly what a
        lifecycle made for it would hold, so one is made only when something asks."""
        self._by_sink: dict[str, dict[int, SubtaskLifecycle[Any]]] = {name: {} for name in self.sinks}
        """The same lifecycles per sink (partition → lifecycle): a pass over one sink's subtasks
        need not visit every sink's."""
        self._known: dict[str, set[int]] = {name: set() for name in self.sinks}
        """Per sink, every partition a trigger named, a restore held state for, or :meth:`subtask`
        made (a superset of ``_by_sink``'s keys; never shrinks): the subtasks of the run, with a
        lifecycle or without (issue #42: a run's first trigger made one per subtask, ~1.3 s of
        the driver thread at 10⁵ × 3; it now adds the partitions to this set, a C-level union)."""
        self._stateful: dict[str, dict[int, SubtaskLifecycle[Any]]] = {name: {} for name in self.sinks}
        """Per sink, the subtasks that ever held in-progress state (restored with one, or an
        acknowledgement carried one): the only ones a pass over in-progress state visits, since
        a lifecycle gets a state only so. Most subtasks of most sinks never hold one (issue #42)."""
        self._ledgers: dict[str, SinkLedger] = {name: SinkLedger(name) for name in self.sinks}
        """Per sink, the pending transactions of its RUNNING subtasks as columns (issue #42): the
        common path's transitions are one step per sink there, not a call per subtask."""
        self._expected_cache: tuple[dict[str, frozenset[int]], ExpectedSubtasks, pa.Table] | None = None
        self.fully_finished: set[str] = set()
        self.parallelism: dict[str, int] = {}
        self.restored = restored
        self.marker = marker
        self._fence = fence
        if restored is not None:
            self._completed_ids.add(restored.checkpoint_id)
            self.fully_finished.update(restored.fully_finished)
            for name, snap in restored.sinks.items():
                if name in self.fully_finished or name not in self.sinks:
                    continue
                self.parallelism[name] = snap.num_partitions
                for p, state in snap.in_progress.items():
                    lc = SubtaskLifecycle[Any](
                        name, p, state, restored.checkpoint_id, ledger=self._ledgers[name]
                    )
                    self._subtasks[(name, p)] = self._by_sink[name][p] = lc
                    self._known[name].add(p)
                    if state is not None:
                        self._stateful[name][p] = lc

    def _log(self, level: int, event: str, /, **fields: Any) -> None:
        log_event(log, level, event, job=self.job_id, **fields)

    # -- subtasks ---------------------------------------------------------------------------------

    def subtask(self, sink: str, partition: int) -> SubtaskLifecycle[Any]:
        """The lifecycle of (sink, partition), made on first use: a known subtask without one is
        RUNNING on its sink's ledger (see :attr:`_subtasks`), so it is made so, holding nothing
        itself (its rows stay the ledger's until it leaves RUNNING); an unknown one becomes known.

        Raises:
            ConfigError: unknown sink.
        """
        if sink not in self.sinks:
            raise ConfigError(f"unknown sink {sink!r}; the job's sinks are {sorted(self.sinks)}")
        key = (sink, partition)
        lc = self._subtasks.get(key)
        if lc is None:
            lc = SubtaskLifecycle(sink, partition, ledger=self._ledgers[sink])
            self._subtasks[key] = self._by_sink[sink][partition] = lc
            self._known[sink].add(partition)
        return lc

    def known_partitions(self, sink: str) -> Set[int]:
        """Every partition of ``sink`` this run knows (triggered, restored with state, or made by
        :meth:`subtask`), with a lifecycle or without one (no order; do not change it)."""
        return self._known.get(sink, frozenset())

    def lifecycles_of(self, sink: str) -> dict[int, SubtaskLifecycle[Any]]:
        """Partition → lifecycle of every known subtask of ``sink``, ascending by partition, each
        made now where it has none (:meth:`subtask`): for the paths that change every subtask's
        state one by one (end of input, close), never an epoch's.

        Raises:
            ConfigError: unknown sink.
        """
        by_sink = self._by_sink.get(sink, {})
        for p in self.known_partitions(sink) - by_sink.keys():
            self.subtask(sink, p)
        return {p: by_sink[p] for p in sorted(by_sink)}

    def _visited(self, sink: str) -> list[SubtaskLifecycle[Any]]:
        """``sink``'s lifecycles a transition calls one by one, ascending by partition: the
        exceptions (their transactions left the ledger) and those holding in-progress state (their
        states are kept per checkpoint there). Every other subtask is RUNNING, holds no state, and
        its transactions are ledger rows, moved by the ledger's columnar transitions."""
        ledger = self._ledgers[sink]
        both = {**self._stateful.get(sink, {}), **ledger.exceptional}
        return [both[p] for p in sorted(both)]

    @property
    def subtasks(self) -> Mapping[SubtaskKey, SubtaskLifecycle[Any]]:
        """The subtask lifecycles made (see :attr:`_subtasks`; :meth:`known_partitions` names
        every subtask, :meth:`lifecycles_of` makes a sink's all)."""
        return self._subtasks

    def live_sinks(self) -> list[str]:
        """Sinks not fully finished, in job order."""
        return [n for n in self.sinks if n not in self.fully_finished]

    # -- trigger / acknowledge --------------------------------------------------------------------

    @property
    def pending_checkpoints(self) -> list[PendingCheckpoint]:
        """Pending checkpoints, ascending by id."""
        return [self._pending[c] for c in sorted(self._pending)]

    def pending(self, checkpoint_id: int) -> PendingCheckpoint:
        """The pending checkpoint ``checkpoint_id``.

        Raises:
            IllegalTransitionError: it is not pending.
        """
        p = self._pending.get(checkpoint_id)
        if p is None:
            state = "ABORTED" if checkpoint_id in self._aborted else (
                "COMPLETED" if checkpoint_id in self._completed_ids else "UNKNOWN"
            )  # fmt: skip
            raise IllegalTransitionError(f"checkpoint {checkpoint_id}", state, "use as pending")
        return p

    def skip_to(self, checkpoint_id: int) -> None:
        """Give the next checkpoint id ``checkpoint_id`` (ids following the engine's batch ids).

        Raises:
            ConfigError: ``checkpoint_id`` is below the next id (ids never go back).
        """
        if checkpoint_id < self.next_checkpoint_id:
            raise ConfigError(
                f"checkpoint ids never go back: {checkpoint_id} < next id {self.next_checkpoint_id}"
            )
        self.next_checkpoint_id = checkpoint_id

    def trigger(
        self,
        kind: CheckpointKind,
        participants: Mapping[str, Iterable[int]],
        *,
        num_partitions: Mapping[str, int] | None = None,
        source_position: JsonObject | None = None,
        end_of_input: bool = False,
    ) -> PendingCheckpoint:
        """Trigger the next checkpoint of ``kind``, expecting acknowledgements from
        ``participants`` (sink → partitions; fully finished sinks expect none). ``num_partitions``:
        sink → the epoch's parallelism (default: the previous one, or the number of participants).

        Raises:
            CheckpointLimitError: ``max_concurrent_checkpoints`` are pending.
            IllegalTransitionError: a participant is fully finished, FINISHED or CLOSED.
            ConfigError: unknown sink.
        """
        if len(self._pending) >= self.config.max_concurrent_checkpoints:
            raise CheckpointLimitError(
                f"job {self.job_id} checkpoint coordinator",
                f"{len(self._pending)} pending (max {self.config.max_concurrent_checkpoints})",
                "trigger",
            )
        parts_of = self._participants_of(participants)
        # the previous trigger's own participants are known already (none is ever dropped), so
        # no set operation per sink over every subtask (issue #42: 10⁵ × 3 each epoch); a new
        # participant is only named known, no lifecycle is made (a RUNNING subtask on the ledger)
        repeated = self._expected_cache is not None and parts_of is self._expected_cache[0]
        for name, parts in parts_of.items():
            if name in self.fully_finished and parts:
                raise IllegalTransitionError(f"sink {name}", "FULLY_FINISHED", "trigger with participants")
            if parts and name not in self.sinks:
                raise ConfigError(f"unknown sink {name!r}; the job's sinks are {sorted(self.sinks)}")
            if not repeated and parts:
                self._known[name] |= parts
            # a subtask on the ledger is RUNNING: only the exceptions can be FINISHED or CLOSED
            exceptional = self._ledgers[name].exceptional if name in self._ledgers else {}
            for p in parts & exceptional.keys():
                lc = exceptional[p]
                if not lc.state.is_live:
                    raise IllegalTransitionError(str(lc), lc.state.value, "trigger")
        expected, expected_keys = self._expected_of(parts_of)
        for name in self.sinks:
            if num_partitions and name in num_partitions:
                self.parallelism[name] = num_partitions[name]
            elif name not in self.parallelism:
                self.parallelism[name] = len(parts_of.get(name, ()))
        cid = self.next_checkpoint_id
        self.next_checkpoint_id += 1
        self.last_triggered_id = cid
        pc = PendingCheckpoint(
            checkpoint_id=cid,
            kind=kind,
            triggered_ms=self.clock(),
            expected=expected,
            num_partitions=dict(self.parallelism),
            source_position=dict(source_position) if source_position is not None else None,
            end_of_input=end_of_input,
            expected_keys=expected_keys,
        )
        self._pending[cid] = pc
        self._log(
            logging.INFO, "checkpoint triggered", checkpoint=cid, kind=kind.value, expected_acks=len(expected)
        )
        return pc

    def _expected_of(self, parts_of: Mapping[str, frozenset[int]]) -> tuple[ExpectedSubtasks, pa.Table]:
        """The expected (sink, partition) set of ``parts_of`` and its table, kept for the next
        trigger with the same participants (an epoch's are its predecessor's unless the
        parallelism or the live sinks changed): built once, not per epoch, and no tuple per
        subtask (issue #42)."""
        cached = self._expected_cache
        if cached is not None and cached[0] == parts_of:
            return cached[1], cached[2]
        parts_of = dict(parts_of)
        expected = ExpectedSubtasks(parts_of)
        keys = ack_table.key_table_of(parts_of)  # per sink, not a Python pass per subtask
        self._expected_cache = (parts_of, expected, keys)
        return expected, keys

    def _participants_of(self, participants: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
        """``participants`` with frozen partition sets: the previous trigger's own (no copy of a
        set per sink) when they hold the same sets, as an epoch's usually do (issue #42)."""
        cached = self._expected_cache
        if (
            cached is not None
            and participants.keys() == cached[0].keys()
            and all(
                isinstance(parts, (set, frozenset)) and parts == cached[0][name]
                for name, parts in participants.items()
            )
        ):
            return cached[0]
        return {name: frozenset(parts) for name, parts in participants.items()}

    def acknowledge(self, checkpoint_id: int, ack: Acknowledgement) -> bool:
        """Record one subtask's acknowledgement of ``checkpoint_id`` (the one-by-one path: a
        driver's own acknowledgements, duplicates, tests). Its payload is decoded here, so that
        one that does not decode is refused before anything is kept; its pending transaction
        keeps the object and the payload bytes as received (written to the checkpoint as they are).

        Returns True if recorded, False if the checkpoint was aborted (its committable aborted).

        Raises:
            CommittableDecodeError, ConfigError: the payload does not decode; an unknown sink.
            DuplicateAcknowledgementError: (sink, partition) already acknowledged; nothing kept.
            IllegalTransitionError: the checkpoint is not pending (found before the payload is
                decoded: a late acknowledgement is refused as late), or (sink, partition) unexpected.
        """
        sink, partition, attempt = ack.sink, ack.partition, ack.attempt
        aborted = checkpoint_id in self._aborted
        # A late acknowledgement is refused as late before its payload is decoded (model seed 5701);
        # an aborted checkpoint's is decoded, as its transaction must be aborted.
        pc = None if aborted else self.pending(checkpoint_id)
        committables = self._decode(ack)
        txns = [
            PendingTransaction(
                sink, partition, attempt, checkpoint_id, c, self.clock(), payload=ack.committable
            )
            for c in committables
        ]
        if pc is None:
            self._log(
                logging.WARNING,
                "late acknowledgement of aborted checkpoint discarded",
                sink=sink,
                checkpoint=checkpoint_id,
                partition=partition,
                attempt=attempt,
            )
            for t in txns:
                self.committer.abort(t)
            return False
        key = (sink, partition)
        if key not in pc.expected:
            raise IllegalTransitionError(
                f"checkpoint {checkpoint_id}", pc.status.value, f"acknowledge unexpected {sink}[{partition}]"
            )
        if pc.is_acknowledged(key):
            raise DuplicateAcknowledgementError(
                f"checkpoint {checkpoint_id}",
                pc.status.value,
                f"acknowledge {sink}[{partition}] twice (attempts {pc.acks[key].attempt} and {attempt})",
            )
        lc = self.subtask(sink, partition)
        self._ledgers[sink].evict(lc)  # acknowledged one by one: an exception from now on
        lc.snapshot_transactions(checkpoint_id, txns, ack.in_progress)
        if ack.in_progress is not None:
            self._stateful[sink][partition] = lc
        pc.record(key, ack, txns)
        return True

    def acknowledge_table(self, checkpoint_id: int, table: pa.Table) -> TableIntake:
        """Record a whole table of acknowledgements of ``checkpoint_id`` (rows of
        :data:`~twophase.coordinator.state.acknowledgement.ACK_SCHEMA`, in arrival order), as
        :meth:`acknowledge` each would, but all or nothing, and without decoding or parsing a
        payload: the executors' release, the sinks, every payload's codec header as the executor
        stamped it (:func:`~twophase.coordinator.state.ack_table.check_payloads`), the expected subtasks
        and the first attempt of each (sink, partition) are checked in Arrow compute
        (:mod:`~twophase.coordinator.state.ack_table`), each check handed only the columns it reads,
        before any is recorded. Each recorded pending
        transaction holds its payload bytes as the executor sent them and decodes them on first
        use (the committer's). Later attempts of a (sink, partition) are returned as duplicates,
        not kept.

        Raises:
            ConfigError: a row names a sink the job does not have.
            CommittableDecodeError: a payload's codec header is missing, or not a kind and
                version its sink's codec reads (nothing recorded).
            IllegalTransitionError: the checkpoint is not pending, or a (sink, partition) is not
                expected (nothing recorded).
            JobError: the table lacks a column of the schema, or its rows come from executors of
                another twophase release (nothing recorded).
        """
        # the payloads go to the ledger blocks as received: ``normalized`` is handed the other
        # columns and the payloads' type (a binary type other than ``binary`` is cast here, in
        # Arrow), and each check the columns it reads, never the payloads (issue #42)
        payload = ack_table.PAYLOAD
        rows = ack_table.normalized(
            table.select([n for n in table.column_names if n != payload]), table.schema
        )
        payloads = table[payload]
        if payloads.type != pa.binary():
            payloads = payloads.cast(pa.binary())
        table = rows.add_column(ACK_SCHEMA.get_field_index(payload), ACK_SCHEMA.field(payload), payloads)
        unknown = ack_table.unknown_sinks(table["sink"], self.sinks)
        if unknown:
            raise ConfigError(f"unknown sinks {unknown}; the job's sinks are {sorted(self.sinks)}")
        ack_table.check_release(table["release"])
        ack_table.check_payloads(
            table.select(ack_table.HEADERS), pac.is_valid(table["committable"]), self._headers
        )
        if checkpoint_id in self._aborted:
            for ack in acknowledgements_in(table):
                self.acknowledge(checkpoint_id, ack)  # logged and aborted, one by one: the rare path
            return TableIntake(0, (), {})
        pc = self.pending(checkpoint_id)
        keys = table.select(ack_table.KEY)
        is_first = ack_table.first_rows(keys)
        first = table if is_first is None else table.filter(is_first)
        extra = ack_table.unexpected(keys if is_first is None else keys.filter(is_first), pc.expected_table())
        if extra:
            sink, partition = extra[0]
            raise IllegalTransitionError(
                f"checkpoint {checkpoint_id}", pc.status.value, f"acknowledge unexpected {sink}[{partition}]"
            )
        duplicates = [] if is_first is None else acknowledgements_in(table.filter(pac.invert(is_first)))
        if pc.ledger.rows:  # some acknowledged before this table (a driver handover)
            before = pc.ledger.recorded_in(first.select(ack_table.KEY))
            if pac.any(before).as_py():
                duplicates.extend(acknowledgements_in(first.filter(before)))
                first = first.filter(pac.invert(before))
        # sorted by (sink, partition), by the key columns only (a table sort or take over a column
        # still in one chunk per task, as ``normalized`` leaves ``release`` and ``write_ms``, costs
        # per chunk), unless the executors sorted them (a gathered epoch): then the payloads are
        # recorded as the slices of Spark's buffers they are, not copied; then per sink its run of
        # rows: the common path's rows become one ledger block as the columns they are (no object
        # per row), the exceptions go through their lifecycles one by one (issue #42)
        by_key = first.select(["sink", "partition", "attempt", "committable", "in_progress"])
        if not ack_table.in_key_order(first.select(ack_table.KEY)):
            order = pac.sort_indices(
                first.select(ack_table.KEY), sort_keys=[("sink", "ascending"), ("partition", "ascending")]
            )
            by_key = by_key.combine_chunks().take(order)  # joined first: a take over chunks is slower
        now = self.clock()
        made: dict[str, dict[int, list[PendingTransaction[Any]]]] = {}
        blocks: dict[str, LedgerBlock] = {}
        runs = pac.value_counts(by_key["sink"])  # in order of appearance: ascending by sink
        start = 0
        for sink, count in zip(
            runs.field("values").to_pylist(), runs.field("counts").to_pylist(), strict=True
        ):
            rows = by_key.slice(start, count)
            start += count
            special, evicted = self._exceptions_in(sink, rows["partition"], rows["in_progress"])
            common = rows
            if special is not None:
                made[sink] = self._intake_exceptions(checkpoint_id, sink, rows.filter(special), now)
                if evicted is not None:
                    common = rows.filter(pac.invert(evicted))
            if common["committable"].null_count:  # a filter copies every payload, even of all rows
                common = common.filter(pac.is_valid(common["committable"]))
            if common.num_rows:
                block = LedgerBlock(
                    sink,
                    checkpoint_id,
                    common["partition"],
                    common["attempt"],
                    common["committable"],
                    now,
                    self._decoders[sink],
                )
                self._ledgers[sink].append(block)
                blocks[sink] = block
        # the payloads are held once, by the blocks and the exceptions' transactions: the pending
        # checkpoint keeps the rows' other columns (issue #42)
        at = first.schema.get_field_index("committable")
        pc.record_table(
            first.set_column(at, "committable", pa.nulls(first.num_rows, pa.binary())), made, blocks
        )
        records = ack_table.records_per_sink(first.select(["sink", "records"]))  # all it reads
        return TableIntake(first.num_rows, tuple(duplicates), records)

    def _exceptions_in(
        self, sink: str, partition: pa.ChunkedArray, in_progress: pa.ChunkedArray
    ) -> tuple[pa.ChunkedArray | None, pa.ChunkedArray | None]:
        """Of one sink's run of an intake's rows (its ``partition`` and ``in_progress``
        columns), which are not the common path, in Arrow compute: ``(special, evicted)`` masks,
        ``special`` ``None`` when none is. Evicted: a subtask no longer on the ledger (it left
        RUNNING, or was acknowledged one by one), whose lifecycle decides its transactions.
        Special: those, and a subtask carrying in-progress state or having carried one."""
        ledger = self._ledgers[sink]
        stateful = self._stateful[sink]
        off = ledger.exceptional
        special = pac.is_valid(in_progress)
        evicted = pac.is_in(partition, value_set=pa.array(list(off), pa.int32())) if off else None
        if stateful:
            special = pac.or_(special, pac.is_in(partition, value_set=pa.array(list(stateful), pa.int32())))
        if evicted is not None:
            special = pac.or_(special, evicted)
        if not pac.any(special).as_py():
            return None, None
        return special, evicted

    def _intake_exceptions(
        self, checkpoint_id: int, sink: str, picked: pa.Table, now: int
    ) -> dict[int, list[PendingTransaction[Any]]]:
        """Record one sink's ``picked`` rows of an intake, the exceptions (:meth:`_exceptions_in`):
        an evicted subtask through its lifecycle (which checks the snapshot and takes the
        transaction itself), and a subtask with in-progress state (or ending one) has it recorded
        (its transaction stays a ledger row). Returns the evicted ones' transactions by partition."""
        stateful = self._stateful[sink]
        off = self._ledgers[sink].exceptional
        parts, attempts, payloads, states = (
            picked[n].to_pylist() for n in ("partition", "attempt", "committable", "in_progress")
        )
        by_sink = self._by_sink[sink]
        decode = self._decoders[sink]
        made: dict[int, list[PendingTransaction[Any]]] = {}
        for partition, attempt, payload, raw in zip(parts, attempts, payloads, states, strict=True):
            state = None if raw is None else json.loads(raw)
            lc = by_sink.get(partition) or self.subtask(sink, partition)
            if partition in off:  # its lifecycle decides: it takes the transaction itself
                txns = [] if payload is None else [
                    PendingTransaction(
                        sink, partition, attempt, checkpoint_id, pre_committed_ms=now, payload=payload,
                        decode=decode,
                    )
                ]  # fmt: skip
                lc.snapshot_transactions(checkpoint_id, txns, state)
                made[partition] = txns
            else:  # on the ledger: a state, or the end of one, is recorded; its row is the ledger's
                lc.record_in_progress(checkpoint_id, state)
            if state is not None or partition in stateful:
                stateful[partition] = lc
        return made

    def _decode(self, ack: Acknowledgement) -> list[Any]:
        if ack.sink not in self.sinks:
            raise ConfigError(f"unknown sink {ack.sink!r}; the job's sinks are {sorted(self.sinks)}")
        return [] if ack.committable is None else [self._decoders[ack.sink](ack.committable)]

    # -- complete / notify / abort ----------------------------------------------------------------

    def _is_fully_finished(self, sink: str) -> bool:
        lcs = self._by_sink.get(sink, {})
        known = self._known.get(sink, ())
        # a known subtask without a lifecycle is RUNNING (lifecycles ⊆ known: equal sizes, equal sets)
        if not known or len(lcs) < len(known):
            return False
        return all(lc.state is SubtaskState.FINISHED and not lc.pending for lc in lcs.values())

    def build_metadata(self, pc: PendingCheckpoint) -> tuple[CheckpointMetadata, dict[str, Sequence[Any]]]:
        """The metadata ``pc`` would publish now, and per sink its committables, decoded on access (as
        :func:`~twophase.coordinator.checkpoint.checkpoint_state.metadata_of`); first flags sinks that became
        fully finished."""
        for name in self.sinks:
            if name not in self.fully_finished and self._is_fully_finished(name):
                self.fully_finished.add(name)
                self._log(logging.INFO, "sink fully finished", sink=name, checkpoint=pc.checkpoint_id)
        with collector.paused():  # a record per transaction: a bulk pass (issue #42)
            return metadata_of(
                self.job_id,
                pc,
                self.sinks,
                self._ledgers,
                self._stateful,
                self.fully_finished,
                self.parallelism,
                self.clock(),
            )

    def complete(self, checkpoint_id: int) -> CompletedCheckpoint:
        """Persist checkpoint ``checkpoint_id`` atomically; it is complete once published.

        Nothing is committed here: call :meth:`notify_checkpoint_complete` next. If publishing
        fails with :class:`CheckpointNotPublishedError` (proven not visible), the checkpoint (and
        newer pending ones) is aborted and the error raised; any other error is an unknown
        outcome: its transactions are kept in doubt instead (never aborted), newer pending
        checkpoints are aborted, and the error is raised (the restore decides, DESIGN.md §12).

        Raises:
            IllegalTransitionError: not pending, not fully acknowledged, or an older one pending.
            CheckpointNotPublishedError: not published. Anything else from the storage: unknown.
            DriverFencedError: a newer driver claimed the job; the checkpoint and its transactions
                are aborted unpublished.
        """
        pc = self.pending(checkpoint_id)
        if not pc.is_fully_acknowledged:
            missing = ", ".join(f"{s}[{p}]" for s, p in sorted(pc.missing))
            raise IllegalTransitionError(
                f"checkpoint {checkpoint_id}",
                pc.status.value,
                f"complete (missing acknowledgements: {missing})",
            )
        older = [c for c in self._pending if c < checkpoint_id]
        if older:
            raise IllegalTransitionError(
                f"checkpoint {checkpoint_id}",
                pc.status.value,
                f"complete before older pending {sorted(older)}",
            )
        started = time.perf_counter()
        metadata, decoded = self.build_metadata(pc)
        self._fault("before_persist")
        self._check_fence_before_publish(checkpoint_id)
        try:
            ref = self.storage.publish(metadata)
        except CheckpointNotPublishedError as e:  # proven not visible: nothing may hold them
            self.abort_checkpoint(checkpoint_id, f"persist failed: {e!r}")
            raise
        except Exception as e:  # anything else may have landed: never abort what may be durable
            self._in_doubt(pc, e)
            raise
        persist_ms = (time.perf_counter() - started) * 1000.0
        pc.complete()
        del self._pending[checkpoint_id]
        self._completed_ids.add(checkpoint_id)
        for name, ledger in self._ledgers.items():
            ledger.checkpoint_persisted(checkpoint_id)
            for lc in self._visited(name):
                lc.checkpoint_persisted(checkpoint_id)
        if self.marker is not None:  # before retention: an older checkpoint's marker is not written now
            self.marker.published(checkpoint_id, ref.location)
        self._log(
            logging.INFO,
            "checkpoint completed",
            checkpoint=checkpoint_id,
            kind=pc.kind.value,
            committables=metadata.committable_count(),
            persist_ms=persist_ms,
        )
        retired: list[CheckpointRef] = []
        try:
            retired = self.storage.apply_retention(self.config.retained_checkpoints)
        except Exception as e:  # old checkpoints are only garbage; never fail a completed checkpoint
            log.warning("checkpoint retention failed job=%s: %r", self.job_id, e, extra={"job": self.job_id})
        done = CompletedCheckpoint(
            metadata,
            ref,
            persist_ms,
            pc.records,
            pc.acknowledgements,
            committables=decoded,
            retired=tuple(retired),
        )
        self.completed[:] = [done]
        self._fault("after_persist")
        return done

    def _check_fence_before_publish(self, checkpoint_id: int) -> None:
        """Nothing is published yet: a fenced driver, or one that cannot read the driver epochs,
        aborts the checkpoint and its own transactions. They are its own: every sink names a
        transaction uniquely per attempt (a token; Kafka aborts by producer id and epoch), which the
        conformance kit checks, and the newer driver may have finished already, so nothing else
        would abort them (a chaos trial found them lingering when they were left to it).

        Raises:
            DriverFencedError: a newer driver claimed the job.
            CheckpointNotPublishedError: the driver epochs cannot be listed.
        """
        if self._fence is None:
            return
        try:
            self._fence.check(f"publishing checkpoint {checkpoint_id}")
        except DriverFencedError as e:
            self.abort_checkpoint(checkpoint_id, f"driver fenced: {e}")
            raise
        except Exception as e:
            self.abort_checkpoint(checkpoint_id, f"driver epochs unreadable: {e!r}")
            raise CheckpointNotPublishedError(
                f"checkpoint {checkpoint_id} not published: the driver epochs cannot be read: {e}"
            ) from e

    def _in_doubt(self, pc: PendingCheckpoint, error: BaseException) -> None:
        """The checkpoint may or may not be durable: keep its transactions (never abort what may be
        durable), abort newer pending checkpoints (they are not), and let the job fail."""
        c = pc.checkpoint_id
        del self._pending[c]
        pc.mark_in_doubt()
        self._aborted.add(c)
        for name, ledger in self._ledgers.items():
            ledger.checkpoint_in_doubt(c)
            for lc in self._visited(name):
                lc.checkpoint_in_doubt(c)
        self._log(logging.ERROR, "checkpoint publish outcome unknown", checkpoint=c, error=repr(error))
        newer = [n for n in self._pending if n > c]
        if newer:
            self.abort_checkpoint(min(newer), f"an older checkpoint's publish outcome is unknown: {error!r}")

    def notify_checkpoint_complete(self, checkpoint_id: int) -> NotifyResult:
        """Commit every pending transaction ≤ ``checkpoint_id`` on every live subtask, in order.

        Raises:
            IllegalTransitionError: ``checkpoint_id`` never completed (pending, aborted or unknown).
            DriverFencedError: a newer driver claimed the job; nothing is committed.
            TransactionLostError, CommitFailedError: from the committer (synchronous commit).
        """
        if checkpoint_id not in self._completed_ids:
            state = "PENDING" if checkpoint_id in self._pending else (
                "ABORTED" if checkpoint_id in self._aborted else "UNKNOWN"
            )  # fmt: skip
            raise IllegalTransitionError(f"checkpoint {checkpoint_id}", state, "notify_checkpoint_complete")
        if self._fence is not None:  # the newer driver's restore commits it
            self._fence.check(f"committing checkpoint {checkpoint_id}")
        started = time.perf_counter()
        # commit calls per sink (in job order), as its ledger holds them: checkpoint → its
        # transactions, ascending by checkpoint; the ledger hands a block's rows ascending by
        # partition, a call as it is (issue #42), and the committer takes them per sink
        calls: dict[str, list[NamedCall]] = {}
        aborts: list[PendingTransaction[Any]] = []
        finished = 0
        with collector.paused():  # every subtask, no user code: a bulk pass (issue #42)
            for name, ledger in self._ledgers.items():
                by_checkpoint: dict[int, NamedCall] = {}
                merged: dict[int, list[PendingTransaction[Any]]] = {}
                for cid, rows in ledger.notify_checkpoint_complete(checkpoint_id):
                    if cid in by_checkpoint:  # two intakes of one checkpoint (a driver handover)
                        merged.setdefault(cid, []).extend(rows)
                    else:
                        by_checkpoint[cid] = rows
                for lc in ledger.exceptional.values():
                    if not lc.state.is_live:
                        continue
                    actions = lc.notify_checkpoint_complete(checkpoint_id)
                    for t in actions.commit:
                        merged.setdefault(t.checkpoint_id, []).append(t)
                    aborts.extend(actions.abort)
                    finished += lc.state is SubtaskState.FINISHED
                if merged:
                    # a call from two sources (ledger blocks, exceptions): one list, sorted once,
                    # as a call that names its sink (TxnCall); the sink's calls by checkpoint again
                    for cid, txns in merged.items():
                        call = by_checkpoint.get(cid)
                        if call is not None:
                            txns[:0] = call
                        if len(txns) > 1:
                            txns.sort(key=_PARTITION_ATTEMPT)
                        by_checkpoint[cid] = TxnCall(txns)
                    by_checkpoint = dict(sorted(by_checkpoint.items()))
                if by_checkpoint:  # the ledger's blocks come ascending by checkpoint
                    calls[name] = list(by_checkpoint.values())
        # a block's rows go as they are (BlockRows): their transactions are made where the call
        # runs, on the committer thread when commit is asynchronous (issue #42)
        self.committer.abort_all(sorted(aborts, key=_CHECKPOINT_PARTITION))
        before = self.committer.metrics
        commits = self.committer.submit_calls(calls, on_landed=self._marker_for(checkpoint_id))
        after = self.committer.metrics
        self.confirm_commits()
        ms = (time.perf_counter() - started) * 1000.0
        if commits or aborts or finished:
            counts = {"committed": commits, "aborted": len(aborts), "finished": finished}
            self._log(logging.INFO, "checkpoint notified", checkpoint=checkpoint_id, **counts)
        if self.committer.asynchronous:
            return NotifyResult(checkpoint_id, commits, len(aborts), finished, ms)
        already = after.already_committed - before.already_committed
        return NotifyResult(
            checkpoint_id, after.committed - before.committed, len(aborts), finished, ms, already
        )

    def _marker_for(self, checkpoint_id: int) -> Callable[[], None] | None:
        """What marks ``checkpoint_id`` committed once the batch just handed to the committer lands,
        if then every transaction ≤ it is committed: each is COMMITTING (in this batch or an
        earlier one; batches land in order, and after a failure none lands). ``None`` otherwise
        (one is in doubt, or on a subtask no notification commits): the driver decides later."""
        marker = self.marker
        if marker is None:
            return None
        for ledger in self._ledgers.values():
            if not ledger.all_committing(checkpoint_id):
                return None
            if not all(lc.all_committing(checkpoint_id) for lc in ledger.exceptional.values()):
                return None

        def landed() -> None:
            marker.mark(checkpoint_id)

        return landed

    def confirm_commits(self) -> int:
        """Forget the transactions the committer confirmed since the last call; return how many."""
        confirmed = self.committer.poll_completed_calls()
        with collector.paused():
            # a block's rows leave by range (one status recode per call); the rest, one by one
            for t in confirm_calls(confirmed):
                self.subtask(t.sink_name, t.partition).commit_confirmed(t)
            if confirmed:
                for ledger in self._ledgers.values():
                    ledger.compact()
        return sum(map(len, confirmed))

    def abort_checkpoint(self, checkpoint_id: int, reason: str) -> list[int]:
        """Abort pending checkpoint ``checkpoint_id`` and every newer pending one, and abort the
        transactions pre-committed for them (``notify_checkpoint_aborted`` on every live subtask).

        Returns:
            the aborted checkpoint ids (empty if ``checkpoint_id`` was already aborted).

        Raises:
            IllegalTransitionError: the checkpoint completed, or was never triggered.
        """
        if checkpoint_id in self._aborted:
            return []
        self.pending(checkpoint_id)
        ids = sorted(c for c in self._pending if c >= checkpoint_id)
        for c in ids:
            pc = self._pending.pop(c)
            pc.abort(reason)
            self._aborted.add(c)
            txns: list[PendingTransaction[Any]] = []
            for name, ledger in self._ledgers.items():
                txns += ledger.notify_checkpoint_aborted(c)
                for lc in self._visited(name):
                    if lc.state.is_live:
                        txns += lc.notify_checkpoint_aborted(c).abort
            # one abort_batch per sink: at 10⁴ subtasks an abort per transaction that reads the
            # sink's shared state (Delta's log) was still running after 6 minutes (issue #42)
            self.committer.abort_all(txns)
            self._log(
                logging.WARNING,
                "checkpoint aborted",
                checkpoint=c,
                reason=reason,
                transactions_aborted=len(txns),
            )
        return ids

    def check_timeouts(self) -> list[int]:
        """Abort pending checkpoints older than ``checkpoint_timeout_ms``; return the aborted ids."""
        timeout = self.config.checkpoint_timeout_ms
        if timeout is None:
            return []
        now = self.clock()
        for c in sorted(self._pending):
            if now - self._pending[c].triggered_ms > timeout:
                return self.abort_checkpoint(c, f"timeout after {timeout} ms")
        return []

    def close_subtasks(self, reason: str) -> int:
        """Failure/cancel/suspend path: abort every pending checkpoint, then close() every live
        subtask (aborting what no durable checkpoint holds). Returns transactions aborted."""
        before = self.committer.metrics.aborted
        if self._pending:
            self.abort_checkpoint(min(self._pending), reason)
        for name in self.sinks:  # every known subtask closes: those without a lifecycle get one
            self.lifecycles_of(name)
        self.committer.abort_all(
            [t for _, lc in sorted(self._subtasks.items()) if lc.state.is_live for t in lc.close().abort]
        )
        return self.committer.metrics.aborted - before

    def release_in_doubt(self, landed: Set[int]) -> list[PendingTransaction[Any]]:
        """Forget the IN_DOUBT transactions of checkpoints storage does not show (``landed``: the
        ids it lists): their publish did not land, nothing holds them, so they must be aborted
        (lingering cleanup no longer holds them either). Returns them in checkpoint order."""
        gone = [t for ledger in self._ledgers.values() for t in ledger.release_in_doubt(landed)]
        for name in self._ledgers:
            gone += [t for lc in self._visited(name) for t in lc.release_in_doubt(landed)]
        return sorted(gone, key=lambda t: (t.checkpoint_id, t.sink_name, t.partition))

    def durable_transactions(self, landed: Set[int] = frozenset()) -> list[PendingTransaction[Any]]:
        """Uncommitted transactions a published checkpoint holds (PERSISTED or COMMITTING, and
        IN_DOUBT ones of checkpoints in ``landed``), in checkpoint order: what must be committed."""
        return [
            t
            for t in self.uncommitted_transactions()
            if t.status.is_durable or (t.status is TxnStatus.IN_DOUBT and t.checkpoint_id in landed)
        ]

    def pending_of(self, sink: str) -> tuple[list[bytes | None], Sequence[Any]]:
        """The payload bytes and, index for index, the committables (each decoded on access and
        kept by its ledger block) of every transaction of ``sink`` not yet confirmed committed nor
        aborted: what a lingering cleanup holds of the running job, read as the publish reads it
        (:func:`~twophase.coordinator.checkpoint.checkpoint_state.pending_columns`). A ledger
        block's live rows come from its columns and no transaction is made of them (issue #42:
        the routine sweep reads this while the committer thread may commit the same rows as
        columns, and one made row sent that block's whole commit call down the object path); the
        exceptions' transactions are read as they are (``None``: one a test built from its object)."""
        ledger = self._ledgers.get(sink)
        if ledger is None:
            return [], ()
        own = [t for lc in ledger.exceptional.values() for t in lc.own_pending]
        rows, committables = pending_columns(ledger.blocks, own)
        return rows.table["payload"].to_pylist(), committables

    def in_progress_as_of(self, sink: str, checkpoint_id: int, below: int) -> dict[int, JsonObject]:
        """Partition → the in-progress state as of ``checkpoint_id`` of ``sink``'s subtasks with a
        partition below ``below`` that have one, ascending by partition."""
        found = {
            p: st
            for p, lc in self._stateful.get(sink, {}).items()
            if p < below and (st := lc.in_progress_for(checkpoint_id)) is not None
        }
        return dict(sorted(found.items()))

    def live_in_progress_of(self, sink: str) -> list[JsonObject]:
        """The newest in-progress state of each live subtask of ``sink`` that has one."""
        return [
            st
            for lc in self._stateful.get(sink, {}).values()
            if lc.state.is_live and (st := lc.latest_in_progress) is not None
        ]

    def stateful_subtasks(self, sink: str) -> Mapping[int, SubtaskLifecycle[Any]]:
        """Partition → lifecycle of ``sink``'s subtasks that ever held in-progress state (a
        superset of those holding one now; no order): every other subtask holds none."""
        return self._stateful.get(sink, {})

    def holds_uncommitted_up_to(self, checkpoint_id: int) -> bool:
        """Whether a transaction not yet confirmed committed has a checkpoint id ≤
        ``checkpoint_id``: read from the ledger blocks' checkpoint ids and status columns and the
        exceptions' lifecycles, making no transaction object (issue #42: one made row sends its
        block's whole commit call down the object path)."""
        for ledger in self._ledgers.values():
            if any(b.checkpoint_id <= checkpoint_id and not b.empty for b in ledger.blocks):
                return True
            for lc in ledger.exceptional.values():
                if any(t.checkpoint_id <= checkpoint_id for t in lc.own_pending):
                    return True
        return False

    def uncommitted_before(self, pre_committed_ms: int) -> list[PendingTransaction[Any]]:
        """The transactions not yet confirmed committed that were pre-committed at or before
        ``pre_committed_ms`` (ms since the epoch), in checkpoint order: what may be near its
        timeout. A ledger block's rows share their intake's time, so a younger block is skipped
        whole and no transaction of it is made (issue #42)."""
        out: list[PendingTransaction[Any]] = []
        for ledger in self._ledgers.values():
            for b in ledger.blocks:
                if b.pre_committed_ms <= pre_committed_ms:
                    out += (t for t in b.live() if t.pre_committed_ms <= pre_committed_ms)
            for lc in ledger.exceptional.values():
                out += (t for t in lc.own_pending if t.pre_committed_ms <= pre_committed_ms)
        return sorted(out, key=_CHECKPOINT_PARTITION)

    def uncommitted_transactions(self) -> list[PendingTransaction[Any]]:
        """Every transaction not yet confirmed committed, in checkpoint order."""
        out: list[PendingTransaction[Any]] = []
        for ledger in self._ledgers.values():
            out += (b.txn(r) for b in ledger.blocks for r in b.live_rows())
            out += (t for lc in ledger.exceptional.values() for t in lc.own_pending)
        return sorted(out, key=_CHECKPOINT_PARTITION)

    @property
    def ledgers(self) -> Mapping[str, SinkLedger]:
        """Per sink, the ledger of its RUNNING subtasks' transactions (issue #42)."""
        return self._ledgers

    @property
    def completed_ids(self) -> frozenset[int]:
        """Ids of checkpoints completed in this run (and the restored one)."""
        return frozenset(self._completed_ids)
