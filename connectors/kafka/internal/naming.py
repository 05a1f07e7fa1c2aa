"""Transactional ids drawn from a bounded pool, one per attempt number: pure functions, no I/O.

A transactional id is ``<prefix>-<sink>-<partition>-<slot>-<attempt>`` with
``slot = checkpoint_id mod pool_size`` and ``attempt`` Spark's task attempt number. The ids a job
uses are therefore ``partitions × pool_size`` in a run without task failures, plus one per retry,
whatever the number of checkpoints: the broker's transaction state does not grow with time.

**One id per attempt number** (#26 item 4). ``init_transactions`` on an id fences (aborts)
whatever transaction that id still has open (KIP-98). Spark can run other attempts of a task
beside the one it acknowledges: an attempt on an executor it declared lost but that still runs, a
speculative copy. With the attempt number in the id, none of them shares the acknowledged
transaction's id, so none can fence it, whenever it runs. A failed attempt's transaction is no
longer fenced by its retry: lingering cleanup after the epoch aborts it
(``abort_lingering_each_epoch``), found by listing (ListTransactions, KIP-664).

**Pool invariant.** The id of checkpoint ``c`` is reused first by the same attempt number of
checkpoint ``c + pool_size``. So the pool is safe as long as, whenever a writer of checkpoint ``w``
opens its transaction, no checkpoint ``p ≡ w (mod pool_size)`` with ``p < w`` is still pending
commit. The runtime commits checkpoints in order (Flink's rule: ``notify_checkpoint_complete(c)``
commits every pending checkpoint ≤ c) and never starts epoch ``w`` while a checkpoint older than
``w - max_pending`` is pending: the pending ones are then a subset of ``w - max_pending .. w - 1``,
which cannot contain ``w - pool_size`` when ``pool_size > max_pending``. That makes
``max_pending + 1`` the minimum; we require ``pool_size >= max_pending + 2`` so the invariant
never sits on its edge (one spare slot, e.g. for a checkpoint counted as done while its last
commit retry is still in flight). With asynchronous commit (checkpoint ``c`` committing while
epoch ``c + 1`` writes) ``max_pending`` is 1 and ``pool_size >= 3``. The configured
``max_pending_checkpoints`` is the least the pool must allow; the runtime holds an epoch back only
as the pool needs (:func:`pool_capacity`: ``pool_size - 2`` pending, e.g. 2 with the default 4).

What bounded ids cannot rule out (DESIGN.md §12): an attempt with the acknowledged attempt's
number that reaches ``init_transactions`` only after the checkpoint was published, either of an
earlier stage attempt (Spark starts attempt numbers again at 0 in a retried stage, SPARK-24552,
and PySpark's ``TaskContext`` does not expose the stage attempt) or of checkpoint
``c - k·pool_size`` stalled for ``k`` pool turns. ``InitProducerId`` is unconditional (KIP-98);
only ids never reused would close it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The sink name is one dash-free token, so an id parses back without ambiguity even when the
# prefix (which usually embeds the job id) contains dashes.
SINK_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.]+")
MIN_POOL_HEADROOM = 2
"""``pool_size`` must be at least ``max_pending_checkpoints + MIN_POOL_HEADROOM``."""
PROBED_ATTEMPTS = 4
"""Attempt numbers whose ids the probing fallback asks about (Spark's default
``spark.task.maxFailures``)."""


@dataclass(frozen=True)
class ParsedTransactionalId:
    """A transactional id split into its parts (see :func:`parse_transactional_id`)."""

    prefix: str
    sink: str
    partition: int
    slot: int
    attempt: int | None
    """``None`` for an id of the earlier scheme, ``<prefix>-<sink>-<partition>-<slot>``, which
    every attempt shared; still recognised so that lingering cleanup finds them after an upgrade."""


def default_prefix(job_id: str) -> str:
    """The transactional id prefix used when the config sets none: ``twophase-<job_id>``."""
    return f"twophase-{job_id}"


def check_sink_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is one token of ``[A-Za-z0-9_.]`` (no dash)."""
    if not SINK_NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"Kafka sink name {name!r} must match [A-Za-z0-9_.]+ (it is part of transactional ids)"
        )


def check_pool_size(pool_size: int, max_pending_checkpoints: int) -> None:
    """Raise ``ValueError`` unless ``pool_size >= max_pending_checkpoints + 2`` (the pool invariant)."""
    if max_pending_checkpoints < 1:
        raise ValueError(f"max_pending_checkpoints must be >= 1, got {max_pending_checkpoints}")
    if pool_size < max_pending_checkpoints + MIN_POOL_HEADROOM:
        raise ValueError(
            f"transactional id pool_size {pool_size} must be >= max_pending_checkpoints "
            f"({max_pending_checkpoints}) + {MIN_POOL_HEADROOM}, or a new epoch could fence a "
            "transaction still pending commit"
        )


