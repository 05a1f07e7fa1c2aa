"""Executor side: one transactional confluent-kafka producer per subtask and epoch.

``open`` → ``write`` (whole Arrow batches) → ``pre_commit`` (flush; the committable) — and never
commit. The producer is then dropped: destroying a librdkafka producer leaves its transaction
open (checked against a real broker in ``tests/integration/kafka/test_facts.py``), and the driver
commits it with EndTxn (:mod:`twophase.connectors.kafka.internal.committer`).

librdkafka does not expose its producer id and epoch through an API; its statistics do (the
``eos`` object of STATISTICS.md, delivered to ``stats_cb`` from ``poll``). The writer reads them
after ``init_transactions`` and checks them again after the final flush.

After the final flush the writer also reads the end offset of the first partition it wrote
(``marker_offset``; one ListOffsets per transaction, nothing per record): the transaction's marker,
which EndTxn writes only later, cannot precede it, so a restore that must look for the marker in
the log reads only what other producers appended between the pre-commit and the commit. Delivery
reports would give offsets too, but only at a Python call per record (confluent-kafka builds a
message object for every successful delivery once ``delivery.report.only.error`` is off).

State machine of a :class:`KafkaTransaction`::

    OPEN ──write──► OPEN
    OPEN ──pre_commit──► PRE_COMMITTED   (records written: a committable)
    OPEN ──pre_commit──► EMPTY           (no records: aborted here, no committable)
    OPEN ──abort_open──► ABORTED
    PRE_COMMITTED / EMPTY / ABORTED ──abort_open──► unchanged (the driver owns pre-committed ones)

Anything else raises IllegalTransitionError.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import tenacity
from confluent_kafka import KafkaError, KafkaException, Producer

from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.errors import KafkaTransactionError
from twophase.connectors.kafka.internal import naming, security, security_settings, serializers
from twophase.connectors.kafka.internal.clients import EndOffsets
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.connectors.kafka.internal.producer_callbacks import (
    ProducerErrors,
    ProducerLog,
    ProducerStatistics,
    produce_error,
    rdkafka_log,
)
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import IllegalTransitionError, RecordError, ServiceUnavailableError

log = logging.getLogger(__name__)

DEFAULT_CLIENT_MAX_MESSAGE_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes``."""
RECORD_OVERHEAD_BYTES = 100
"""Room for the record batch header and record framing when checking a record against
``max.message.bytes`` (a one-record batch adds 61 bytes of header plus varints)."""
LINEAGE_JOB_HEADER = "twophase.job"
LINEAGE_CHECKPOINT_HEADER = "twophase.checkpoint"
_BROKEN_TXN_STATES = frozenset({"AbortableError", "FatalError"})
_CLIENT_KEY_PREFIXES = (
    "bootstrap.",
    "metadata.broker.list",
    "security.",
    "sasl.",
    "enable.sasl.",
    "ssl.",
    "ssl_",
    "enable.ssl.",
    "socket.",
    "client.",
    "broker.",
    "https.",
    "api.version.",
)
"""librdkafka settings that reach and log in to the brokers: what the client reading an end offset
takes from the producer's configuration (none of the producer's own, such as its transactional id)."""


class TxnState(enum.Enum):
    """States of a :class:`KafkaTransaction` (see the module docstring)."""

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    EMPTY = "empty"
    ABORTED = "aborted"


