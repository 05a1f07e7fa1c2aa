"""Accounting rules of the model-based protocol test (tests/coordinator/test_protocol_model.py)
for rewinds to an older savepoint, where S3's in-progress files make S3's promises differ from
the sinks that commit at every checkpoint."""

from __future__ import annotations

from collections import Counter

from twophase.connectors.s3.internal.committable import IN_PROGRESS_CODEC
from twophase.coordinator.storage.base import CheckpointStorage


def s3_owed_after_a_rewind(
    landed: Counter[str], landed_then: Counter[str], pending: Counter[str]
) -> Counter[str]:
    """What S3 must hold in the end after a rewind to a savepoint: what landed (``landed``),
    plus what it owed at the savepoint (``pending``: records in its in-progress and uncommitted
    files then), less what landed since the savepoint (``landed - landed_then``: a later
    checkpoint may have completed one of those in-progress files; the rewound job then opens a
    new file instead of resuming it). Records the abandoned later checkpoints held in in-progress
    files never land: the replay writes them again, as in Flink."""
    return landed + (pending - (landed - landed_then))


def s3_held_by_stored_checkpoints(storage: CheckpointStorage, sink: str) -> set[str]:
    """The keys of the S3 uploads and tail objects that the checkpoints and savepoints still in
    ``storage`` hold in progress for ``sink``. They are not lingering: a retained checkpoint or
    a savepoint stays restorable. After a rewind, the abandoned lineage's savepoints, and its
    checkpoints until retention deletes them, still hold theirs (a data loss would show as
    missing records, not here).

    Raises:
        CorruptCheckpointError: a checkpoint cannot be read.
    """
    held: set[str] = set()
    for ref in storage.list_checkpoints():
        snap = storage.load(ref).sinks.get(sink)
        for state in snap.in_progress.values() if snap is not None else ():
            for f in IN_PROGRESS_CODEC.from_json(state).files:
                held |= {f.key} | ({f.tail_key} if f.tail_key else set())
    return held
