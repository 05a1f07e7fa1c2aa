"""Driver side: abort this job's lingering Kafka transactions (Flink's TransactionAbortStrategy).

A lingering transaction was opened by this job and sink but no checkpoint holds it: a failed or
duplicate task attempt, or a crash before the checkpoint completed. It holds back the last stable
offset, so ``read_committed`` consumers stall behind it until it times out: aborting it is a
correctness matter.

1. List ongoing transactions (ListTransactions, KIP-664; filtered on the broker by
   ``<prefix>-<sink>-`` when it supports KIP-1152 patterns, and always on the client with
   :func:`naming.parse_transactional_id`).
2. If the broker cannot list them, probe the known pool instead: every
   id of ``naming.pool_ids`` (partitions below ``scope.max_partitions``, the first attempts) with
   DescribeTransactions.
3. Fence-abort each ongoing one whose id no held committable uses: ``init_transactions`` on that
   id with a confluent-kafka producer, which makes the coordinator abort it and bump the epoch.
4. An ongoing transaction on an id a held committable uses is fenced only when DescribeTransactions
   shows another producer id or epoch than the held committable's: holding is by transaction, not
   by id. The held transaction is then already over (its epoch was bumped when the pooled id was
   re-initialised), and the ongoing one is a later attempt's (a zombie's) that no checkpoint
   holds. A held transaction still at its own epoch is never initialised: that would abort a
   transaction still waiting for its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import kafka.errors as kerrors
from confluent_kafka import KafkaException, Producer

from twophase.connectors.kafka.config import KafkaSinkConfig
from twophase.connectors.kafka.errors import KafkaTransactionError
from twophase.connectors.kafka.internal import naming
from twophase.connectors.kafka.internal.admin import KafkaAdmin, TransactionSnapshot
from twophase.connectors.kafka.internal.committable import KafkaCommittable
from twophase.sinks.context import LingeringScope
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

UNBOUNDED_CHECKPOINT = 2**62
"""``LingeringScope.up_to_checkpoint`` when the runtime sets no bound."""
OPEN_STATES = ("Ongoing",)

Fencer = Callable[[str], None]


def select_lingering(
    ongoing: list[str], prefix: str, sink: str, pool_size: int, scope: LingeringScope[KafkaCommittable]
) -> list[str]:
    """The ids among ``ongoing`` to fence: this prefix and sink, not held, not possibly running.

    When ``scope.up_to_checkpoint`` is bounded, the slot of the next checkpoint is left alone:
    its writers may be running now. (A stale transaction in that slot is fenced by those writers'
    own ``init_transactions``, or by the next call, whose next slot differs.)
    """
    running_slot = None
    if scope.up_to_checkpoint < UNBOUNDED_CHECKPOINT:
        running_slot = naming.slot_for(scope.up_to_checkpoint + 1, pool_size)
    out = []
    for txn_id in sorted(set(ongoing)):
        parsed = naming.parse_transactional_id(txn_id, prefix, sink)
        if parsed is None or parsed.slot == running_slot:
            continue
        out.append(txn_id)
    if not out:  # scope.held read only when something could be aborted (issue #42: decodes)
        return out
    held = {c.transactional_id for c in scope.held}
    return [t for t in out if t not in held]


def not_the_held_transactions(
    snapshots: dict[str, TransactionSnapshot], held: Sequence[KafkaCommittable]
) -> list[str]:
    """Ids whose ongoing transaction (``snapshots``, from DescribeTransactions) is not the held
    committable's: another producer id or epoch. Ids no longer ongoing are left alone.

    Args:
        snapshots: transactional id → its coordinator's state.
        held: committables retained checkpoints and savepoints hold.
    """
    mine = {c.transactional_id: (c.producer_id, c.producer_epoch) for c in held}
    return sorted(
        t
        for t, s in snapshots.items()
        if s.state in OPEN_STATES and t in mine and (s.producer_id, s.producer_epoch) != mine[t]
    )


def fence_with_producer(
    config: KafkaSinkConfig, new_producer: Callable[[dict[str, Any]], Any] = Producer
) -> Fencer:
    """A fencer that runs ``init_transactions`` on an id with a throwaway producer."""

    def fence(txn_id: str) -> None:
        producer = new_producer(dict(config.producer_config(txn_id)))
        try:
            producer.init_transactions(config.init_timeout_ms / 1000.0)
        except KafkaException as e:
            raise KafkaTransactionError(
                f"fencing lingering transaction {txn_id} failed: {e.args[0].str()}"
            ) from None
        # No transaction is open on this producer; dropping it releases the handle.
        del producer

    return fence


def list_ongoing(
    admin: KafkaAdmin, config: KafkaSinkConfig, scope: LingeringScope[KafkaCommittable]
) -> list[str]:
    """Ongoing transactional ids of this job and sink: ListTransactions, else pool probing."""
    prefix = config.prefix(scope.job_id)
    try:
        rows = admin.list_transactions(list(OPEN_STATES), naming.id_pattern(prefix, scope.sink_name))
        return [txn_id for txn_id, _pid, state in rows if state in OPEN_STATES]
    except (
        kerrors.UnsupportedVersionError,
        kerrors.IncompatibleBrokerVersion,
        kerrors.AuthorizationError,
    ) as e:
        log.warning("ListTransactions unavailable (%s); probing the transactional id pool", type(e).__name__)
    candidates = naming.pool_ids(prefix, scope.sink_name, scope.max_partitions, config.pool_size)
    snapshots = admin.describe_transactions(candidates)
    return [txn_id for txn_id, s in snapshots.items() if s.state in OPEN_STATES]


def abort_lingering(
    admin: KafkaAdmin,
    config: KafkaSinkConfig,
    scope: LingeringScope[KafkaCommittable],
    fence: Fencer | None = None,
) -> int:
    """Fence-abort every lingering transaction of ``scope``'s job and sink; return how many.

    Every target is tried: an id that cannot be fenced does not leave the later ones open (each
    stalls ``read_committed`` consumers of its partitions until its timeout, KIP-98).

    Raises:
        KafkaTransactionError: ids could not be fenced (all named; every other one was fenced).
        ServiceUnavailableError: the brokers cannot be reached (nothing was listed).
    """
    fence = fence or fence_with_producer(config)
    prefix = config.prefix(scope.job_id)
    ongoing = list_ongoing(admin, config, scope)
    targets = select_lingering(ongoing, prefix, scope.sink_name, config.pool_size, scope)
    unheld = select_lingering(ongoing, prefix, scope.sink_name, config.pool_size, replace(scope, held=()))
    on_held_ids = [t for t in unheld if t not in targets]
    if on_held_ids:
        targets += not_the_held_transactions(admin.describe_transactions(on_held_ids), scope.held)
    failed: dict[str, Exception] = {}
    for txn_id in targets:
        try:
            fence(txn_id)
        except Exception as e:  # go on: the other ids must not stay open for this one
            log_event(
                log,
                logging.ERROR,
                "lingering transaction not aborted",
                job=scope.job_id,
                sink=scope.sink_name,
                transactional_id=txn_id,
                error=repr(e),
            )
            failed[txn_id] = e
            continue
        log_event(
            log,
            logging.INFO,
            "lingering transaction aborted",
            job=scope.job_id,
            sink=scope.sink_name,
            transactional_id=txn_id,
        )
    if failed:
        raise KafkaTransactionError(
            f"sink {scope.sink_name!r}: {len(failed)} of {len(targets)} lingering transactions could not be "
            f"fenced (the others were): " + "; ".join(f"{txn_id}: {e}" for txn_id, e in failed.items())
        )
    return len(targets)
