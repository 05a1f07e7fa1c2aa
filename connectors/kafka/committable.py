"""The Kafka committable: what a pre-committed transaction needs to be committed from any process.

With KIP-98's transaction protocol (TV1), EndTxn needs only the transactional id, the producer
id and the producer epoch; the coordinator already knows the partitions. The partitions and the
record count are kept for logging, lineage and verification. No secrets, no broker addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from twophase.sinks.codec import CommittableCodec


@dataclass(frozen=True)
class KafkaCommittable:
    """A pre-committed Kafka transaction (encoded as versioned JSON by :data:`CODEC`).

    Attributes:
        transactional_id: ``<prefix>-<sink>-<partition>-<slot>`` (see ``naming``).
        producer_id: the producer id the coordinator assigned at ``init_transactions``.
        producer_epoch: the producer epoch of that ``init_transactions``.
        topic_partitions: the ``(topic, partition)`` pairs written, sorted; partition ``-1``
            when librdkafka's statistics did not report the partitions in time.
        record_count: records produced in the transaction (> 0: empty ones have no committable).
        checkpoint_id: the checkpoint whose epoch wrote it (for logs and lineage).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic_partitions: tuple[tuple[str, int], ...]
    record_count: int
    checkpoint_id: int

    def __post_init__(self) -> None:
        if self.producer_id < 0 or self.producer_epoch < 0:
            raise ValueError(
                f"{self.transactional_id}: invalid producer id/epoch {self.producer_id}/{self.producer_epoch}"
            )
        if self.record_count < 1:
            raise ValueError(f"{self.transactional_id}: an empty transaction has no committable")

    def log_fields(self) -> dict[str, object]:
        """Structured logging fields."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "checkpoint": self.checkpoint_id,
            "records": self.record_count,
        }


CODEC: CommittableCodec[KafkaCommittable] = CommittableCodec(
    KafkaCommittable, kind="kafka.transaction", version=1
)
"""Versioned JSON codec of :class:`KafkaCommittable` (kind ``kafka.transaction``, version 1)."""
