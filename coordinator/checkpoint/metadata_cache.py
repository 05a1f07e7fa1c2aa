"""Checkpoint metadata read once per runtime: retained checkpoints never change.

The cache also keeps each checkpoint's committables, per sink, so that no payload is decoded
twice: a checkpoint this runtime published comes with its pending transactions' committables
(each decoded on first use, by whoever uses it first: the committer, verification, a lingering
cleanup that reads ``scope.held``); a loaded one's are decoded one by one on first access
(restore, lingering cleanup).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.state.payload import DecodedOnAccess
from twophase.coordinator.storage.base import CheckpointRef, CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink


class MetadataCache:
    """Checkpoint metadata by location, loaded from ``storage`` at most once (checkpoints never
    change), and each one's committables decoded at most once per sink.

    Args:
        storage: the job's checkpoint storage.
    """

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage = storage
        self._by_location: dict[str, CheckpointMetadata] = {}
        self._decoded: dict[str, dict[str, Sequence[Any]]] = {}

    def remember(
        self,
        location: str,
        metadata: CheckpointMetadata,
        committables: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        """Keep ``metadata`` published (or loaded) at ``location``, and ``committables``: sink →
        its committables already decoded, in the order of ``metadata``'s (others are decoded on
        first use). Replaces whatever was kept for ``location``."""
        self._by_location[location] = metadata
        # kept as given: a completed checkpoint's are its pending transactions' committables,
        # decoded on first access (issue #42), so remembering them decodes nothing
        self._decoded[location] = dict(committables or {})

    def forget(self, location: str) -> None:
        """Drop a deleted checkpoint."""
        self._by_location.pop(location, None)
        self._decoded.pop(location, None)

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """The metadata of ``ref``.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata.
        """
        meta = self._by_location.get(ref.location)
        if meta is None:
            meta = self.storage.load(ref)
            self.remember(ref.location, meta)
        return meta

    def retained(self, *, savepoints_only: bool = False) -> list[CheckpointMetadata]:
        """Every retained checkpoint and savepoint (only savepoints if asked), ascending by id."""
        return [
            self.load(ref)
            for ref in self.storage.list_checkpoints()
            if not savepoints_only or ref.kind is CheckpointKind.SAVEPOINT
        ]

    def retained_at(self, also: str | None = None) -> list[tuple[str, CheckpointMetadata]]:
        """Every retained checkpoint and savepoint with its location, ascending by id; then
        ``also`` (a location :meth:`remember` was given, e.g. a savepoint restored from elsewhere)
        unless it is one of them.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata.
            KeyError: ``also`` was never remembered.
        """
        out = [(ref.location, self.load(ref)) for ref in self.storage.list_checkpoints()]
        if also is not None and all(location != also for location, _ in out):
            out.append((also, self._by_location[also]))
        return out

    def committables(self, location: str, sink: TwoPhaseCommitSink[Any, Any]) -> Sequence[Any]:
        """The committables ``sink``'s part of the checkpoint at ``location`` holds, in metadata
        order: as :meth:`remember` was given them, or each decoded with the sink's codec on first
        access (:class:`~twophase.coordinator.state.payload.DecodedOnAccess`, kept for later asks).

        Raises:
            KeyError: nothing was loaded or remembered at ``location``.
            CommittableDecodeError (on access): a payload does not decode.
        """
        meta = self._by_location[location]
        per_sink = self._decoded.setdefault(location, {})
        decoded = per_sink.get(sink.name)
        if decoded is None:
            snap = meta.sinks.get(sink.name)
            decoded = (
                () if snap is None else DecodedOnAccess(sink, tuple(rec.payload for rec in snap.committables))
            )
            per_sink[sink.name] = decoded
        return decoded
