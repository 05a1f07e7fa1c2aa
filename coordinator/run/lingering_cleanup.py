"""The runtime's lingering cleanup: ``abort_lingering`` with everything still needed held.

:class:`LingeringCleanup` gathers what a sink's cleanup must keep (DESIGN.md §5, §6, the rule in
:mod:`~twophase.coordinator.run.lingering`): every retained checkpoint's committables and in-progress
state, what the running coordinator holds, and, during a restore, what a caller still needs. It
owns only that last part; the rest it reads from the completed checkpoints and the coordinator.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from twophase.coordinator.checkpoint.checkpoint_coordinator import CheckpointCoordinator
from twophase.coordinator.checkpoint.completed_checkpoints import CompletedCheckpointStore
from twophase.coordinator.checkpoint.driver_fence import DriverFence
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS, HeldForCleanup, held_of
from twophase.coordinator.state.metrics import SinkMetricsRecorder
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import JsonObject
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


class LingeringCleanup:
    """Aborts what failed attempts, earlier runs and canceled jobs left open, holding everything
    that may still be needed (see the module docstring).

    Args:
        job_id: the job.
        checkpoints: the runtime's completed checkpoints (read, never changed).
        sink_metrics: where the per-sink count of aborted lingering transactions goes.
        fence: this driver's epoch, checked before each cleanup: a fenced driver aborts nothing,
            since the newer driver's open transactions are not in the checkpoints it read.
    """

    def __init__(
        self,
        job_id: str,
        checkpoints: CompletedCheckpointStore,
        sink_metrics: SinkMetricsRecorder,
        fence: DriverFence | None = None,
    ) -> None:
        self.job_id = job_id
        self._fence = fence
        self._checkpoints = checkpoints
        self._sink_metrics = sink_metrics
        self._restore_held: dict[str, tuple[bytes, ...]] = {}

    @contextmanager
    def holding_for_restore(self, held: Mapping[str, Sequence[bytes]] | None) -> Iterator[None]:
        """While the block runs, cleanups keep ``held`` (sink → encoded committables a caller still
        needs); nothing is held afterwards, whatever the block raised."""
        self._restore_held = {k: tuple(v) for k, v in (held or {}).items()}
        try:
            yield
        finally:
            self._restore_held = {}

    def held(
        self, sink: AnySink, coord: CheckpointCoordinator | None, extra: str | None = None
    ) -> HeldForCleanup[Any]:
        """What ``abort_lingering`` must keep for ``sink``: retained checkpoints (plus the one
        remembered at location ``extra``, e.g. a savepoint restored from elsewhere), what the run's
        coordinator ``coord`` holds in memory, and what a restore's caller still needs
        (:func:`~twophase.coordinator.run.lingering.held_of`). Committables are told apart by payload
        bytes and each is made only when the sink reads it, from where it is already made: the
        metadata cache for checkpoints, the coordinator's pending transactions for this run's.

        Raises:
            CorruptCheckpointError: a retained checkpoint is unreadable.
        """
        cache = self._checkpoints.cache
        checkpoints = [
            (meta, cache.committables(location, sink)) for location, meta in cache.retained_at(extra)
        ]
        pending: Callable[[], Sequence[Any]] | Sequence[Any] = ()
        live_in_progress: list[JsonObject] = []
        parallelism = 0
        if coord is not None:
            # read only if the sink reads scope.held (issue #42)
            pending = functools.partial(coord.pending_of, sink.name)
            live_in_progress = coord.live_in_progress_of(sink.name)
            parallelism = coord.parallelism.get(sink.name, 0)
        return held_of(
            sink,
            checkpoints,
            holding=self._restore_held.get(sink.name, ()),
            pending=pending,
            live_in_progress=live_in_progress,
            live_parallelism=parallelism,
        )

    def abort(
        self,
        sink: AnySink,
        up_to: int,
        coord: CheckpointCoordinator | None,
        *,
        extra: str | None = None,
        routine: bool = False,
    ) -> int:
        """``sink.abort_lingering`` for checkpoints ≤ ``up_to`` with everything held (see
        :meth:`held`); returns how many it aborted. ``routine``: the cleanup after an epoch of a
        running job, which a sink may put off (:class:`~twophase.sinks.context.LingeringScope`).

        Raises:
            DriverFencedError: a newer driver claimed the job.
            Whatever the sink's ``abort_lingering`` raises, and the errors of :meth:`held`.
        """
        if self._fence is not None:
            self._fence.check(f"aborting lingering transactions of sink {sink.name!r}")
        scope = self.held(sink, coord, extra).scope(self.job_id, sink.name, up_to, routine=routine)
        n = sink.abort_lingering(scope)
        last_meta = self._checkpoints.last
        last = last_meta.checkpoint_id if last_meta is not None else 0
        self._sink_metrics.lingering(sink.name, min(up_to, last) if up_to < ALL_CHECKPOINTS else last, n)
        if n:
            log_event(
                log,
                logging.INFO,
                "lingering transactions aborted",
                job=self.job_id,
                sink=sink.name,
                count=n,
                up_to_checkpoint=up_to,
            )
        return n
