"""The driver-side transaction calls, one request each, through kafka-python 3.x.

:class:`TransactionTransport` is the seam under :class:`~twophase.connectors.kafka.internal.admin.KafkaAdmin`:
the admin decides which broker to ask (it caches each transactional id's coordinator and
re-finds it after NOT_COORDINATOR and friends); a transport only sends one request to one broker
and returns the answer. :class:`KafkaPythonTransport` sends kafka-python's own request classes
(``FindCoordinatorRequest``, ``EndTxnRequest``, ``DescribeTransactionsRequest``, and
``ListOffsetsRequest`` and ``FetchRequest`` to find a transaction's marker in a partition's log)
through its connection manager, and uses ``KafkaAdminClient`` for ListTransactions, DescribeConfigs
and CreateTopics. No wire encoding here: record batches are parsed by kafka-python's
``MemoryRecords``. Tests answer the same protocol with a model of the
transaction coordinator (``tests/support/kafka_model.py``).
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass
from typing import Any, Protocol

import kafka.errors as kerrors
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.transactions import DescribeTransactionsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer.transaction import EndTxnRequest
from kafka.record import MemoryRecords

END_TXN_MIN_VERSION = 3
END_TXN_MAX_VERSION = 4
"""EndTxn v3/v4: transaction version 1 semantics (KIP-98), which librdkafka's transactions use.
v5+ is KIP-890's TV2, where the coordinator bumps the epoch on every EndTxn."""
EARLIEST = -2
LATEST = -1
"""ListOffsets' timestamps for a partition's first offset and its end (the high watermark)."""
FETCH_BYTES = 4 * 1024 * 1024
"""Bytes one Fetch of a marker search asks for (ms-scale on a local broker)."""
MARKER_SCAN_BYTES = 4 * 1024 * 1024 * 1024
"""How much of a partition's log a marker search reads at most before it answers "not found"
(``KafkaSinkConfig.marker_search_max_bytes`` overrides it). From a committable's ``marker_offset``
that is what was appended between its pre-commit and its commit: other producers' records, and the
same epoch's other tasks' records in the partition (each task reads its own end offset, so a
catch-up epoch of many tasks counts against it); from ``opened_ms`` (older committables) it also
counts the transaction's own records and five minutes of other traffic before it. 4 GiB is read
only by a restore whose checkpoint lost its committed marker after the broker forgot the id."""


class SearchStop(enum.Enum):
    """Where a search of a partition's log for a transaction's marker stopped."""

    MARKER = "at the transaction's marker"
    END_OF_LOG = "at the end of the log"
    LATER_MARKER = "at a marker appended after the transaction's timeout"
    BYTES_BOUND = "at its byte bound"
    NOTHING_SINCE = "before it began: no record at or after the time it starts from"
    PAST_END = "before it began: the log ends before the offset it starts from"


@dataclass(frozen=True)
class MarkerSearch:
    """The result of a marker search (:meth:`TransactionTransport.transaction_outcome`).

    Attributes:
        found: True for the COMMIT marker, False for the ABORT marker, ``None`` for neither.
        stop: where the search stopped.
        start: the offset it started from (-1 when it never began).
        end: the offset it would have read next.
        scanned: bytes read.
        bound: its byte bound (:data:`MARKER_SCAN_BYTES` when it ran).
    """

    found: bool | None
    stop: SearchStop
    start: int = -1
    end: int = -1
    scanned: int = 0
    bound: int = 0

    def describe(self) -> str:
        """One line: what the search read and where it stopped (for logs and a LOST's message)."""
        if self.start < 0:
            return f"stopped {self.stop.value}"
        read = f"read offsets {self.start}..{self.end} ({self.scanned} bytes)"
        if self.stop is SearchStop.BYTES_BOUND:
            return (
                f"stopped at its bound of {self.bound} bytes (marker_search_max_bytes) at offset {self.end}, "
                f"after it {read}; the marker may lie beyond it: raise marker_search_max_bytes"
            )
        return f"{read} and stopped {self.stop.value}"


