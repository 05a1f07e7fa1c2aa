"""The librdkafka callbacks of a transactional writer: statistics (the producer id and epoch, the
partitions written) and delivery and client errors, kept until the writer reads them."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from confluent_kafka import KafkaError

from twophase.connectors.kafka.errors import KafkaTransactionError
from twophase.sinks.errors import RecordError
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

_MAX_KEPT_ERRORS = 10
_RECORD_ERRORS = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._INVALID_ARG,
}


def produce_error(e: Exception, where: str) -> Exception:
    """The error to raise for ``produce()`` failing with ``e`` (a ``KafkaException`` or a
    ``TypeError``) at ``where``: a :class:`RecordError` when the record itself is at fault (too
    large, unknown topic or partition, a bad argument), else a :class:`KafkaTransactionError`."""
    if isinstance(e, TypeError):
        return RecordError(f"{where}: cannot produce: {e}")
    err: KafkaError = e.args[0]
    if err.code() in _RECORD_ERRORS:
        return RecordError(f"{where}: refused by the producer: {err.str()}")
    return KafkaTransactionError(f"{where}: produce failed: {err.str()}")


class ProducerStatistics:
    """``stats_cb`` target: the latest statistics, parsed only when read.

    librdkafka emits statistics every ``statistics.interval.ms`` while the writer produces; only
    the ones read at open and after the final flush matter, so the callback keeps the raw JSON
    and parsing (which grows with the number of partitions) happens on access.

    Attributes:
        emitted: statistics received so far (each ``poll`` may deliver some).
    """

    def __init__(self) -> None:
        self.emitted = 0
        self._raw = "{}"
        self._parsed_at = 0
        self._eos: dict[str, Any] = {}
        self._partitions: set[tuple[str, int]] = set()

    def __call__(self, stats_json: str) -> None:
        self._raw = stats_json
        self.emitted += 1

    def _parse(self) -> None:
        if self._parsed_at == self.emitted:
            return
        stats = json.loads(self._raw)
        self._eos = dict(stats.get("eos") or {})
        self._partitions = {
            (topic, int(p))
            for topic, t in (stats.get("topics") or {}).items()
            for p, part in (t.get("partitions") or {}).items()
            if p != "-1" and part.get("txmsgs", 0) > 0
        }
        self._parsed_at = self.emitted

    @property
    def eos(self) -> dict[str, Any]:
        """The latest ``eos`` object (``producer_id``, ``producer_epoch``, ``txn_state``, …)."""
        self._parse()
        return self._eos

    @property
    def partitions(self) -> set[tuple[str, int]]:
        """``(topic, partition)`` with ``txmsgs > 0`` in the latest statistics."""
        self._parse()
        return self._partitions

    def producer_id_and_epoch(self) -> tuple[int, int] | None:
        """``(producer_id, producer_epoch)`` once the idempotent producer has an id, else ``None``."""
        pid = self.eos.get("producer_id", -1)
        epoch = self.eos.get("producer_epoch", -1)
        if self.eos.get("idemp_state") == "Assigned" and pid >= 0 and epoch >= 0:
            return int(pid), int(epoch)
        return None


class ProducerErrors:
    """``on_delivery`` (errors only) and ``error_cb`` target: failures are kept, never dropped."""

    def __init__(self) -> None:
        self.count = 0
        self.messages: list[str] = []
        self.size_too_large = False
        self.topics_denied: set[str] = set()
        self.security: KafkaError | None = None

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        self.count += 1
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            self.size_too_large = True
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            self.topics_denied.add(str(msg.topic()))
        if len(self.messages) < _MAX_KEPT_ERRORS:
            self.messages.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def on_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) and self.security is None:
            self.security = err  # the listener refused the login or TLS handshake
        if err.fatal():
            self.count += 1
            self.messages.append(f"fatal: {err.str()}")
        else:
            log_event(log, logging.WARNING, "kafka client error", code=err.name(), error=err.str())


_ADD_PARTITION_DENIED = re.compile(
    r'Failed to add partition "(?P<topic>[^"]+)" .*authorization failed', re.IGNORECASE
)
rdkafka_log = logging.getLogger("twophase.connectors.kafka.rdkafka")
"""Where a writer's librdkafka log lines go (instead of the executor's stderr)."""


class ProducerLog:
    """librdkafka's ``logger`` of a writer: forwards each line to :data:`rdkafka_log` at its level,
    and keeps what only the log tells.

    When AddPartitionsToTxn is denied (no Write ACL on the topic, KIP-98), librdkafka fails the
    transaction and purges its records: the delivery reports say only "Purged in queue" and
    ``error_cb`` is not called, so the topic is read from the ``ADDPARTS`` line into
    :attr:`ProducerErrors.topics_denied`.
    """

    def __init__(self, errors: ProducerErrors) -> None:
        self._errors = errors

    def log(self, level: int, msg: str, *args: object) -> None:
        rdkafka_log.log(level, msg, *args)
        if len(args) == 3 and args[0] == "ADDPARTS":
            found = _ADD_PARTITION_DENIED.search(str(args[2]))
            if found:
                self._errors.topics_denied.add(found["topic"])
