"""The committables of the part-file sinks (Azure, GCS), as the shared code reads them, and the
driver's commit loop over a committable's files.

Each store's committable is its own frozen dataclass with its own ``kind`` and fields (the
checkpoint format: never renamed here); they share a shape: ``files``, each with
``record_count`` and ``byte_count``. A committable's outcome is the worst of its files'
(:func:`~twophase.connectors.objectstore.internal.outcomes.combine_outcomes`); each store's
``commit_file`` decides one file from the store's own evidence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from twophase.connectors.objectstore.internal.outcomes import combine_outcomes
from twophase.sinks.internal.structured_log import log_event
from twophase.sinks.outcome import CommitOutcome, CommittableSize


class RolledFile(Protocol):
    """A rolled file as a committable records it."""

    @property
    def record_count(self) -> int:
        """Rows in the file."""
        ...

    @property
    def byte_count(self) -> int:
        """The file's size in bytes."""
        ...


R = TypeVar("R", bound=RolledFile, covariant=True)


class FilesCommittable(Protocol[R]):
    """The committable of one subtask and checkpoint: the files that rolled (never empty)."""

    @property
    def files(self) -> Sequence[R]:
        """The rolled files, in the order they rolled."""
        ...


F = TypeVar("F", bound=RolledFile)


def measure(committable: FilesCommittable[RolledFile]) -> CommittableSize:
    """Records and bytes of the committable's files."""
    files = committable.files
    return CommittableSize(sum(f.record_count for f in files), sum(f.byte_count for f in files))


def commit_files(
    committable: FilesCommittable[F],
    commit_file: Callable[[F], CommitOutcome],
    log: logging.Logger,
    *,
    sink: str,
    place: tuple[str, str],
) -> CommitOutcome:
    """Commit every file of ``committable`` with the store's ``commit_file`` (which never raises),
    one after another; log one INFO line ``commit done``; return the worst of the files' outcomes.

    Args:
        committable: the files to commit.
        commit_file: the store's decision for one file.
        log: the store's logger (the line carries its name).
        sink: the sink's name, for the log.
        place: the store's field name and value of the place the files go (``("bucket", "b")``).
    """
    files = committable.files
    result = combine_outcomes(commit_file(f) for f in files)
    size = measure(committable)
    where: dict[str, object] = {place[0]: place[1]}
    log_event(
        log,
        logging.INFO,
        "commit done",
        exc_info=False,
        sink=sink,
        **where,
        files=len(files),
        outcome=result.name,
        records=size.records,
        bytes=size.bytes,
    )
    return result
