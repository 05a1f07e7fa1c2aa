"""The Kafka committable: what a pre-committed transaction needs to be committed from any process.

With KIP-98's transaction protocol (TV1), EndTxn needs only the transactional id, the producer
id and the producer epoch; the coordinator already knows the partitions. The partitions, the
time the transaction was opened and an offset its marker cannot precede also locate its outcome
in the log: the commit or abort marker that every partition it wrote holds for its producer id
and epoch, still there after the broker forgot the transactional id. The record count is kept
for logging and metrics. No secrets, no broker addresses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from twophase.sinks.codec import CommittableCodec

_MARKER_SEARCH = "_marker_search"


@dataclass(frozen=True)
class KafkaCommittable:
    """A pre-committed Kafka transaction (encoded as versioned JSON by :data:`CODEC`).

    Attributes:
        transactional_id: ``<prefix>-<sink>-<partition>-<slot>-<attempt>`` (see ``naming``).
        producer_id: the producer id the coordinator assigned at ``init_transactions``.
        producer_epoch: the producer epoch of that ``init_transactions``.
        topic_partitions: the ``(topic, partition)`` pairs written, sorted; partition ``-1``
            when librdkafka's statistics did not report the partitions in time.
        record_count: records produced in the transaction (> 0: empty ones have no committable).
        checkpoint_id: the checkpoint whose epoch wrote it (for logs and lineage).
        opened_ms: when the writer opened the transaction (ms since the epoch, the executor's
            clock): where a search of the log for its marker starts when ``marker_offset`` is
            unknown. ``None`` in committables of version 1.
        marker_offset: an offset of the first partition (``committer.marker_partition``) that the
            transaction's marker cannot precede: that partition's end offset, read after every
            record of the transaction was acknowledged and before the committable existed, so
            before any EndTxn could write the marker. A search for the marker starts there, so it
            reads only what other producers appended between this pre-commit and the commit.
            ``None`` in committables of versions 1 and 2, and when the writer could not read it.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic_partitions: tuple[tuple[str, int], ...]
    record_count: int
    checkpoint_id: int
    opened_ms: int | None = None
    marker_offset: int | None = None

    def __post_init__(self) -> None:
        if self.producer_id < 0 or self.producer_epoch < 0:
            raise ValueError(
                f"{self.transactional_id}: invalid producer id/epoch {self.producer_id}/{self.producer_epoch}"
            )
        if self.record_count < 1:
            raise ValueError(f"{self.transactional_id}: an empty transaction has no committable")

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        search = self.__dict__.get(_MARKER_SEARCH)
        return f"KafkaCommittable({shown}{'' if search is None else f', marker search: {search}'})"

    def record_marker_search(self, what: str) -> None:
        """Keep what the last search of the log for this transaction's marker found (or where it
        stopped) so that its ``repr``, which a TransactionLostError line shows, says it. Not a
        field: neither encoded nor compared."""
        object.__setattr__(self, _MARKER_SEARCH, what)

    def log_fields(self) -> dict[str, object]:
        """Structured logging fields."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "checkpoint": self.checkpoint_id,
            "records": self.record_count,
        }


def _opened_unknown(body: dict[str, object]) -> dict[str, object]:
    """Version 1 → 2: a committable written before ``opened_ms`` was recorded."""
    return {**body, "opened_ms": None}


def _marker_offset_unknown(body: dict[str, object]) -> dict[str, object]:
    """Version 2 → 3: a committable written before ``marker_offset`` was recorded (its search
    starts from ``opened_ms``, as version 2's did)."""
    return {**body, "marker_offset": None}


CODEC: CommittableCodec[KafkaCommittable] = CommittableCodec(
    KafkaCommittable,
    kind="kafka.transaction",
    version=3,
    upgraders={1: _opened_unknown, 2: _marker_offset_unknown},
)
"""Versioned JSON codec of :class:`KafkaCommittable` (kind ``kafka.transaction``; version 2 adds
``opened_ms``, version 3 ``marker_offset``; payloads of versions 1 and 2 still decode)."""
