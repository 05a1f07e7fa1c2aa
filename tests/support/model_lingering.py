"""A rule of the model-based protocol test (tests/coordinator/test_protocol_model.py) for lingering
cleanup (issue #42: the held set told apart by payload bytes, each committable made only when a
sink reads it): ``abort_lingering`` never ends a transaction that a retained checkpoint or
savepoint, or the running job, still holds.

:class:`HeldGuard` wraps the ``abort_lingering`` of the sinks whose services show an open
transaction directly — Kafka (Ongoing, with the committable's producer id and epoch), PostgreSQL
(prepared gids) and S3 (pending multipart uploads) — and checks each call against what it works
out itself, from the checkpoint storage (read from the storage, not the runtime's cache) and the
running coordinator's uncommitted transactions (while the job is cancelling, only those a
published checkpoint promised: the cancel aborts the others, ``coordinator/run/cancel.py``):

- the scope's ``held`` holds every such committable (compared as canonical payload bytes): a held
  set matched wrongly (a payload dropped, two told apart wrongly as one, the wrong object made
  for one) fails here even where the sink would have aborted nothing this time;
- every held transaction open at its service before the call is still open after it, or was
  committed meanwhile (by the committer thread, which runs beside a routine cleanup when commit is
  asynchronous): the cleanup never aborts one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.state.payload import decode_payload, payload_bytes
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import LingeringScope

AnySink = TwoPhaseCommitSink[Any, Any]
OpenHandles = Callable[[Any], set[object]]
"""A committable → the handles of it its service shows open or committed (empty: aborted, or never
opened)."""


class HeldGuard:
    """Checks every ``abort_lingering`` of the sinks in ``handles`` (see the module docstring).

    Args:
        storage: the job's current checkpoint storage (asked at each call).
        runtime: the job's current runtime (asked at each call).
        handles: sink name → how its service shows a committable open.
    """

    def __init__(
        self,
        storage: Callable[[], CheckpointStorage],
        runtime: Callable[[], JobRuntime],
        handles: Mapping[str, OpenHandles],
    ) -> None:
        self._storage = storage
        self._runtime = runtime
        self._handles = handles
        self.violations: list[str] = []
        self.checked = 0

    def watch(self, sinks: list[AnySink]) -> None:
        """Wrap the ``abort_lingering`` of each of ``sinks`` the guard has handles for."""
        for sink in sinks:
            if sink.name in self._handles:
                sink.abort_lingering = self._guarded(sink, sink.abort_lingering)  # type: ignore[method-assign,assignment]

    def must_hold(self, sink: AnySink) -> dict[bytes, Any]:
        """Payload bytes → committable of every transaction of ``sink`` a retained checkpoint or
        savepoint in storage, or the running coordinator, holds (an unreadable checkpoint, e.g. a
        committable file damaged on purpose, is skipped: the runtime fails on it itself)."""
        out: dict[bytes, Any] = {}
        storage = self._storage()
        refs = storage.list_checkpoints()
        for ref in refs:
            try:
                snap = storage.load(ref).sinks.get(sink.name)
            except Exception:  # see the docstring
                continue
            for rec in snap.committables if snap is not None else ():
                out.setdefault(rec.payload, None)
        runtime = self._runtime()
        run = runtime.run
        coord = run.coord if run is not None else None
        if coord is not None:
            # a cancel aborts what no published checkpoint promised (cancel.py): a pre-committed
            # transaction a failed close left in the coordinator, of a checkpoint that never landed
            landed = {ref.checkpoint_id for ref in refs}
            cancelling = runtime.state is JobState.CANCELLING
            for t in coord.durable_transactions(landed) if cancelling else coord.uncommitted_transactions():
                if t.sink_name == sink.name:
                    p = t.payload if t.payload is not None else payload_bytes(sink.encode(t.committable))
                    out.setdefault(p, None)
        for p in out:
            out[p] = decode_payload(sink, p)
        return out

    def _guarded(
        self, sink: AnySink, abort_lingering: Callable[[LingeringScope[Any]], int]
    ) -> Callable[[LingeringScope[Any]], int]:
        open_of = self._handles[sink.name]

        def guarded(scope: LingeringScope[Any]) -> int:
            held = self.must_hold(sink)
            given = {payload_bytes(sink.encode(c)) for c in scope.held}
            missing = sorted(p for p in held if p not in given)
            if missing:
                self.violations.append(
                    f"sink {sink.name}: abort_lingering (routine={scope.routine}) not handed "
                    f"{len(missing)} held committables, e.g. {missing[0][:160]!r}"
                )
            before = {h: p for p, c in held.items() for h in open_of(c)}
            try:
                return abort_lingering(scope)
            finally:
                self.checked += 1
                after = {h for c in held.values() for h in open_of(c)}
                ended = sorted(str(h) for h in before if h not in after)
                if ended:
                    self.violations.append(
                        f"sink {sink.name}: abort_lingering (routine={scope.routine}) ended held "
                        f"transactions {ended[:5]}"
                    )

        return guarded
