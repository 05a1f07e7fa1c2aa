"""An in-memory model of Kafka's transaction coordinator, for model-based tests of the Kafka sink.

The real :class:`~twophase.connectors.kafka.sink.KafkaSink` code runs against it: its writer
through :class:`ModelProducer` (the calls it makes on a confluent-kafka ``Producer``), its
driver-side admin through :class:`ModelTransport` (FindCoordinator, EndTxn, DescribeTransactions,
ListTransactions). It behaves like a broker (TV1, KIP-98) where exactly-once depends on it:

- ``init_transactions`` assigns a producer id at epoch 0, or bumps the epoch of a known id; a
  transaction still Ongoing on that id is aborted first (fencing its producer);
- a producer whose epoch was bumped is fenced: its flush fails, its EndTxn answers PRODUCER_FENCED;
- EndTxn(commit) of the current epoch commits (records become visible to read_committed); a
  repeated EndTxn(commit) of a completed commit answers NONE, as TV1 does; EndTxn on an aborted
  transaction answers INVALID_TXN_STATE;
- a transaction Ongoing longer than its timeout is aborted and its epoch bumped (:meth:`advance`);
- transactional ids without activity for ``id_expiration_ms`` are forgotten (:meth:`advance`);
- ending a transaction writes a COMMIT or ABORT marker (its producer id and the epoch that ended
  it) into each partition it wrote; markers outlive the id until :meth:`delete_logs` (retention);
- each partition has a log with offsets: the records of transactions (appended at flush), their
  markers, and other producers' traffic (:meth:`busy`, any number of bytes); a marker search reads
  it as the real transport does (from an offset, or from the first entry at or after a time, up to
  ``transport.MARKER_SCAN_BYTES``), and ``end_offset`` answers ListOffsets(latest). Log entries
  carry the wall clock, as a committable's ``opened_ms`` does (the executor's), while timeouts and
  id expiry follow the model's clock;
- each id has a coordinator broker; :meth:`move_coordinators` moves them all, after which the old
  broker answers NOT_COORDINATOR until the client re-finds the coordinator.

What it leaves out: replication, partitions' leaders, quotas, and network delays.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from confluent_kafka import KafkaError, KafkaException

from twophase.connectors.kafka.internal import transport as kafka_transport
from twophase.connectors.kafka.internal.transport import MarkerSearch, SearchStop

NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
TRANSACTIONAL_ID_NOT_FOUND = 105
PRODUCER_FENCED = 90
RECORD_BYTES = 100
"""Bytes a record of a transaction takes in the model's log."""

P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Run the method under the model's lock: a broker serialises a transactional id's requests,
    and an asynchronous committer calls the model from its own thread."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with args[0].lock:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return run


@dataclass
class TxnMeta:
    """The coordinator's state of one transactional id."""

    producer_id: int
    producer_epoch: int
    state: str = "Empty"
    timeout_ms: int = 60_000
    started_ms: int = -1
    last_update_ms: int = 0
    records: list[tuple[str, int, bytes | None, bytes | None]] = field(default_factory=list)


@dataclass(frozen=True)
class LogEntry:
    """One batch in a partition's log: records of a producer (``marker`` None) or a marker."""

    producer_id: int
    producer_epoch: int
    nbytes: int
    time_ms: int
    marker: bool | None = None


@dataclass
class PartitionLog:
    """A partition's log: ``entries[i]`` has offset ``start + i``."""

    start: int = 0
    entries: list[LogEntry] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + len(self.entries)


@dataclass(frozen=True)
class DescribedTxn:
    """One DescribeTransactions answer (as the transport protocol returns it)."""

    transactional_id: str
    error_code: int
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1