@dataclass(frozen=True)
class DescribedTransaction:
    """One id's DescribeTransactions answer (KIP-664).

    Attributes:
        transactional_id: the id.
        error_code: Kafka's error code for this id (0: none; 16: NOT_COORDINATOR; 105: unknown id).
        state: the broker's state name (Empty, Ongoing, PrepareCommit, CompleteCommit, …).
        producer_id: the current producer id.
        producer_epoch: the current producer epoch.
        transaction_timeout_ms: the transaction timeout, ms.
        transaction_start_time_ms: when the Ongoing transaction started (ms since the epoch), or -1.
    """

    transactional_id: str
    error_code: int
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1


class TransactionTransport(Protocol):
    """One request to one broker; network failures raise one of ``admin.NETWORK_ERRORS``."""

    def find_coordinator(self, transactional_id: str) -> int:
        """FindCoordinator (key type transaction): the coordinating broker's node id.

        Raises:
            kafka.errors.CoordinatorNotAvailableError (retriable) and other broker errors.
        """
        ...

    def end_txn(
        self, node: int, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """EndTxn (v3/v4) at ``node``; returns the response's error code."""
        ...

    def describe_transactions(self, node: int, transactional_ids: list[str]) -> list[Any]:
        """DescribeTransactions at ``node``: one :class:`DescribedTransaction`-like answer per id."""
        ...

    def list_transactions(self, states: list[str], pattern: str | None) -> list[tuple[str, int, str]]:
        """ListTransactions on every broker: ``(transactional id, producer id, state)`` rows.

        Raises:
            kafka.errors.UnsupportedVersionError / IncompatibleBrokerVersion: brokers < 3.0.
        """
        ...

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
        """The marker producer ``producer_id``/``producer_epoch``'s transaction left in
        ``topic[partition]`` (KIP-98: EndTxn writes a COMMIT or ABORT control record to every
        partition the transaction wrote). The log is read (read_uncommitted, so that aborted data
        and markers are seen) from ``from_offset`` when given (an offset the marker cannot
        precede), else from its first record at or after ``since_ms``.

        Returns:
            What was found (``found``: True for a COMMIT marker, False for an ABORT marker, ``None``
            for none) and where the search stopped: at the marker, at the end of the log, at a
            marker appended after ``until_ms``, after :data:`MARKER_SCAN_BYTES`, or before it began
            (no record after ``since_ms``; ``from_offset`` past the end of the log).

        Raises:
            one of ``admin.NETWORK_ERRORS``; kafka.errors for authorization and other broker errors.
        """
        ...

    def close(self) -> None:
        """Close connections. Idempotent."""
        ...

    def broker_config(self, key: str) -> list[str]:
        """The value of broker setting ``key`` on every broker (DescribeConfigs)."""
        ...

    def topic_config(self, topic: str, key: str) -> str | None:
        """The value of topic setting ``key`` (DescribeConfigs), or ``None``."""
        ...

    def topic_exists(self, topic: str) -> bool:
        """True when the cluster has ``topic``."""
        ...

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        """CreateTopics; an existing topic is fine."""
        ...


class KafkaPythonTransport:
    """:class:`TransactionTransport` over a connected ``kafka.KafkaAdminClient`` (plus the broker
    and topic configuration calls the sink's start-up checks make)."""

    def __init__(self, client: KafkaAdminClient, marker_search_max_bytes: int | None = None) -> None:
        self._client = client
        self._max_bytes = marker_search_max_bytes

    @classmethod
    def connect(
        cls, conf: dict[str, Any], marker_search_max_bytes: int | None = None
    ) -> KafkaPythonTransport:
        """Bootstrap a client (one attempt; the admin retries); ``marker_search_max_bytes`` bounds
        a marker search (``None``: :data:`MARKER_SCAN_BYTES`).

        Raises:
            one of ``admin.NETWORK_ERRORS``: no broker answered.
        """
        # KafkaAdminClient starts its IO thread before bootstrapping and does not stop it when the
        # bootstrap fails; keep a handle on the network client so a failed attempt leaks nothing.
        made: list[KafkaNetClient] = []

        def factory(**kwargs: Any) -> KafkaNetClient:
            made.append(KafkaNetClient(**kwargs))
            return made[-1]

        try:
            return cls(KafkaAdminClient(kafka_client=factory, **conf), marker_search_max_bytes)
        except BaseException:
            for net in made:
                net.close()
            raise

    def close(self) -> None:
        self._client.close()

    def _run(self, coro_fn: Any, *args: Any) -> Any:
        # KafkaAdminClient runs its IO on a background thread; public methods block on it the same way.
        return self._client._manager.run(coro_fn, *args)

    def find_coordinator(self, transactional_id: str) -> int:
        async def call() -> int:
            request = FindCoordinatorRequest(
                key_type=CoordinatorType.TRANSACTION.value, coordinator_keys=[transactional_id], min_version=4
            )
            response = await self._client._manager.send(request)
            (found,) = response.coordinators
            error = kerrors.for_code(found.error_code)
            if error is not kerrors.NoError:
                raise error(f"FindCoordinator(transaction, {transactional_id!r})")
            node = self._client._manager.cluster.add_coordinator(
                found, CoordinatorType.TRANSACTION, transactional_id, synthesize_node_id=False
            )
            return int(node)

        return int(self._run(call))

    def end_txn(
        self, node: int, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        async def call() -> int:
            request = EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=commit,
                min_version=END_TXN_MIN_VERSION,
                max_version=END_TXN_MAX_VERSION,
            )
            response = await self._client._manager.send(request, node_id=node)
            return int(response.error_code)

        return int(self._run(call))

    def describe_transactions(self, node: int, transactional_ids: list[str]) -> list[Any]:
        async def call() -> list[DescribedTransaction]:
            request = DescribeTransactionsRequest(transactional_ids=transactional_ids)
            response = await self._client._manager.send(request, node_id=node)
            return [
                DescribedTransaction(
                    transactional_id=t.transactional_id,
                    error_code=int(t.error_code),
                    state=str(t.transaction_state),
                    producer_id=int(t.producer_id),
                    producer_epoch=int(t.producer_epoch),
                    transaction_timeout_ms=int(t.transaction_timeout_ms),
                    transaction_start_time_ms=int(t.transaction_start_time_ms),
                )
                for t in response.transaction_states
            ]

        return list(self._run(call))

    def list_transactions(self, states: list[str], pattern: str | None) -> list[tuple[str, int, str]]:
        try:
            listing = self._client.list_transactions(state_filters=states, transactional_id_pattern=pattern)
        except kerrors.UnsupportedVersionError:
            if pattern is None:
                raise
            listing = self._client.list_transactions(state_filters=states)
        return [
            (t.transactional_id, int(t.producer_id), str(t.state.value))
            for rows in listing.values()
            for t in rows
        ]

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
        leader = self._leader(topic, partition)
        manager = self._client._manager

        async def list_offset(timestamp: int) -> int:
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=partition, current_leader_epoch=-1, timestamp=timestamp
                            )
                        ],
                    )
                ],
                min_version=1,
            )
            response = await manager.send(request, node_id=leader)
            (answer,) = [p for t in response.topics for p in t.partitions]
            _raise_for(answer.error_code, f"ListOffsets({topic}[{partition}], {timestamp})")
            return int(answer.offset)

        async def fetch(offset: int) -> tuple[bytes, int]:
            part = FetchRequest.FetchTopic.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=FETCH_BYTES,
            )
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=FETCH_BYTES,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
                forgotten_topics_data=[],
                rack_id="",
                min_version=4,
                max_version=12,
            )
            response = await manager.send(request, node_id=leader)
            (answer,) = [p for t in response.responses for p in t.partitions]
            _raise_for(answer.error_code, f"Fetch({topic}[{partition}]@{offset})")
            return bytes(answer.records or b""), int(answer.high_watermark)

        if from_offset is None:
            offset = int(self._run(list_offset, since_ms))
            if offset < 0:  # no record at or after since_ms
                return MarkerSearch(None, SearchStop.NOTHING_SINCE)
        else:
            # retention may have deleted the log's head, not the marker: start at what is left
            earliest, latest = (int(self._run(list_offset, t)) for t in (EARLIEST, LATEST))
            if from_offset > latest:  # a recreated topic, or a log truncated below its end
                return MarkerSearch(None, SearchStop.PAST_END)
            offset = max(from_offset, earliest)
        start, scanned, bound = offset, 0, self._max_bytes or MARKER_SCAN_BYTES
        while True:
            data, high_watermark = self._run(fetch, offset)
            found, offset, stop = marker_in(data, producer_id, producer_epoch, until_ms, offset)
            scanned += len(data)
            if found is not None or stop:
                where = SearchStop.MARKER if found is not None else SearchStop.LATER_MARKER
                return MarkerSearch(found, where, start, offset, scanned, bound)
            if offset >= high_watermark or not data:
                return MarkerSearch(None, SearchStop.END_OF_LOG, start, offset, scanned, bound)
            if scanned >= bound:
                return MarkerSearch(None, SearchStop.BYTES_BOUND, start, offset, scanned, bound)

    def _leader(self, topic: str, partition: int) -> int:
        (described,) = self._client.describe_topics([topic])
        _raise_for(described["error_code"], f"Metadata({topic!r})")
        for p in described["partitions"]:
            if p["partition_index"] == partition:
                return int(p["leader_id"])
        raise kerrors.UnknownTopicOrPartitionError(f"{topic}[{partition}]")

    # --- configuration and topics (start-up checks) ------------------------------------------

    def broker_ids(self) -> list[int]:
        """Node ids of the brokers in the cluster metadata."""
        return sorted(int(b.node_id) for b in self._client._manager.cluster.brokers())

    def broker_config(self, key: str) -> list[str]:
        """The value of broker setting ``key`` on every broker (DescribeConfigs)."""
        values = []
        for broker in self.broker_ids():
            resource = ConfigResource(ConfigResourceType.BROKER, str(broker), [key])
            result = self._client.describe_configs([resource], config_filter="all")
            entry = result.get("broker", {}).get(str(broker), {}).get(key)
            if entry is not None and entry.get("value") is not None:
                values.append(str(entry["value"]))
        return values

    def topic_config(self, topic: str, key: str) -> str | None:
        """The value of topic setting ``key`` (DescribeConfigs), or ``None``."""
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, [key])
        result = self._client.describe_configs([resource], config_filter="all")
        entry = result.get("topic", {}).get(topic, {}).get(key)
        return None if entry is None or entry.get("value") is None else str(entry["value"])

    def topic_exists(self, topic: str) -> bool:
        """True when the cluster has ``topic`` (Metadata, never auto-creating it)."""
        (described,) = self._client.describe_topics([topic])
        error = kerrors.for_code(described["error_code"])
        if error is kerrors.UnknownTopicOrPartitionError:
            return False
        if error is not kerrors.NoError:
            raise error(f"Metadata({topic!r})")
        return True

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        """CreateTopics; a topic created concurrently by someone else is fine."""
        with contextlib.suppress(kerrors.TopicAlreadyExistsError):
            self._client.create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": replication_factor}},
                wait_for_metadata=True,
            )


def marker_in(
    data: bytes, producer_id: int, producer_epoch: int, until_ms: int, offset: int
) -> tuple[bool | None, int, bool]:
    """Look through one Fetch answer's record batches for the marker of ``producer_id``/
    ``producer_epoch`` (see :meth:`TransactionTransport.transaction_outcome`).

    Returns:
        (True for COMMIT, False for ABORT or ``None``; the offset to fetch next; True when a
        marker of another transaction was appended after ``until_ms``, so that the sought one
        cannot come later). Batches below ``offset`` (a Fetch may start mid-batch) are skipped.
    """
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        if batch.next_offset <= offset:
            continue
        offset = batch.next_offset
        if not batch.is_control_batch:
            continue
        if batch.producer_id == producer_id and batch.producer_epoch == producer_epoch:
            for control in batch:
                return bool(control.commit), offset, True
        if batch.max_timestamp > until_ms:  # markers carry the broker's append time
            return None, offset, True
    return None, offset, False


def _raise_for(error_code: int, what: str) -> None:
    error = kerrors.for_code(error_code)
    if error is not kerrors.NoError:
        raise error(what)
