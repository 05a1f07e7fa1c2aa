"""Rules of the model-based protocol test (tests/coordinator/test_protocol_model.py) for checkpoint
format v3 (issue #42 item 2): committable files under a manifest, in the in-memory checkpoint
storage. A file damaged or lost, a stale driver writing its files after a newer driver published,
and a driver dying between its file writes, its manifest and retention."""

from __future__ import annotations

from collections.abc import Callable

from support.harness import SimulatedCrash
from support.memory_storage import InMemoryCheckpointStorage, MemoryStore
from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata, parse_document
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import file_run
from twophase.sinks.errors import CheckpointNotPublishedError, CommittableFileError

DAMAGE = ("missing", "corrupt")
"""What happens to a committable file: deleted, or one byte changed."""
CRASH_POINTS = ("between_files_and_manifest", "before_retention")
"""Where a driver dies in a publish of format v3: its files written and no manifest yet, or its
manifest published and retention not yet run."""


def damage(storage: InMemoryCheckpointStorage, pick: int, how: str) -> tuple[str, bytes] | None:
    """Delete or alter one committable file a retained manifest names (the ``pick``-th, cyclic);
    returns its key and original bytes (to put back), or ``None`` when no checkpoint has a file.

    Raises:
        ValueError: ``how`` is not one of :data:`DAMAGE`.
    """
    if how not in DAMAGE:
        raise ValueError(f"unknown damage {how!r}; known: {DAMAGE}")
    named = [key for ref in storage.list_checkpoints() for key in named_files(storage, ref)]
    if not named:
        return None
    key = named[pick % len(named)]
    with storage.store.lock:
        good = storage.store.files[key]
        if how == "missing":
            del storage.store.files[key]
        else:
            storage.store.files[key] = good[:-9] + bytes([good[-9] ^ 0x55]) + good[-8:]
    return key, good


def named_files(storage: InMemoryCheckpointStorage, ref: CheckpointRef) -> list[str]:
    """The committable files the manifest at ``ref`` names (not leftovers of other publishes of
    its id beside it), as store keys."""
    with storage.store.lock:
        obj = parse_document(storage.store.files[ref.location])
    directory = ref.location.rsplit("/", 1)[0]
    return [
        f"{directory}/{s['committables']['file']}"
        for _, s in sorted(obj["sinks"].items())
        if s.get("committables") is not None
    ]


def repair(storage: InMemoryCheckpointStorage, key: str, good: bytes) -> None:
    """Put a damaged file back (an operator restoring it from a backup)."""
    with storage.store.lock:
        storage.store.files[key] = good


def unreadable_retained(storage: InMemoryCheckpointStorage) -> list[str]:
    """Every retained checkpoint or savepoint whose manifest names a missing or altered file."""
    bad: list[str] = []
    for ref in storage.list_checkpoints():
        try:
            storage.load(ref)
        except CommittableFileError as e:
            bad.append(f"{ref.location}: {e}")
    return bad


class _RacedStorage(InMemoryCheckpointStorage):
    """A stale driver's storage whose existence check ran before the newer driver published: its
    first check passes; the conditional creates still refuse what exists."""

    def __init__(self, job_id: str, store: MemoryStore) -> None:
        super().__init__(job_id, store)
        self._checked = False

    def _refuse_existing(self, cid: int) -> None:
        if self._checked:
            super()._refuse_existing(cid)
        self._checked = True


def stale_driver_publishes(newer: InMemoryCheckpointStorage, meta: CheckpointMetadata) -> str:
    """A stale driver of the job (its own storage instance: another run, on the same store), whose
    existence check ran before the newer driver published ``meta``'s id, writes its committable
    files for that id after the newer driver published it, and tries its manifest. Returns what
    happened; the newer driver's checkpoint must be untouched.

    Raises:
        AssertionError: the stale publish landed, or left the newer checkpoint unreadable or
            changed, or left its own files behind.
    """
    stale = _RacedStorage(newer.job_id, newer.store)
    ref = next(r for r in newer.list_checkpoints() if r.checkpoint_id == meta.checkpoint_id)
    before = newer.load(ref)
    try:
        stale.publish(meta)
    except CheckpointNotPublishedError:
        pass
    else:
        raise AssertionError(
            f"a stale driver's publish of checkpoint {meta.checkpoint_id} landed over the newer one's"
        )
    after = newer.load(ref)
    left = [
        k
        for k in newer.committable_files(meta.checkpoint_id)
        if file_run(k.rsplit("/", 1)[1]) == stale.writer.run
    ]
    if after != before or left:
        raise AssertionError(f"a stale driver's files changed checkpoint {ref.location} or stayed: {left}")
    return "refused"


def crash_in_publish(storage: InMemoryCheckpointStorage, point: str) -> Callable[[], None]:
    """Make the next publish of ``storage`` die at ``point`` (:data:`CRASH_POINTS`); returns the
    disarm. ``before_retention`` dies on the next retention, after the manifest was published.

    Raises:
        ValueError: an unknown point.
    """
    fired = [False]

    def die(_meta: CheckpointMetadata | None = None) -> None:
        if not fired[0]:
            fired[0] = True
            raise SimulatedCrash(point)

    if point == "between_files_and_manifest":
        storage.between_files_and_manifest = die
    elif point == "before_retention":
        storage.before_retention = die
    else:
        raise ValueError(f"unknown crash point {point!r}; known: {CRASH_POINTS}")

    def disarm() -> None:
        storage.between_files_and_manifest = None
        storage.before_retention = None

    return disarm


def newest(storage: InMemoryCheckpointStorage) -> tuple[CheckpointRef, CheckpointMetadata] | None:
    """The newest retained checkpoint (not a savepoint) and its metadata, or ``None``."""
    refs = [r for r in storage.list_checkpoints() if r.kind is not CheckpointKind.SAVEPOINT]
    return (refs[-1], storage.load(refs[-1])) if refs else None
