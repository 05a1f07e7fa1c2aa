"""The exactly-once Kafka sink: a TwoPhaseCommitSink over Kafka transactions (KIP-98).

Executor side (:mod:`~twophase.connectors.kafka.internal.writer`): a transactional producer per
subtask on a pooled transactional id, pre-committed by flushing. Driver side
(:mod:`~twophase.connectors.kafka.internal.committer`,
:mod:`~twophase.connectors.kafka.internal.lingering`): EndTxn(commit) with the recorded producer id
and epoch, and fence-aborting lingering transactions."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import kafka.errors as kerrors
import pyarrow as pa
import tenacity

from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.internal import lingering, naming, security, serializers, staged_write
from twophase.connectors.kafka.internal.admin import NETWORK_ERRORS, KafkaAdmin
from twophase.connectors.kafka.internal.clients import ConfluentClients, KafkaClients
from twophase.connectors.kafka.internal.committable import CODEC, KafkaCommittable
from twophase.connectors.kafka.internal.committer import KafkaCommitter
from twophase.connectors.kafka.internal.writer import KafkaTransaction
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import ConcurrentAttemptError, ConfigError, ServiceUnavailableError
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome, CommittableSize
from twophase.sinks.spark_staging import StagedTask, classic_jvm

log = logging.getLogger(__name__)


class KafkaSink(TwoPhaseCommitSink[KafkaTransaction, KafkaCommittable]):
    """Writes Arrow rows to Kafka exactly once (DESIGN.md §7).

    Args:
        name: the sink's name within the job: ``[A-Za-z0-9_.]+`` (part of transactional ids).
        config: see :class:`~twophase.connectors.kafka.config.KafkaSinkConfig`.
        clients: makes the producers and the driver's transport (default: confluent-kafka and
            kafka-python; tests pass a model of the transaction coordinator). Pickled with the sink.

    Raises:
        ConfigError: an invalid name.

    The instance is pickled to executors and holds configuration only (plus the topic's
    ``max.message.bytes`` once :meth:`check_config` has read it); driver-side admin connections
    are opened lazily and never pickled.
    """

    # every attempt number has its own transactional id (naming.py): a speculative copy cannot
    # fence the first attempt's transaction, and lingering cleanup aborts the one not acknowledged
    speculation_safe = True
    # One at a time: EndTxn calls are independent and the admin client is thread-safe, but
    # kafka-python encodes, sends and decodes on one Python IO thread, so concurrent commits
    # only contend for it (4 threads: 0.76x the speed of one, benchmarks/bench_recovery.py).
    commit_concurrency = 1

    def __init__(self, name: str, config: KafkaSinkConfig, *, clients: KafkaClients | None = None) -> None:
        try:
            naming.check_sink_name(name)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.name = name
        self.config = config
        self.clients = clients or ConfluentClients()
        # the pool invariant (naming.py): epoch w reuses the ids of checkpoint w - pool_size; the
        # runtime waits only as the pool needs (one spare slot), not as the configured minimum
        self.max_pending_checkpoints = naming.pool_capacity(config.pool_size)
        self.transaction_timeout_ms = config.transaction_timeout_ms  # the broker aborts after it
        self.codec = CODEC
        self.topic_max_message_bytes: int | None = None
        self._transactional_ids_checked = False
        self._admin: KafkaAdmin | None = None
        self._committer: KafkaCommitter | None = None
        self._connect_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KafkaSink(name={self.name!r}, config={self.config!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        state["_committer"] = None
        del state["_connect_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_transactional_ids_checked", False)
        self._connect_lock = threading.Lock()

    # --- start-up checks -------------------------------------------------------------------------

    def read_columns(self) -> tuple[str, ...]:
        """The mapped columns (:attr:`KafkaSinkConfig.mapped_columns`)."""
        return self.config.mapped_columns

    def validate(self, schema: pa.Schema) -> None:
        """Check the schema against the column mapping, then :meth:`check_config` (driver side).

        Raises:
            SchemaError: a mapped column is missing or of a type the sink cannot write.
            ConfigError / ServiceUnavailableError: see :meth:`check_config`.
        """
        serializers.check_schema(schema, self.config)
        if self.stages_with_spark():
            staged_write.check_schema(schema, self.config)
        self.check_config()

    def check_config(self) -> None:
        """Check the brokers before anything is written (driver side).

        - ``transaction_timeout_ms`` ≤ every broker's ``transaction.max.timeout.ms``
          (DescribeConfigs); otherwise ``init_transactions`` would fail on every executor.
        - ``topic`` exists, or is created when ``create_topic`` is set.
        - reads the topic's ``max.message.bytes`` so writers refuse larger records up front.

        Raises:
            ConfigError: timeout above the broker's maximum; unknown topic without create_topic.
            KafkaAuthenticationError: the listener refused the login or the TLS handshake.
            KafkaAuthorizationError: Describe on the topic, or Create for ``create_topic``, is denied.
            ServiceUnavailableError: the brokers cannot be reached after retries with backoff.
        """
        admin = self._connected_admin()
        config = self.config
        try:
            limits = [int(v) for v in admin.broker_config("transaction.max.timeout.ms")]
            if limits and config.transaction_timeout_ms > min(limits):
                raise ConfigError(
                    f"Kafka sink {self.name!r}: transaction_timeout_ms={config.transaction_timeout_ms} "
                    f"exceeds the broker's transaction.max.timeout.ms={min(limits)}"
                )
            if config.topic is not None:
                if not self._topic_exists(admin, config.topic):
                    if not config.create_topic:
                        raise ConfigError(
                            f"Kafka sink {self.name!r}: topic {config.topic!r} does not exist "
                            "(set create_topic=True to create it)"
                        )
                    try:
                        admin.create_topic(
                            config.topic, config.new_topic_partitions, config.new_topic_replication_factor
                        )
                    except (kerrors.TopicAuthorizationFailedError, kerrors.ClusterAuthorizationFailedError):
                        raise security.denied(
                            config,
                            self.name,
                            "Create",
                            f"Topic {config.topic!r}",
                            "CreateTopics for create_topic=True; or create the topic beforehand",
                        ) from None
                    log_event(log, logging.INFO, "topic created", sink=self.name, topic=config.topic)
                limit = admin.topic_config(config.topic, "max.message.bytes")
                self.topic_max_message_bytes = int(limit) if limit is not None else None
        except NETWORK_ERRORS as e:
            raise ServiceUnavailableError(
                f"Kafka brokers {config.bootstrap_servers} stopped answering during start-up checks: {e}"
            ) from None

    def _topic_exists(self, admin: KafkaAdmin, topic: str) -> bool:
        try:
            return admin.topic_exists(topic)
        except kerrors.TopicAuthorizationFailedError:
            raise security.denied(
                self.config,
                self.name,
                "Describe",
                f"Topic {topic!r}",
                "Metadata; grant Write and Describe on it",
            ) from None

    def _check_transactional_ids(self, admin: KafkaAdmin, job_id: str) -> None:
        """FindCoordinator and DescribeTransactions on the pool's first id need Describe on the
        TransactionalId (KIP-98): a missing prefix ACL is refused here, before any record.

        Raises:
            KafkaAuthorizationError: Describe on the id is denied.
        """
        prefix = self.config.prefix(job_id)
        first = naming.transactional_id_for(prefix, self.name, 0, 0, self.config.pool_size)
        try:
            admin.describe_transaction(first)
        except kerrors.TransactionalIdAuthorizationFailedError:
            raise security.denied(
                self.config,
                self.name,
                "Describe",
                f"TransactionalId {first!r}",
                f"FindCoordinator; grant Write and Describe on the TransactionalId prefix '{prefix}-'",
            ) from None

    # --- Spark-staged epochs (config.write_path "spark") ----------------------------------------

    def stages_with_spark(self) -> bool:
        """Whether twophase's JVM writer stages this sink's epochs (``config.write_path``)."""
        return self.config.write_path == "spark"

    def stage_with_spark(self, df: Any, job_id: str, checkpoint_id: int) -> dict[int, StagedTask]:
        """Write the epoch with twophase's JVM writer
        (:mod:`~twophase.connectors.kafka.internal.staged_write`): each Spark task's rows in a Kafka
        transaction of its own, left open and handed back.

        Returns:
            Spark partition → its open transaction (attempt, committable, records); a partition
            that wrote nothing has none.

        Raises:
            ConfigError: the session is not a classic one (the hand-off is through py4j), or a
                ``client_config`` setting the JVM writer cannot take.
            ValueError: the write handed over nothing or a partition twice.
            Exception: whatever Spark's write raises; what its tasks left open is left to the
                lingering cleanup.
        """
        spark = df.sparkSession
        jvm = classic_jvm(spark, f"Kafka sink {self.name!r}", "its transactions")
        write_id = staged_write.new_write_id()
        options = staged_write.write_options(self.config, self.name, job_id, checkpoint_id, write_id)
        rows = staged_write.projection(df, self.config)
        rows.write.format(staged_write.SOURCE).mode("append").options(**options).save()
        handed = jvm.twophase.kafka.StagedWrites.take(write_id)
        return staged_write.staged_tasks(handed, checkpoint_id)

    # --- executor side ---------------------------------------------------------------------------

    def begin_transaction(self, ctx: WriterContext) -> KafkaTransaction:
        """Open the subtask's transaction on ``<prefix>-<sink>-<partition>-<checkpoint mod pool_size>``."""
        return KafkaTransaction.open(
            self.config, ctx, self.topic_max_message_bytes, self.clients.producer, self.clients.end_offsets
        )

    def write(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        """Produce every row of ``batch`` (see :meth:`KafkaTransaction.write`)."""
        txn.write(batch)

    def pre_commit(self, txn: KafkaTransaction) -> KafkaCommittable | None:
        """Flush; the committable, or ``None`` for an empty transaction (aborted)."""
        return txn.pre_commit()

    def abort_open(self, txn: KafkaTransaction) -> None:
        """Best-effort abort of a transaction never pre-committed."""
        txn.abort_open()

    # --- driver side -----------------------------------------------------------------------------

    def commit(self, committable: KafkaCommittable) -> CommitOutcome:
        """EndTxn(commit) with the recorded id, producer id and epoch.

        See :mod:`~twophase.connectors.kafka.internal.committer` for the outcomes; unreachable
        brokers give RETRY.
        """
        try:
            return self._the_committer().commit(committable)
        except ServiceUnavailableError as e:
            log_event(log, logging.WARNING, "commit needs retry", sink=self.name, error=e)
            return CommitOutcome.RETRY

    def commit_batch(self, committables: Sequence[KafkaCommittable]) -> list[CommitOutcome]:
        """One checkpoint's transactions: their states read with one DescribeTransactions per
        coordinator, then EndTxn(commit) for each with its recorded id, producer id and epoch,
        each decided as :meth:`commit` decides it; unreachable brokers give RETRY."""
        try:
            return self._the_committer().commit_batch(committables)
        except ServiceUnavailableError as e:
            log_event(log, logging.WARNING, "commit needs retry", sink=self.name, error=e)
            return [CommitOutcome.RETRY] * len(committables)

    def recover_and_commit_batch(self, committables: Sequence[KafkaCommittable]) -> list[CommitOutcome]:
        """:meth:`commit_batch` (a re-commit is decided from the coordinator's state and the log)."""
        return self.commit_batch(committables)

    def verify_pre_committed(
        self, committables: Sequence[KafkaCommittable], in_progress: Sequence[JsonObject]
    ) -> None:
        """Each transaction is still Ongoing under the acknowledged producer id and epoch
        (DescribeTransactions): another attempt's ``init_transactions`` on the same pooled id
        would have fenced it (KIP-98) and bumped the epoch.

        Raises:
            ConcurrentAttemptError: a transaction was fenced, ended or timed out (named; a
                transaction older than ``transaction_timeout_ms`` names the timeout).
            ServiceUnavailableError: the brokers cannot be reached.
        """
        if not committables:
            return
        ids = [c.transactional_id for c in committables]
        retrying = tenacity.Retrying(  # the admin re-finds a moved coordinator between attempts
            stop=tenacity.stop_after_attempt(self.config.connect_attempts),
            wait=tenacity.wait_exponential(multiplier=self.config.connect_backoff_ms / 1000.0, max=10),
            retry=tenacity.retry_if_exception_type(NETWORK_ERRORS),
            reraise=True,
        )
        try:
            states = retrying(lambda: self._connected_admin().describe_transactions(ids))
        except NETWORK_ERRORS as e:
            raise ServiceUnavailableError(f"Kafka unreachable while verifying transactions: {e}") from None
        now_ms = int(time.time() * 1000)
        for c in committables:
            s = states.get(c.transactional_id)
            now = None if s is None else (s.state, s.producer_id, s.producer_epoch)
            if now != ("Ongoing", c.producer_id, c.producer_epoch):
                raise ConcurrentAttemptError(self._not_ongoing(c, now, now_ms))

    def _not_ongoing(self, c: KafkaCommittable, now: tuple[str, int, int] | None, now_ms: int) -> str:
        """Why ``c`` is no longer Ongoing as pre-committed: the broker aborts a transaction older
        than its timeout and bumps its epoch (KIP-98), as another attempt's ``init_transactions``
        on the same id fences it; an age past the timeout (``opened_ms``, the executor's clock)
        names the timeout and what to change."""
        what = (
            f"Kafka sink {self.name!r}: transaction {c.transactional_id} of checkpoint {c.checkpoint_id} "
            f"was pre-committed as producer {c.producer_id}/{c.producer_epoch} but is now {now}"
        )
        timeout = self.config.transaction_timeout_ms
        if c.opened_ms is not None and now_ms - c.opened_ms > timeout:
            return (
                f"{what}: opened {(now_ms - c.opened_ms) / 1000:.0f} s ago, older than the transaction "
                f"timeout (transaction_timeout_ms={timeout} ms), so the broker aborted it: the epoch ran "
                f"longer than max_epoch_ms={self.config.max_epoch_ms} ms promised; give the job more "
                "executors or fewer partitions per epoch, or raise transaction_timeout_ms (and the "
                "broker's transaction.max.timeout.ms) above the epoch's length"
            )
        return f"{what}: another attempt of the same subtask fenced it"

    def measure(self, committable: KafkaCommittable) -> CommittableSize:
        """Records in the transaction (Kafka's committable carries no byte count)."""
        return CommittableSize(records=committable.record_count)

    def abort(self, committable: KafkaCommittable) -> None:
        """EndTxn(abort) with the recorded producer id and epoch; idempotent.

        Raises:
            ServiceUnavailableError: no final answer after retries.
        """
        self._the_committer().abort(committable)

    def abort_lingering(self, scope: LingeringScope[KafkaCommittable]) -> int:
        """Fence-abort this job's and sink's ongoing transactions that ``scope.held`` does not use.

        Runs at every start and restore, before the first epoch; the first call checks that the
        transactional-id prefix may be described (:meth:`_check_transactional_ids`).

        Raises:
            KafkaAuthorizationError: Describe on the transactional ids is denied.
            ServiceUnavailableError: the brokers stopped answering.
        """
        try:
            fence = lingering.fence_with_producer(self.config, self.clients.producer)
            admin = self._connected_admin()
            if not self._transactional_ids_checked:
                self._check_transactional_ids(admin, scope.job_id)
                self._transactional_ids_checked = True
            return lingering.abort_lingering(admin, self.config, scope, fence)
        except NETWORK_ERRORS as e:
            raise ServiceUnavailableError(
                f"Kafka brokers {self.config.bootstrap_servers} stopped answering while aborting "
                f"lingering transactions: {e}"
            ) from None

    def close(self) -> None:
        """Close the driver-side admin connection. Idempotent."""
        admin, self._admin, self._committer = self._admin, None, None
        if admin is not None:
            admin.close()

    def _connected_admin(self) -> KafkaAdmin:
        with self._connect_lock:  # concurrent commits share one connection
            if self._admin is None:
                self._admin = KafkaAdmin.connect(self.config, self.clients, self.name)
            return self._admin

    def _the_committer(self) -> KafkaCommitter:
        admin = self._connected_admin()
        with self._connect_lock:
            if self._committer is None:
                self._committer = KafkaCommitter(
                    admin,
                    self.config.connect_attempts,
                    self.config.connect_backoff_ms,
                    self.config.transaction_timeout_ms,
                )
            return self._committer
