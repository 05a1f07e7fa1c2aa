"""In-progress state finished on the driver: the rescale handover and the final checkpoint.

Sinks whose transactions span epochs (:class:`~twophase.sinks.api.InProgressSink`, e.g. S3 row
formats) keep files open across checkpoints. Two moments turn such state into a committable on
the driver instead of in a task:

- **rescale**: the parallelism dropped; partitions beyond it get no task, so their state is
  handed over, never aborted (the previous checkpoint's source position already covers its data);
- **end of input** (FLIP-147): the final checkpoint finishes every live subtask's state.

Either way the state is resumed (``begin_transaction`` with it) and ``finish``-ed, and the
committable is acknowledged to the checkpoint being taken, so it commits with that checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.commit.commit_calls import sink_concurrency
from twophase.coordinator.commit.lanes import group_lanes, run_lanes
from twophase.coordinator.state.acknowledgement import Acknowledgement
from twophase.coordinator.state.subtask_lifecycle import SubtaskState
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.context import WriterContext
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]
DriverSubtask = tuple[str, int, int]
"""(sink, partition, the parallelism its state was written with)."""


def epoch_participants(
    coord: CheckpointCoordinator, sinks: Mapping[str, AnySink], num_partitions: int
) -> tuple[dict[str, frozenset[int]], list[DriverSubtask]]:
    """Who acknowledges an epoch of ``num_partitions``: every live sink's partitions
    ``0..num_partitions-1``, plus, for in-progress sinks, live subtasks beyond them that hold
    state (the handover, second element: finished on the driver into this checkpoint)."""
    everyone = frozenset(range(num_partitions))  # one set for every sink without a handover (#42)
    participants: dict[str, frozenset[int]] = {}
    handover: list[DriverSubtask] = []
    for name in coord.live_sinks():
        participants[name] = everyone
        if not isinstance(sinks[name], InProgressSink):
            continue
        old = coord.parallelism.get(name, 0)
        with_state = coord.stateful_subtasks(name)  # no other subtask holds state to hand over
        beyond = [
            p
            for p in sorted(with_state)
            if p >= num_partitions and with_state[p].state.is_live and with_state[p].latest_in_progress
        ]
        if beyond:
            participants[name] = everyone.union(beyond)
            handover.extend((name, p, max(old, p + 1)) for p in beyond)
    return participants, handover


def finish_subtasks(
    coord: CheckpointCoordinator, sinks: Iterable[str] | None = None, partitions: Iterable[int] | None = None
) -> int:
    """End of input for the RUNNING subtasks of ``sinks`` (default: the live ones): each finishes
    (RUNNING → WAITING_FOR_FINAL_CHECKPOINT) after the newest triggered checkpoint, so only a later
    checkpoint can be its final one (FLIP-147). Creates the lifecycles of ``partitions`` (default:
    the sink's last parallelism) that do not exist yet.

    Returns:
        how many subtasks finished.
    """
    n = 0
    for name in list(sinks) if sinks is not None else coord.live_sinks():
        parts = list(partitions) if partitions is not None else range(coord.parallelism.get(name, 0))
        for p in parts:
            coord.subtask(name, p)
        for lc in coord.lifecycles_of(name).values():  # every known subtask, ascending
            if lc.state is SubtaskState.RUNNING:
                lc.finish(coord.last_triggered_id)
                n += 1
    return n


def final_participants(coord: CheckpointCoordinator, sinks: Mapping[str, AnySink]) -> dict[str, list[int]]:
    """Who acknowledges the final checkpoint: every live subtask of an in-progress sink that still
    holds state (the others finished with nothing left to flush)."""
    participants: dict[str, list[int]] = {}
    for (name, p), lc in sorted(coord.subtasks.items()):
        if (
            name in coord.live_sinks()
            and isinstance(sinks[name], InProgressSink)
            and lc.state.is_live
            and lc.latest_in_progress is not None
        ):
            participants.setdefault(name, []).append(p)
    return participants


def finish_on_driver(
    job_id: str,
    sinks: Mapping[str, AnySink],
    coord: CheckpointCoordinator,
    checkpoint_id: int,
    subtasks: Sequence[DriverSubtask],
) -> None:
    """Turn each subtask's in-progress state into a committable of ``checkpoint_id`` and
    acknowledge it: the sinks concurrently, a sink's partitions up to its ``commit_concurrency``
    at once (the same driver-side clients as its commits). All are acknowledged only if all
    succeed.

    Raises:
        Whatever a sink raises (after ``abort_open`` of the failed subtask's transaction).
    """
    finished: dict[tuple[str, int], Any] = {}

    def finish_one(subtask: DriverSubtask) -> None:
        name, partition, num_partitions = subtask
        sink = sinks[name]
        assert isinstance(sink, InProgressSink)
        ctx = WriterContext(
            job_id=job_id,
            sink_name=name,
            checkpoint_id=checkpoint_id,
            partition=partition,
            attempt=0,
            num_partitions=max(num_partitions, partition + 1),
            restored_state=coord.subtask(name, partition).in_progress_for(checkpoint_id - 1),
        )
        txn = sink.begin_transaction(ctx)
        try:
            finished[(name, partition)] = sink.finish(txn)
        except Exception:
            try:
                sink.abort_open(txn)
            except Exception:
                log_event(
                    log,
                    logging.ERROR,
                    "abort_open failed",
                    exc_info=True,
                    job=job_id,
                    sink=name,
                    partition=partition,
                )
            raise

    lanes = group_lanes(subtasks, lambda s: s[0], lambda name: sink_concurrency(sinks[name]))
    run_lanes(lanes, finish_one, thread_prefix=f"finish-{job_id}")
    for (name, partition), committable in sorted(finished.items()):
        coord.acknowledge(checkpoint_id, Acknowledgement.of(sinks[name], partition, 0, committable, None, 0))
        log_event(
            log,
            logging.INFO,
            "in-progress state finished on the driver",
            job=job_id,
            sink=name,
            checkpoint=checkpoint_id,
            partition=partition,
        )