def pool_capacity(pool_size: int) -> int:
    """How many checkpoints may await commit while the next epoch writes, with a pool of
    ``pool_size`` ids per partition: ``pool_size - MIN_POOL_HEADROOM`` (the pool invariant with
    its spare slot). At least ``max_pending_checkpoints`` whenever :func:`check_pool_size` passes."""
    return pool_size - MIN_POOL_HEADROOM


def slot_for(checkpoint_id: int, pool_size: int) -> int:
    """The pool slot of a checkpoint: ``checkpoint_id mod pool_size``."""
    if pool_size < 1:
        raise ValueError(f"pool_size must be >= 1, got {pool_size}")
    if checkpoint_id < 0:
        raise ValueError(f"checkpoint_id must be >= 0, got {checkpoint_id}")
    return checkpoint_id % pool_size


def transactional_id(prefix: str, sink: str, partition: int, slot: int, attempt: int = 0) -> str:
    """``<prefix>-<sink>-<partition>-<slot>-<attempt>``.

    Raises:
        ValueError: empty prefix, a sink name that is not one dash-free token, negative numbers.
    """
    if not prefix:
        raise ValueError("transactional id prefix must not be empty")
    check_sink_name(sink)
    if min(partition, slot, attempt) < 0:
        raise ValueError(f"partition, slot and attempt must be >= 0, got {partition}, {slot}, {attempt}")
    return f"{prefix}-{sink}-{partition}-{slot}-{attempt}"


def transactional_id_for(
    prefix: str, sink: str, partition: int, checkpoint_id: int, pool_size: int, attempt: int = 0
) -> str:
    """The transactional id attempt ``attempt`` of subtask (sink, partition) uses for ``checkpoint_id``."""
    return transactional_id(prefix, sink, partition, slot_for(checkpoint_id, pool_size), attempt)


def parse_transactional_id(txn_id: str, prefix: str, sink: str) -> ParsedTransactionalId | None:
    """Split ``txn_id`` if it belongs to exactly this prefix and sink, else ``None``.

    ``p-a-0-1-0`` (and the earlier scheme's ``p-a-0-1``) belong to prefix ``p`` and sink ``a``;
    ``p-a-b-0-1-0`` (sink ``a-b``, impossible since sink names have no dash) and ``p-ab-0-1-0`` do
    not.
    """
    head = f"{prefix}-{sink}-"
    if not txn_id.startswith(head):
        return None
    parts = txn_id[len(head) :].split("-")
    if len(parts) not in (2, 3) or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    attempt = int(parts[2]) if len(parts) == 3 else None
    return ParsedTransactionalId(prefix, sink, int(parts[0]), int(parts[1]), attempt)


def id_pattern(prefix: str, sink: str) -> str:
    """A regular expression (Java and Python syntax) matching exactly this sink's ids, of both
    schemes.

    Used as ListTransactions' ``transactional_id_pattern`` (KIP-1152); results are still filtered
    with :func:`parse_transactional_id` on the client.
    """
    return "^" + re.escape(f"{prefix}-{sink}-") + r"[0-9]+-[0-9]+(-[0-9]+)?$"


def pool_ids(prefix: str, sink: str, max_partitions: int, pool_size: int) -> list[str]:
    """The ids the probing fallback asks about, for partitions ``0 .. max_partitions - 1``: every
    slot with attempt numbers ``0 .. PROBED_ATTEMPTS - 1`` and the earlier scheme's shared id. An
    attempt beyond those is found only by listing."""
    ids = []
    for partition in range(max_partitions):
        for slot in range(pool_size):
            ids.append(f"{prefix}-{sink}-{partition}-{slot}")
            ids += [
                transactional_id(prefix, sink, partition, slot, attempt) for attempt in range(PROBED_ATTEMPTS)
            ]
    return ids


def reuses_pending_slot(writing: int, pending: tuple[int, ...] | list[int], pool_size: int) -> bool:
    """True when writing checkpoint ``writing`` would reuse the slot of a pending checkpoint.

    The check the pool invariant rules out; used by tests and as a runtime assertion.
    """
    slot = slot_for(writing, pool_size)
    return any(p != writing and slot_for(p, pool_size) == slot for p in pending)