class KafkaModel:
    """A Kafka cluster's transaction state, in memory. See the module docstring.

    Args:
        brokers: broker node ids.
        partitions: partitions per topic (records are placed by key hash, or the given partition).
        id_expiration_ms: ``transactional.id.expiration.ms``.
        clock: ms clock (shared with the runtime under test).
    """

    def __init__(
        self,
        brokers: Sequence[int] = (1, 2, 3),
        *,
        partitions: int = 3,
        id_expiration_ms: int = 7 * 24 * 3600 * 1000,
        clock: Callable[[], int] = lambda: 0,
    ) -> None:
        self.brokers = list(brokers)
        self.partitions = partitions
        self.id_expiration_ms = id_expiration_ms
        self.clock = clock
        self.txns: dict[str, TxnMeta] = {}
        self.committed: list[tuple[str, int, bytes | None, bytes | None, str]] = []
        """Visible records: (topic, partition, key, value, transactional id)."""
        self.markers: dict[tuple[str, int, int, int], bool] = {}
        """(topic, partition, producer id, epoch) → True for a COMMIT marker, False for ABORT."""
        self.searches: list[tuple[str, int, int, int, int, int]] = []
        """Every marker search: (topic, partition, producer id, epoch, since ms, until ms)."""
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        """Each partition's log (records, markers, other traffic), by (topic, partition)."""
        self.commits: set[tuple[str, int, int]] = set()
        """(transactional id, producer id, epoch) of every transaction committed (its records
        visible to read_committed), remembered after the id expires: what a test checks a LOST
        against."""
        self._pids = itertools.count(1000)
        self._shift = 0
        self.events: list[str] = []
        self.timed_out: dict[tuple[str, int, int], list[tuple[str, int, Any, Any]]] = {}
        """(transactional id, producer id, epoch) → the records of a transaction the coordinator
        aborted because it outlived its timeout (truly lost)."""
        self.lock = threading.RLock()
        self.end_txn_gate: threading.Event | None = None
        """When set to an Event, EndTxn waits until it is set (a slow commit, a stalled broker)."""
        self.refuse_aborts = 0
        """How many more transactional ids with an Ongoing transaction get every abort refused:
        the first ids asked to end one (EndTxn(abort): COORDINATOR_NOT_AVAILABLE; InitProducerId
        fencing it: a timeout), until :meth:`accept_aborts` (a broker that keeps failing)."""
        self.refusing: set[str] = set()
        """The ids whose aborts are refused now."""

    # -- cluster ------------------------------------------------------------------------------------

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker that coordinates ``transactional_id`` now."""
        h = zlib.crc32(transactional_id.encode())
        return self.brokers[(h + self._shift) % len(self.brokers)]

    def move_coordinators(self) -> None:
        """Every transaction coordinator moves to another broker (a broker restart, a leader change)."""
        self._shift += 1
        self.events.append("coordinators moved")

    @_locked
    def advance(self, now_ms: int | None = None) -> None:
        """Apply timeouts and id expiration as of ``now_ms`` (default: the clock)."""
        now = self.clock() if now_ms is None else now_ms
        for txn_id, m in list(self.txns.items()):
            if m.state == "Ongoing" and now - m.started_ms > m.timeout_ms:
                self.timed_out[(txn_id, m.producer_id, m.producer_epoch)] = list(m.records)
                self._abort(txn_id, m, bump=True)
                self.events.append(f"timed out {txn_id}")
            elif m.state != "Ongoing" and now - m.last_update_ms > self.id_expiration_ms:
                del self.txns[txn_id]
                self.events.append(f"expired {txn_id}")

    # -- producer side (InitProducerId, AddPartitions, Produce) ------------------------------------

    def accept_aborts(self) -> None:
        """Stop refusing aborts (see :attr:`refuse_aborts`)."""
        with self.lock:
            self.refuse_aborts = 0
            self.refusing.clear()

    def _refuses_abort(self, txn_id: str, m: TxnMeta) -> bool:
        if m.state != "Ongoing":
            return False
        if txn_id not in self.refusing and self.refuse_aborts > 0:
            self.refuse_aborts -= 1
            self.refusing.add(txn_id)
            self.events.append(f"refusing aborts of {txn_id}")
        return txn_id in self.refusing

    @_locked
    def init_producer_id(self, txn_id: str, timeout_ms: int) -> tuple[int, int]:
        """InitProducerId (TV1): a new id at epoch 0, or the known id's epoch bumped (an Ongoing
        transaction is aborted first: the old producer is fenced).

        Raises:
            KafkaException: the id's aborts are refused (:attr:`refuse_aborts`).
        """
        self.advance()
        m = self.txns.get(txn_id)
        now = self.clock()
        if m is None:
            m = self.txns[txn_id] = TxnMeta(next(self._pids), 0, timeout_ms=timeout_ms, last_update_ms=now)
            return m.producer_id, m.producer_epoch
        if self._refuses_abort(txn_id, m):
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"InitProducerId of {txn_id} timed out"))
        if m.state == "Ongoing":
            self._abort(txn_id, m, bump=False)
            self.events.append(f"fenced {txn_id} epoch {m.producer_epoch}")
        m.producer_epoch += 1
        m.state, m.timeout_ms, m.last_update_ms = "Empty", timeout_ms, now
        return m.producer_id, m.producer_epoch

    @_locked
    def current(self, txn_id: str, pid: int, epoch: int) -> TxnMeta | None:
        """The id's state if (pid, epoch) is still its current producer, else ``None`` (fenced)."""
        self.advance()
        m = self.txns.get(txn_id)
        return m if m is not None and (m.producer_id, m.producer_epoch) == (pid, epoch) else None

    @_locked
    def append(self, txn_id: str, pid: int, epoch: int, records: list[tuple[str, int, Any, Any]]) -> bool:
        """Records of (pid, epoch) join its transaction (begun if Empty); False if it is fenced."""
        m = self.current(txn_id, pid, epoch)
        if m is None or m.state not in ("Empty", "Ongoing", "CompleteCommit", "CompleteAbort"):
            return False
        if m.state != "Ongoing":
            m.state, m.started_ms, m.records = "Ongoing", self.clock(), []
        m.records.extend(records)
        m.last_update_ms = self.clock()
        for topic, partition, _, _ in records:
            self._log(topic, partition).entries.append(LogEntry(pid, epoch, RECORD_BYTES, _wall_ms()))
        return True

    def _log(self, topic: str, partition: int) -> PartitionLog:
        return self.logs.setdefault((topic, partition), PartitionLog())

    @_locked
    def busy(self, topic: str, nbytes: int) -> None:
        """Other producers append ``nbytes`` to every partition of ``topic`` (a catch-up batch,
        another job): what a marker search may have to read past."""
        for partition in range(self.partitions):
            self._log(topic, partition).entries.append(LogEntry(-1, -1, nbytes, _wall_ms()))
        self.events.append(f"{nbytes} bytes of other traffic in {topic}")

    @_locked
    def end_offset(self, topic: str, partition: int) -> int:
        """ListOffsets(latest) of ``topic[partition]``."""
        return self._log(topic, partition).end

    def end_offsets(self, conf: Mapping[str, Any]) -> ModelEndOffsets:
        """The writer's end-offset client (``KafkaClients.end_offsets``)."""
        return ModelEndOffsets(self)

    def _abort(self, txn_id: str, m: TxnMeta, *, bump: bool) -> None:
        if bump:  # a timed-out transaction is fenced first: its ABORT markers carry the new epoch
            m.producer_epoch += 1
        self._mark(m, commit=False)
        m.state, m.records, m.last_update_ms = "CompleteAbort", [], self.clock()

    def _mark(self, m: TxnMeta, *, commit: bool) -> None:
        for topic, partition in sorted({(t, p) for t, p, _, _ in m.records}):
            self.markers[(topic, partition, m.producer_id, m.producer_epoch)] = commit
            entry = LogEntry(m.producer_id, m.producer_epoch, RECORD_BYTES, _wall_ms(), commit)
            self._log(topic, partition).entries.append(entry)

    # -- coordinator side (EndTxn, DescribeTransactions, ListTransactions) --------------------------

    def end_txn(self, node: int, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        """EndTxn (TV1) at broker ``node``; returns Kafka's error code."""
        gate = self.end_txn_gate
        if gate is not None and not gate.wait(timeout=30):
            raise TimeoutError("the model's EndTxn gate stayed closed for 30 s")
        with self.lock:
            return self._end_txn(node, txn_id, pid, epoch, commit)

    def _end_txn(self, node: int, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        self.advance()
        if node != self.coordinator_of(txn_id):
            return NOT_COORDINATOR
        m = self.txns.get(txn_id)
        if m is None or m.producer_id != pid:
            return INVALID_PRODUCER_ID_MAPPING
        if epoch < m.producer_epoch:
            return PRODUCER_FENCED
        if epoch > m.producer_epoch:
            return INVALID_PRODUCER_EPOCH
        if not commit and self._refuses_abort(txn_id, m):
            return COORDINATOR_NOT_AVAILABLE
        done = "CompleteCommit" if commit else "CompleteAbort"
        if m.state == done:
            return NONE  # a retried EndTxn of a completed transaction
        if m.state != "Ongoing":
            return INVALID_TXN_STATE
        if commit:
            self.committed.extend((t, p, k, v, txn_id) for t, p, k, v in m.records)
            self.commits.add((txn_id, pid, epoch))
        self._mark(m, commit=commit)
        m.state, m.records, m.last_update_ms = done, [], self.clock()
        return NONE

    @_locked
    def describe(self, node: int, ids: Sequence[str]) -> list[DescribedTxn]:
        """DescribeTransactions at broker ``node``."""
        self.advance()
        out = []
        for txn_id in ids:
            m = self.txns.get(txn_id)
            if node != self.coordinator_of(txn_id):
                out.append(DescribedTxn(txn_id, NOT_COORDINATOR))
            elif m is None:
                out.append(DescribedTxn(txn_id, TRANSACTIONAL_ID_NOT_FOUND))
            else:
                out.append(
                    DescribedTxn(
                        txn_id, NONE, m.state, m.producer_id, m.producer_epoch, m.timeout_ms, m.started_ms
                    )
                )
        return out

    @_locked
    def list_transactions(self, states: Sequence[str], pattern: str | None) -> list[tuple[str, int, str]]:
        """ListTransactions on every broker, filtered by state and id pattern (KIP-1152)."""
        self.advance()
        rx = re.compile(pattern) if pattern else None
        return [
            (t, m.producer_id, m.state)
            for t, m in sorted(self.txns.items())
            if (not states or m.state in states) and (rx is None or rx.search(t))
        ]

    @_locked
    def transaction_outcome(
        self,
        topic: str,
        partition: int,
        pid: int,
        epoch: int,
        since_ms: int,
        until_ms: int,
        from_offset: int | None = None,
    ) -> MarkerSearch:
        """Search ``topic[partition]``'s log for the marker of (pid, epoch) as the real transport
        does: from ``from_offset`` (from the log's start if retention deleted it; nothing past
        the end), else from the first entry at or after ``since_ms``; stopping at the marker, at
        another marker after ``until_ms``, at the end, or once ``transport.MARKER_SCAN_BYTES`` were
        read. Every search is kept in :attr:`searches`."""
        self.searches.append((topic, partition, pid, epoch, since_ms, until_ms))
        log = self._log(topic, partition)
        if from_offset is not None:
            if from_offset > log.end:
                return MarkerSearch(None, SearchStop.PAST_END)
            offset = max(from_offset, log.start)
        else:
            later = [i for i, e in enumerate(log.entries) if e.time_ms >= since_ms]
            if not later:
                return MarkerSearch(None, SearchStop.NOTHING_SINCE)
            offset = log.start + later[0]
        start, scanned, bound = offset, 0, kafka_transport.MARKER_SCAN_BYTES
        while offset < log.end:
            e = log.entries[offset - log.start]
            offset += 1
            scanned += e.nbytes
            if e.marker is not None and (e.producer_id, e.producer_epoch) == (pid, epoch):
                return MarkerSearch(e.marker, SearchStop.MARKER, start, offset, scanned, bound)
            if e.marker is not None and e.time_ms > until_ms:
                return MarkerSearch(None, SearchStop.LATER_MARKER, start, offset, scanned, bound)
            if scanned >= bound:
                return MarkerSearch(None, SearchStop.BYTES_BOUND, start, offset, scanned, bound)
        return MarkerSearch(None, SearchStop.END_OF_LOG, start, offset, scanned, bound)

    @_locked
    def delete_logs(self) -> None:
        """Retention deleted every partition's log: no marker is left (offsets go on)."""
        self.markers.clear()
        for log in self.logs.values():
            log.start, log.entries = log.end, []
        self.events.append("logs deleted")

    # -- inspection ---------------------------------------------------------------------------------

    @_locked
    def ongoing(self, prefix: str = "") -> list[str]:
        """Transactional ids with an Ongoing transaction (lingering, or pending commit)."""
        self.advance()
        return sorted(t for t, m in self.txns.items() if m.state == "Ongoing" and t.startswith(prefix))

    def committed_values(self, topic: str | None = None) -> list[bytes | None]:
        """Values visible to a read_committed consumer, in commit order."""
        return [v for t, _, _, v, _ in self.committed if topic is None or t == topic]

    def producer(self, conf: Mapping[str, Any]) -> ModelProducer:
        """A producer for ``conf`` (what ``confluent_kafka.Producer(conf)`` returns)."""
        return ModelProducer(self, conf)

    def transport(self, config: object = None) -> ModelTransport:
        """A driver-side transport (what the Kafka sink's admin speaks through); with
        :meth:`producer`, this model is a ``KafkaClients`` for ``KafkaSink(clients=...)``."""
        return ModelTransport(self)


class ModelProducer:
    """The subset of confluent-kafka's transactional ``Producer`` the Kafka writer uses."""

    def __init__(self, model: KafkaModel, conf: Mapping[str, Any]) -> None:
        self._model = model
        self._txn_id = str(conf["transactional.id"])
        self._timeout_ms = int(conf.get("transaction.timeout.ms", 60_000))
        self._stats_cb = conf.get("stats_cb")
        self._error_cb = conf.get("error_cb")
        self._on_delivery = conf.get("on_delivery")
        self._pid = -1
        self._epoch = -1
        self._buffer: list[tuple[str, int, Any, Any]] = []
        self._sent: dict[tuple[str, int], int] = {}
        self._txn_state = "Init"

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        """The cluster's metadata: the model has no brokers to learn, so nothing to wait for."""

    def init_transactions(self, timeout: float | None = None) -> None:
        self._pid, self._epoch = self._model.init_producer_id(self._txn_id, self._timeout_ms)
        self._txn_state = "Ready"

    def begin_transaction(self) -> None:
        self._txn_state = "InTransaction"
        self._sent = {}

    def produce(
        self, topic: str, value: Any = None, key: Any = None, partition: int = -1, **kwargs: Any
    ) -> None:
        if partition is None or partition < 0:
            partition = (
                zlib.crc32(key if isinstance(key, bytes) else str(key).encode()) % self._model.partitions
            )
        as_bytes = [x.encode() if isinstance(x, str) else x for x in (key, value)]
        self._buffer.append((topic, partition, as_bytes[0], as_bytes[1]))

    def poll(self, timeout: float | None = None) -> int:
        if self._stats_cb is not None:
            fenced = self._pid >= 0 and self._model.current(self._txn_id, self._pid, self._epoch) is None
            stats = {
                "eos": {
                    "idemp_state": "Assigned" if self._pid >= 0 else "Init",
                    "producer_id": self._pid,
                    "producer_epoch": self._epoch,
                    "txn_state": "FatalError" if fenced else self._txn_state,
                },
                "topics": {
                    t: {"partitions": {str(p): {"txmsgs": n} for (tt, p), n in self._sent.items() if tt == t}}
                    for t in {t for t, _ in self._sent}
                },
            }
            self._stats_cb(json.dumps(stats))
        return 0

    def flush(self, timeout: float | None = None) -> int:
        records, self._buffer = self._buffer, []
        if records and not self._model.append(self._txn_id, self._pid, self._epoch, records):
            error = KafkaError(KafkaError._FENCED, "producer fenced by a newer epoch", fatal=True)
            if self._error_cb is not None:
                self._error_cb(error)
            return 0
        for t, p, _, _ in records:
            self._sent[(t, p)] = self._sent.get((t, p), 0) + 1
        return 0

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._buffer = []
        m = self._model.current(self._txn_id, self._pid, self._epoch)
        if m is None:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        if m.state == "Ongoing":
            self._model.end_txn(
                self._model.coordinator_of(self._txn_id), self._txn_id, self._pid, self._epoch, False
            )
        self._txn_state = "Ready"


class ModelEndOffsets:
    """``clients.EndOffsets`` answered by :class:`KafkaModel`."""

    def __init__(self, model: KafkaModel) -> None:
        self._model = model

    def read(self, topic: str, partition: int, timeout_s: float) -> int:
        return self._model.end_offset(topic, partition)


class ModelTransport:
    """The driver-side transport of the Kafka sink's admin, answered by :class:`KafkaModel`."""

    def __init__(self, model: KafkaModel) -> None:
        self._model = model

    def find_coordinator(self, transactional_id: str) -> int:
        return self._model.coordinator_of(transactional_id)

    def end_txn(
        self, node: int, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        return self._model.end_txn(node, transactional_id, producer_id, producer_epoch, commit)

    def describe_transactions(self, node: int, transactional_ids: Sequence[str]) -> list[DescribedTxn]:
        return self._model.describe(node, transactional_ids)

    def list_transactions(self, states: Sequence[str], pattern: str | None) -> list[tuple[str, int, str]]:
        return self._model.list_transactions(states, pattern)

    def transaction_outcome(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        since_ms: int,
        until_ms: int,
        from_offset: int | None = None,
    ) -> MarkerSearch:
        return self._model.transaction_outcome(
            topic, partition, producer_id, producer_epoch, since_ms, until_ms, from_offset
        )

    def close(self) -> None:
        return None

    def broker_config(self, key: str) -> list[str]:
        return []

    def topic_config(self, topic: str, key: str) -> str | None:
        return None

    def topic_exists(self, topic: str) -> bool:
        return True

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        return None


def _wall_ms() -> int:
    return int(time.time() * 1000)
