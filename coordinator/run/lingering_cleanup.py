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
from twophase.coordinator.run.lingering import ALL_CHECKPOINTS, HeldForCleanup, Part, held_of
from twophase.coordinator.state.metadata import CheckpointMetadata
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
        self,
        sink: AnySink,
        coord: CheckpointCoordinator | None,
        extra: str | None = None,
        *,
        retained: Sequence[tuple[str, CheckpointMetadata]] | None = None,
    ) -> HeldForCleanup[Any]:
        """What ``abort_lingering`` must keep for ``sink``: retained checkpoints (plus the one
        remembered at location ``extra``, e.g. a savepoint restored from elsewhere), what the run's
        coordinator ``coord`` holds in memory, and what a restore's caller still needs
        (:func:`~twophase.coordinator.run.lingering.held_of`). Committables are told apart by payload
        bytes and each is made only when the sink reads it, from where it is already made: the
        metadata cache for checkpoints, the coordinator's pending transactions for this run's.
        ``retained``: the sweep's one listing of the retained checkpoints (``retained_at(extra)``
        of the metadata cache), listed now if not given.

        Raises:
            CorruptCheckpointError: a retained checkpoint is unreadable.
        """
        cache = self._checkpoints.cache
        if retained is None:
            retained = cache.retained_at(extra)
        checkpoints = [(meta, cache.committables(location, sink)) for location, meta in retained]
        pending: Callable[[], Part] | Part = ((), ())
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
        :meth:`held`); returns how many it aborted: :meth:`sweep` of the one sink.

        Raises:
            DriverFencedError: a newer driver claimed the job.
            Whatever the sink's ``abort_lingering`` raises, and the errors of :meth:`held`.
        """
        return self.sweep([sink], up_to, coord, extra=extra, routine=routine)[sink.name]

    def sweep(
        self,
        sinks: Sequence[AnySink],
        up_to: int,
        coord: CheckpointCoordinator | None,
        *,
        extra: str | None = None,
        routine: bool = False,
    ) -> dict[str, int]:
        """``abort_lingering`` for checkpoints ≤ ``up_to`` of each of ``sinks`` in turn, with
        everything held (see :meth:`held`); returns sink name → how many it aborted. ``routine``:
        the cleanup after an epoch of a running job, which a sink may put off
        (:class:`~twophase.sinks.context.LingeringScope`).

        A sweep that is not routine checks the driver fence before each sink's cleanup, a routine
        one once, before its first sink; the retained checkpoints are listed once, after the first
        check (issue #42: they and the driver epochs were listed once per sink, 187 ms of a 10⁵ × 3
        epoch). Why each sink of a sweep that is not routine needs its own check (DESIGN.md §12, "One
        driver at a time"; found by the two-drivers model with two sinks, 2026-12-04): a restore's
        sweep covers every checkpoint id, and a newer driver that claims, restores and
        pre-commits (or publishes) while an earlier sink is cleaned holds transactions the one
        listing does not; with one check for the sweep, the stale driver aborted the next sink's
        (LOST at the newer driver's commit). A check per sink fences it there; what is left is a
        claim landing inside one sink's cleanup, between its check and its listing of what
        lingers, the check-then-act window §12 accepts. A routine sweep (after an epoch) is
        checked once, before its first sink: it aborts only checkpoints ≤ ``up_to``, the
        checkpoint this driver just completed, and a driver that claims after that publish
        restores from it and writes only checkpoints above it. Once a check passes no newer
        driver exists, so the one listing is what each sink's own would have read (unless a
        newer claim lands within the check-then-act window, the race §12 names).

        Raises:
            DriverFencedError: a newer driver claimed the job (nothing aborted).
            Whatever a sink's ``abort_lingering`` raises (the sinks after it are not swept), and
            the errors of :meth:`held`.
        """
        if not sinks:
            return {}
        fence = self._fence
        if fence is not None and routine:  # once: a routine sweep ends at this driver's own checkpoint
            names = ", ".join(repr(s.name) for s in sinks)
            fence.check(f"aborting lingering transactions of sink{'s' if len(sinks) > 1 else ''} {names}")
        retained: list[tuple[str, CheckpointMetadata]] | None = None
        last_meta = self._checkpoints.last
        last = last_meta.checkpoint_id if last_meta is not None else 0
        out: dict[str, int] = {}
        for sink in sinks:
            if fence is not None and not routine:  # before each sink: see above
                fence.check(f"aborting lingering transactions of sink {sink.name!r}")
            if retained is None:
                retained = self._checkpoints.cache.retained_at(extra)
            held = self.held(sink, coord, extra, retained=retained)
            n = out[sink.name] = sink.abort_lingering(
                held.scope(self.job_id, sink.name, up_to, routine=routine)
            )
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
        return out