class KafkaTransaction:
    """One subtask's open Kafka transaction (executor side; never serialized).

    Create with :meth:`open`. Holds the live producer until :meth:`pre_commit` or
    :meth:`abort_open`.
    """

    def __init__(
        self,
        config: KafkaSinkConfig,
        ctx: WriterContext,
        transactional_id: str,
        producer: Producer,
        stats: ProducerStatistics,
        errors: ProducerErrors,
        max_record_bytes: int,
        end_offsets: EndOffsets | None = None,
    ) -> None:
        self.config = config
        self.ctx = ctx
        self.transactional_id = transactional_id
        self.state = TxnState.OPEN
        self.record_count = 0
        self.batch_count = 0
        self.producer_id = -1
        self.producer_epoch = -1
        self.opened_ms = int(time.time() * 1000)
        """Wall-clock ms before ``init_transactions``: no record or marker of this transaction is
        older (up to clock skew between executor and broker)."""
        self.max_record_bytes = max_record_bytes
        self._end_offsets = end_offsets
        self._producer: Producer | None = producer
        self._stats = stats
        self._errors = errors
        self._lineage: list[tuple[str, bytes]] | None = None
        if config.lineage_headers:
            self._lineage = [
                (LINEAGE_JOB_HEADER, ctx.job_id.encode("utf-8")),
                (LINEAGE_CHECKPOINT_HEADER, str(ctx.checkpoint_id).encode("ascii")),
            ]
        timeout_s = config.transaction_timeout_ms / 1000.0
        # Slow path only: the local queue is full, so serve the delivery queue and try again.
        self._when_queue_full = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(BufferError),
            stop=tenacity.stop_after_delay(timeout_s),
            wait=tenacity.wait_fixed(0),
            reraise=True,
        )

    # --- open ------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        config: KafkaSinkConfig,
        ctx: WriterContext,
        topic_max_message_bytes: int | None = None,
        new_producer: Callable[[dict[str, Any]], Any] = Producer,
        end_offsets: Callable[[dict[str, Any]], EndOffsets] | None = None,
    ) -> KafkaTransaction:
        """Create the producer for the transactional id of ``ctx``'s attempt and slot, await the
        cluster's metadata, ``init_transactions`` (which ends whatever the id's previous
        checkpoint left open), read the producer id and epoch from statistics, and
        ``begin_transaction``.

        Args:
            topic_max_message_bytes: the topic's ``max.message.bytes`` if known (read on the
                driver by ``check_config``); records above it raise RecordError before producing.
            new_producer: makes the producer from librdkafka configuration (confluent-kafka's
                ``Producer``; a test passes a model's).
            end_offsets: makes, from librdkafka configuration, the client that reads the end
                offset for the committable's ``marker_offset`` (``ConfluentClients.end_offsets``);
                ``None``: the committable has none.

        Raises:
            ServiceUnavailableError: ``init_transactions`` kept timing out.
            KafkaAuthenticationError: the listener refused the login or the TLS handshake.
            KafkaAuthorizationError: Write on the transactional id is denied.
            KafkaTransactionError: fatal producer error, or no producer id in statistics in time.
        """
        txn_id = naming.transactional_id_for(
            config.prefix(ctx.job_id),
            ctx.sink_name,
            ctx.partition,
            ctx.checkpoint_id,
            config.pool_size,
            ctx.attempt,
        )
        stats = ProducerStatistics()
        errors = ProducerErrors()
        conf: dict[str, Any] = dict(config.producer_config(txn_id))
        conf.update(
            {
                "statistics.interval.ms": config.statistics_interval_ms,
                "stats_cb": stats,
                "error_cb": errors.on_error,
                "on_delivery": errors.on_delivery,
                "delivery.report.only.error": True,
                "logger": ProducerLog(errors),
            }
        )
        client_limit = int(conf.get("message.max.bytes", DEFAULT_CLIENT_MAX_MESSAGE_BYTES))
        limit = min(client_limit, topic_max_message_bytes or client_limit) - RECORD_OVERHEAD_BYTES
        producer = new_producer(conf)
        txn = cls(config, ctx, txn_id, producer, stats, errors, limit, _end_offsets(config, end_offsets))
        try:
            if security_settings.protocol_of(config.client_config) != "PLAINTEXT":
                security.await_login(producer, lambda: errors.security, config, ctx.sink_name)
            txn._await_metadata()
            txn._init_transactions()
            txn.producer_id, txn.producer_epoch = txn._wait_for_producer_id()
            producer.begin_transaction()
        except KafkaException as e:
            txn._release()
            if e.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise security.denied(
                    config,
                    ctx.sink_name,
                    "Write",
                    f"TransactionalId {txn_id!r}",
                    "InitProducerId; grant Write and Describe on the sink's TransactionalId prefix",
                ) from None
            raise KafkaTransactionError(f"{txn_id}: cannot open a transaction: {e.args[0].str()}") from None
        except BaseException:
            txn._release()
            raise
        log.info(
            "transaction opened %s transactional_id=%s producer_id=%d producer_epoch=%d",
            _kv(ctx),
            txn_id,
            txn.producer_id,
            txn.producer_epoch,
        )
        return txn

    def _await_metadata(self) -> None:
        # A new librdkafka producer looks its transaction coordinator up through the bootstrap
        # broker, which it decommissions once the first metadata names the brokers; when that
        # lands between lookup and answer, or before a named broker is connected, the lookup
        # waits for librdkafka's 500 ms coordinator timer (every other producer against one
        # broker, librdkafka 2.16). Two metadata requests first: the first names the brokers, the
        # second is answered by one of them, so init_transactions finds a connected broker that
        # stays (measured: 19 ms, none of 120 slow). The topic's metadata is what the first
        # produce asks for anyway; an unreachable cluster is left for init_transactions to
        # report, with its retries.
        producer = self._live()
        timeout_s = min(self.config.init_timeout_ms, self.config.request_timeout_ms) / 1000.0
        try:
            for _ in range(2):
                producer.list_topics(self.config.topic, timeout=timeout_s)
        except KafkaException as e:
            log.debug("no metadata before init_transactions %s error=%s", _kv(self.ctx), e.args[0].str())

    def _init_transactions(self) -> None:
        producer = self._live()
        timeout_s = self.config.init_timeout_ms / 1000.0

        def retriable(e: BaseException) -> bool:
            return isinstance(e, KafkaException) and bool(e.args[0].retriable())

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.config.connect_attempts),
            wait=tenacity.wait_exponential(multiplier=self.config.connect_backoff_ms / 1000.0, max=30),
            retry=tenacity.retry_if_exception(retriable),
            reraise=True,
        )
        try:
            retrying(producer.init_transactions, timeout_s)
        except KafkaException as e:
            if not retriable(e):
                raise
            raise ServiceUnavailableError(
                f"Kafka brokers {self.config.bootstrap_servers} unreachable: init_transactions of "
                f"{self.transactional_id} failed {self.config.connect_attempts} times: {e.args[0].str()}"
            ) from None

    def _wait_for_producer_id(self) -> tuple[int, int]:
        # Statistics only arrive through poll(). The producer is new, so an assigned id in them
        # is this init_transactions' own.
        producer = self._live()
        poll_s = self.config.statistics_interval_ms / 2000.0
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_delay(self.config.stats_wait_ms / 1000.0),
            retry=tenacity.retry_if_result(lambda found: found is None),
            wait=tenacity.wait_fixed(0),
        )
        try:
            found = retrying(lambda: (producer.poll(poll_s), self._stats.producer_id_and_epoch())[1])
        except tenacity.RetryError:
            raise KafkaTransactionError(
                f"{self.transactional_id}: librdkafka statistics gave no producer id/epoch within "
                f"{self.config.stats_wait_ms} ms (eos={self._stats.eos})"
            ) from None
        assert found is not None
        return found

    # --- write -----------------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        """Produce every row of ``batch`` into the transaction.

        Raises:
            RecordError: a record is larger than ``max.message.bytes`` or otherwise refused; the
                message names the partition and the batch row.
            KafkaTransactionError: an earlier record failed delivery, or the producer failed.
        """
        self._transition("write", TxnState.OPEN)
        self._raise_if_failed()
        config = self.config
        n = batch.num_rows
        self.batch_count += 1
        if n == 0:
            return
        value_col = batch.column(config.value_column)
        values = serializers.payloads(value_col, config.value_format)
        sizes = serializers.payload_sizes(value_col, config.value_format, values)
        keys: list[serializers.Payload] | None = None
        if config.key_column is not None:
            key_col = batch.column(config.key_column)
            keys = serializers.payloads(key_col, config.key_format)
            sizes = pc.add(sizes, serializers.payload_sizes(key_col, config.key_format, keys))
        headers: list[Any] | None = None
        if config.headers_column is not None:
            row_headers = serializers.headers(batch.column(config.headers_column))
            sizes = pc.add(sizes, pa.array(serializers.header_sizes(row_headers), type=pa.int64()))
            if self._lineage is not None:
                lineage = self._lineage
                headers = [lineage if h is None else h + lineage for h in row_headers]
            else:
                headers = row_headers
        elif self._lineage is not None:
            headers = [self._lineage] * n
        self._check_sizes(sizes)
        partitions: list[int] | None = None
        if config.partition_column is not None:
            partitions = pc.fill_null(batch.column(config.partition_column), -1).to_pylist()
        topics: list[str] | None = None
        if config.topic_column is not None:
            topic_col = batch.column(config.topic_column)
            if config.topic is not None:
                topic_col = pc.fill_null(topic_col, config.topic)
            elif topic_col.null_count:
                row = pc.index(pc.is_null(topic_col), True).as_py()
                raise RecordError(self._where(row) + f": no topic (column {config.topic_column!r} is null)")
            topics = topic_col.to_pylist()
        timestamps: list[int] | None = None
        if config.timestamp_column is not None:
            timestamps = serializers.timestamps_ms(batch.column(config.timestamp_column))
        if topics is None and partitions is None and headers is None and timestamps is None:
            assert config.topic is not None
            self._produce_simple(config.topic, values, keys if keys is not None else [None] * n)
        else:
            self._produce_general(
                topics if topics is not None else [config.topic] * n,
                values,
                keys if keys is not None else [None] * n,
                partitions if partitions is not None else [-1] * n,
                headers if headers is not None else [None] * n,
                timestamps if timestamps is not None else [0] * n,
            )
        self.record_count += n
        self._live().poll(0)  # serve delivery errors and statistics
        self._raise_if_failed()

    def _produce_simple(self, topic: str, values: list[Any], keys: list[Any]) -> None:
        produce = self._live().produce
        n = len(values)
        start = i = 0
        while start < n:
            try:
                for i in range(start, n):
                    produce(topic, values[i], keys[i])
                start = n
            except BufferError:
                self._produce_when_queue_full(i, topic, values[i], keys[i])
                start = i + 1
            except (KafkaException, TypeError) as e:
                raise self._record_error(e, i) from None

    def _produce_general(
        self,
        topics: list[Any],
        values: list[Any],
        keys: list[Any],
        partitions: list[int],
        headers: list[Any],
        timestamps: list[int],
    ) -> None:
        produce = self._live().produce
        n = len(values)
        start = i = 0
        while start < n:
            try:
                for i in range(start, n):
                    produce(
                        topics[i],
                        values[i],
                        keys[i],
                        partition=partitions[i],
                        headers=headers[i],
                        timestamp=timestamps[i],
                    )
                start = n
            except BufferError:
                self._produce_when_queue_full(
                    i,
                    topics[i],
                    values[i],
                    keys[i],
                    partition=partitions[i],
                    headers=headers[i],
                    timestamp=timestamps[i],
                )
                start = i + 1
            except (KafkaException, TypeError) as e:
                raise self._record_error(e, i) from None

    def _produce_when_queue_full(self, row: int, *args: Any, **kwargs: Any) -> None:
        producer = self._live()

        def poll_then_produce() -> None:
            # only error reports are delivered, so poll() mostly just waits: keep it short
            producer.poll(0.005)
            producer.produce(*args, **kwargs)

        try:
            self._when_queue_full(poll_then_produce)
        except BufferError:
            raise KafkaTransactionError(
                f"{self._where(row)}: local producer queue stayed full for "
                f"{self.config.transaction_timeout_ms} ms"
            ) from None
        except (KafkaException, TypeError) as e:
            raise self._record_error(e, row) from None

    def _check_sizes(self, sizes: pa.Array) -> None:
        too_large = pc.greater(sizes, self.max_record_bytes)
        if pc.any(too_large).as_py():
            row = pc.index(too_large, True).as_py()
            raise RecordError(
                f"{self._where(row)}: record of {sizes[row].as_py()} bytes (key, value, headers) "
                f"exceeds the limit of {self.max_record_bytes} bytes (max.message.bytes minus "
                f"{RECORD_OVERHEAD_BYTES} bytes of framing)"
            )

    def _record_error(self, e: Exception, row: int) -> Exception:
        return produce_error(e, self._where(row))

    def _where(self, row: int) -> str:
        return (
            f"Kafka sink {self.ctx.sink_name!r} partition {self.ctx.partition} "
            f"batch {self.batch_count - 1} row {row} (checkpoint {self.ctx.checkpoint_id}, "
            f"transactional id {self.transactional_id})"
        )

    # --- pre-commit ------------------------------------------------------------------------------

    def pre_commit(self) -> KafkaCommittable | None:
        """Flush every record and return the committable, or ``None`` (and abort) if empty.

        The producer is released but its transaction stays open for the driver's EndTxn.

        Raises:
            KafkaTransactionError: a record was not delivered, or the producer was fenced or
                had its epoch bumped while writing.
        """
        self._transition("pre_commit", TxnState.OPEN)
        producer = self._live()
        remaining = producer.flush(self.config.transaction_timeout_ms / 1000.0)
        if remaining:
            raise KafkaTransactionError(
                f"{self.transactional_id}: {remaining} records not delivered within "
                f"transaction.timeout.ms={self.config.transaction_timeout_ms}"
            )
        self._raise_if_failed()
        if self.record_count == 0:
            producer.abort_transaction(self.config.init_timeout_ms / 1000.0)
            self.state = TxnState.EMPTY
            self._release()
            log.info("empty transaction aborted %s transactional_id=%s", _kv(self.ctx), self.transactional_id)
            return None
        self._confirm_producer_after_flush()
        partitions = tuple(sorted(self._stats.partitions))
        if not partitions:
            partitions = tuple(sorted({(t, -1) for t in self._topics_hint()}))
        committable = KafkaCommittable(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            topic_partitions=partitions,
            record_count=self.record_count,
            checkpoint_id=self.ctx.checkpoint_id,
            opened_ms=self.opened_ms,
            marker_offset=self._marker_offset(partitions),
        )
        self.state = TxnState.PRE_COMMITTED
        self._release()  # destroying the producer leaves the transaction open
        log.info(
            "pre-committed %s transactional_id=%s producer_id=%d producer_epoch=%d records=%d",
            _kv(self.ctx),
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.record_count,
        )
        return committable

    def _confirm_producer_after_flush(self) -> None:
        # Two statistics emitted after the flush: the second was certainly produced after it, so
        # it shows every partition written and the producer's final id, epoch and state.
        producer = self._live()
        mark = self._stats.emitted
        poll_s = self.config.statistics_interval_ms / 2000.0
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_delay(self.config.stats_wait_ms / 1000.0),
            retry=tenacity.retry_if_result(lambda fresh: not fresh),
            wait=tenacity.wait_fixed(0),
        )
        try:
            retrying(lambda: (producer.poll(poll_s), self._stats.emitted >= mark + 2)[1])
        except tenacity.RetryError:
            raise KafkaTransactionError(
                f"{self.transactional_id}: no librdkafka statistics within {self.config.stats_wait_ms} ms "
                "after the flush; cannot confirm the producer epoch"
            ) from None
        self._raise_if_failed()
        now = self._stats.producer_id_and_epoch()
        txn_state = self._stats.eos.get("txn_state")
        if now != (self.producer_id, self.producer_epoch) or txn_state in _BROKEN_TXN_STATES:
            raise KafkaTransactionError(
                f"{self.transactional_id}: producer changed while writing (opened as "
                f"{self.producer_id}/{self.producer_epoch}, now {now}, txn_state={txn_state}); "
                "the transaction was fenced or aborted"
            )

    def _marker_offset(self, partitions: tuple[tuple[str, int], ...]) -> int | None:
        """The end offset of the first known partition, read now that every record was
        acknowledged and before the committable exists (so before any EndTxn): an offset the
        transaction's marker cannot precede. ``None`` when it cannot be read; the restore then
        searches from ``opened_ms``, as for committables of version 2."""
        first = next(((t, p) for t, p in partitions if p >= 0), None)
        reader, self._end_offsets = self._end_offsets, None
        if reader is None or first is None:
            return None
        try:
            return reader.read(*first, self.config.request_timeout_ms / 1000.0)
        except Exception as e:  # the commit does not need it; a restore that does says so
            log.warning(
                "end offset not read; a restore that must find this transaction's marker in the "
                "log searches from when it was opened %s transactional_id=%s partition=%s error=%r",
                _kv(self.ctx),
                self.transactional_id,
                first,
                e,
            )
            return None

    def _topics_hint(self) -> set[str]:
        return {self.config.topic} if self.config.topic is not None else {"*"}

    # --- abort -----------------------------------------------------------------------------------

    def abort_open(self) -> None:
        """Best-effort abort of a transaction that was never pre-committed; idempotent.

        Whatever this cannot abort is fenced later by ``abort_lingering`` (or by the
        ``init_transactions`` of the same attempt number ``pool_size`` checkpoints later).
        """
        if self.state is not TxnState.OPEN:
            return
        self.state = TxnState.ABORTED
        producer = self._producer
        if producer is None:
            return
        try:
            producer.abort_transaction(self.config.init_timeout_ms / 1000.0)
            log.info("open transaction aborted %s transactional_id=%s", _kv(self.ctx), self.transactional_id)
        except KafkaException as e:
            log.warning(
                "abort of open transaction failed %s transactional_id=%s error=%s",
                _kv(self.ctx),
                self.transactional_id,
                e.args[0].str(),
            )
        finally:
            self._release()

    # --- helpers ---------------------------------------------------------------------------------

    def _transition(self, action: str, required: TxnState) -> None:
        if self.state is not required:
            raise IllegalTransitionError("KafkaTransaction", self.state.name, action)

    def _live(self) -> Producer:
        if self._producer is None:
            raise IllegalTransitionError("KafkaTransaction", self.state.name, "use producer")
        return self._producer

    def _release(self) -> None:
        # Never close(): confluent-kafka's close() aborts the transaction. Dropping the last
        # reference destroys the librdkafka handle, which leaves it open.
        self._producer = None
        self._end_offsets = None

    def _raise_if_failed(self) -> None:
        if self._errors.topics_denied:
            topics = ", ".join(repr(t) for t in sorted(self._errors.topics_denied))
            raise security.denied(
                self.config,
                self.ctx.sink_name,
                "Write",
                f"Topic {topics}",
                f"Produce in transaction {self.transactional_id}; grant Write and Describe on it",
            )
        if self._errors.count:
            shown = "; ".join(self._errors.messages)
            if self._errors.size_too_large:
                raise RecordError(
                    f"Kafka sink {self.ctx.sink_name!r} partition {self.ctx.partition}: the broker refused "
                    f"{self._errors.count} record(s) as too large ({shown})"
                )
            raise KafkaTransactionError(
                f"{self.transactional_id}: {self._errors.count} record(s) failed delivery ({shown})"
            )


def _end_offsets(
    config: KafkaSinkConfig, make: Callable[[dict[str, Any]], EndOffsets] | None
) -> EndOffsets | None:
    """The client that will read the end offset at pre-commit, made now so that its connections
    are up by then; ``None`` (logged) when it cannot be made."""
    if make is None:
        return None
    conf = {
        k: v
        for k, v in config.producer_config(None).items()
        if k.startswith(_CLIENT_KEY_PREFIXES) or k == "oauth_cb"
    }
    conf["logger"] = rdkafka_log
    try:
        return make(conf)
    except Exception as e:  # as when it cannot read: the restore searches from opened_ms
        log.warning("no client for the end offset bootstrap=%s error=%r", config.bootstrap_servers, e)
        return None


def _kv(ctx: WriterContext) -> str:
    return " ".join(f"{k}={v}" for k, v in ctx.log_fields().items())
