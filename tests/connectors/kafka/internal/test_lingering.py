"""Selecting lingering transactions to fence (no broker; fakes for the admin calls)."""

from __future__ import annotations

import kafka.errors as kerrors
import pytest

from twophase.connectors.kafka import KafkaCommittable, KafkaSinkConfig
from twophase.connectors.kafka.errors import KafkaTransactionError
from twophase.connectors.kafka.internal import naming
from twophase.connectors.kafka.internal.admin import TransactionSnapshot
from twophase.connectors.kafka.internal.lingering import abort_lingering, select_lingering
from twophase.sinks.context import LingeringScope

CFG = KafkaSinkConfig(bootstrap_servers="b:9092", topic="t", pool_size=4)
PREFIX = CFG.prefix("job")


def tid(partition: int, slot: int, sink: str = "out", prefix: str = PREFIX) -> str:
    return naming.transactional_id(prefix, sink, partition, slot)


def held(txn_id: str) -> KafkaCommittable:
    return KafkaCommittable(txn_id, 1, 0, (("t", 0),), 1, 1)


def test_held_other_sinks_and_other_jobs_are_never_selected() -> None:
    ongoing = [
        tid(0, 1),
        tid(1, 1),
        tid(0, 2),
        tid(0, 1, sink="other"),
        tid(0, 1, prefix="twophase-job2"),
        "foreign",
    ]
    scope = LingeringScope[KafkaCommittable]("job", "out", held=(held(tid(1, 1)),))
    assert select_lingering(ongoing, PREFIX, "out", 4, scope) == [tid(0, 1), tid(0, 2)]


def test_bounded_scope_spares_the_next_checkpoints_slot() -> None:
    ongoing = [tid(0, s) for s in range(4)]
    scope = LingeringScope[KafkaCommittable]("job", "out", up_to_checkpoint=6)  # next is 7 -> slot 3
    assert select_lingering(ongoing, PREFIX, "out", 4, scope) == [tid(0, 0), tid(0, 1), tid(0, 2)]


class FakeAdmin:
    def __init__(self, ongoing: list[str], can_list: bool = True) -> None:
        self.ongoing = set(ongoing)
        self.can_list = can_list
        self.described: list[str] = []

    def list_transactions(self, states: list[str], pattern: str | None) -> list[tuple[str, int, str]]:
        if not self.can_list:
            raise kerrors.UnsupportedVersionError("ListTransactions")
        return [(t, 1, "Ongoing") for t in sorted(self.ongoing)]

    def describe_transactions(self, ids: list[str]) -> dict[str, TransactionSnapshot]:
        self.described.extend(ids)
        return {t: TransactionSnapshot(t, "Ongoing", 1, 0, 60_000, 0) for t in ids if t in self.ongoing}


def test_abort_lingering_fences_each_unheld_ongoing_id_once() -> None:
    admin = FakeAdmin([tid(0, 1), tid(1, 2), tid(2, 3)])
    fenced: list[str] = []
    scope = LingeringScope[KafkaCommittable]("job", "out", held=(held(tid(1, 2)),))
    n = abort_lingering(admin, CFG, scope, fence=fenced.append)  # type: ignore[arg-type]
    assert n == 2 and fenced == [tid(0, 1), tid(2, 3)]


def test_lingering_cleanup_fences_every_id_it_can_and_reports_every_failure() -> None:
    """#26 item 3: the cleanup stopped at the first id it could not fence, leaving the others open
    (each stalls read_committed consumers of its partitions until the transaction timeout)."""
    admin = FakeAdmin([tid(0, 1), tid(1, 1), tid(2, 1), tid(3, 1)])
    fenced: list[str] = []

    def fence(txn_id: str) -> None:
        if txn_id in (tid(0, 1), tid(2, 1)):
            raise KafkaTransactionError(f"fencing lingering transaction {txn_id} failed: timed out")
        fenced.append(txn_id)

    scope = LingeringScope[KafkaCommittable]("job", "out")
    with pytest.raises(KafkaTransactionError) as e:
        abort_lingering(admin, CFG, scope, fence=fence)  # type: ignore[arg-type]
    assert fenced == [tid(1, 1), tid(3, 1)]
    assert tid(0, 1) in str(e.value) and tid(2, 1) in str(e.value)


def test_probing_the_pool_when_list_transactions_is_unavailable() -> None:
    admin = FakeAdmin([tid(0, 1), tid(2, 0), tid(5, 0)], can_list=False)
    fenced: list[str] = []
    scope = LingeringScope[KafkaCommittable]("job", "out", max_partitions=3)
    n = abort_lingering(admin, CFG, scope, fence=fenced.append)  # type: ignore[arg-type]
    assert sorted(admin.described) == sorted(naming.pool_ids(PREFIX, "out", 3, 4))
    assert n == 2 and fenced == [tid(0, 1), tid(2, 0)]  # partition 5 is outside the probed pool


class EpochAdmin(FakeAdmin):
    """Each ongoing id answers DescribeTransactions with its own producer epoch."""

    def __init__(self, epochs: dict[str, int]) -> None:
        super().__init__(list(epochs))
        self.epochs = epochs

    def describe_transactions(self, ids: list[str]) -> dict[str, TransactionSnapshot]:
        self.described.extend(ids)
        return {
            t: TransactionSnapshot(t, "Ongoing", 1, self.epochs[t], 60_000, 0)
            for t in ids
            if t in self.epochs
        }


def test_an_ongoing_transaction_that_is_not_the_held_one_on_a_held_id_is_fenced() -> None:
    """Found by the model-based test: a retained checkpoint names an id (its committed transaction,
    epoch 0); a zombie attempt of a later epoch reused the pooled id (epoch 1) and left it Ongoing.
    Holding is by transaction, not by id: the held one is gone, the zombie's lingers and stalls
    read_committed consumers until the broker's timeout. It must be fenced; a held transaction
    still at its own epoch never is."""
    admin = EpochAdmin({tid(0, 1): 1, tid(1, 1): 0})
    fenced: list[str] = []
    scope = LingeringScope[KafkaCommittable]("job", "out", held=(held(tid(0, 1)), held(tid(1, 1))))
    n = abort_lingering(admin, CFG, scope, fence=fenced.append)  # type: ignore[arg-type]
    assert n == 1 and fenced == [tid(0, 1)]
