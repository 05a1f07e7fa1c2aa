"""Finding and deleting the Delta sink's data files that no commit references.

A file of ours (its name carries this job's and sink's token, see ``naming``) written for
checkpoint ``c`` can be added only by the one commit of checkpoint ``c``. We decide whether a
commit references it without reading the whole log or loading old versions of the table:

1. it is in the current snapshot, or an earlier cleanup found it referenced → referenced;
2. the table does not exist, or the table's ``txn`` version for our appId is below ``c`` →
   checkpoint ``c`` was never committed (commits happen in checkpoint order) → unreferenced. No
   txn at all proves nothing (it may have expired after ``delta.setTransactionRetentionDuration``,
   issue #43): go on to 3;
3. otherwise find the commit of checkpoint ``c`` in the history, newest first and only as deep
   as ``c`` (its commitInfo carries ``twophase.appId`` and ``twophase.checkpoint``), and read
   that one commit's add actions (Delta PROTOCOL.md, "Delta Log Entries"): named → referenced (a
   later commit removed it, OPTIMIZE for one; VACUUM's business, not ours), not named →
   unreferenced (a failed or speculative attempt's file). An older commit of ours found without
   one of ``c`` means ``c`` was skipped → unreferenced;
4. if the commit cannot be found while the history is truncated, or its log entry was cleaned
   up → unknown, and the file is kept.

Rule 1's memory (:class:`RemovedReferences`) makes a table maintained with OPTIMIZE cost each
removed file one decision, not one per cleanup (#29's soak).

The history is read by :class:`OwnCommits`, which the committer uses too: when the txn is gone it
decides a re-committed checkpoint from the newest commit of ours since the checkpoint's files
were written (``committer``, DESIGN.md §7).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from twophase.connectors.delta.config import DeltaSinkConfig
from twophase.connectors.delta.internal import naming
from twophase.connectors.delta.internal.filesystem import TableLocation
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

META_APP_ID = "twophase.appId"
"""commitInfo key naming the appId of a checkpoint commit (Delta custom commit metadata)."""
META_CHECKPOINT = "twophase.checkpoint"
"""commitInfo key naming the checkpoint id of a checkpoint commit."""
FIRST_HISTORY_PAGE = 64
"""Commits read by the first look into the history; each further look reads twice as many."""
CLOCK_SKEW_ALLOWANCE_MS = 10 * 60 * 1000
"""How far the driver's clock (a commit's ``commitInfo.timestamp``) may run behind an executor's
(a data file's ``modificationTime``): :meth:`OwnCommits.newest_since` reads the history this much
further back than the files' time. NTP keeps a cluster's clocks within seconds."""


def load_table(config: DeltaSinkConfig) -> DeltaTable | None:
    """The latest table at ``config.table_uri``, or ``None`` if there is none yet."""
    try:
        return DeltaTable(config.table_uri, storage_options=config.delta_storage_options())
    except TableNotFoundError:
        return None


def snapshot_paths(table: DeltaTable) -> set[str]:
    """Relative (decoded) paths of the files in ``table``'s snapshot."""
    adds = pa.table(table.get_add_actions(flatten=False))
    return {naming.decode_add_path(p) for p in adds.column("path").to_pylist()}


def commit_adds(location: TableLocation, version: int) -> set[str] | None:
    """Relative (decoded) paths the add actions of commit ``version`` name, read from its log
    entry ``_delta_log/<version, 20 digits>.json`` (Delta PROTOCOL.md: one JSON action per line);
    ``None`` when the entry is gone (log cleanup after ``delta.logRetentionDuration``) or unreadable."""
    try:
        with location.fs.open_input_stream(location.path(f"_delta_log/{version:020d}.json")) as f:
            lines = f.read().decode("utf-8").splitlines()
        actions = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError) as e:  # cleaned up, unreadable: undecidable
        log.warning("cannot read the Delta log entry of version=%d: %s", version, e)
        return None
    return {naming.decode_add_path(a["add"]["path"]) for a in actions if "add" in a}


@dataclass
class RemovedReferences:
    """Our files found referenced by a commit though the current snapshot no longer holds them (a
    later commit removed them: OPTIMIZE, DELETE), kept by the driver's sink between cleanups so
    each is decided once. Only "referenced" is remembered, which errs towards keeping a file."""

    _paths: set[str] = field(default_factory=set, init=False)

    def __contains__(self, relative_path: str) -> bool:
        return relative_path in self._paths

    def add(self, relative_path: str) -> None:
        """Remember ``relative_path`` (relative to the table root, decoded) as referenced."""
        self._paths.add(relative_path)

    def keep_only(self, listed: Iterable[str]) -> None:
        """Forget every file a fresh listing no longer found (VACUUM deleted it)."""
        self._paths.intersection_update(listed)


@dataclass(frozen=True)
class OwnCommit:
    """One checkpoint commit of ours found in the history.

    Attributes:
        checkpoint_id: its ``twophase.checkpoint`` (commitInfo custom metadata).
        version: the table version it made.
        timestamp_ms: its ``commitInfo.timestamp`` (ms since the epoch, the committer's clock);
            ``None`` if the entry has none.
    """

    checkpoint_id: int
    version: int
    timestamp_ms: int | None


@dataclass
class OwnCommits:
    """One appId's checkpoint commits in a table's history (commitInfo carrying ``twophase.appId``
    and ``twophase.checkpoint``), read newest first, first :data:`FIRST_HISTORY_PAGE` commits and
    then twice as many each time, only as deep as a question needs. The history is what the log
    still holds: entries older than ``delta.logRetentionDuration`` are cleaned up at a checkpoint
    of the log (Delta PROTOCOL.md, "Metadata Cleanup"), and what was cleaned proves nothing.

    Args:
        table: the latest table.
        app_id: this job's sink's ``txn.appId``.
    """

    table: DeltaTable
    app_id: str
    _ours: dict[int, int] = field(default_factory=dict, init=False)  # checkpoint id -> its commit's version
    _newest: OwnCommit | None = field(default=None, init=False)  # the newest commit of ours read
    _oldest: int = field(default=0, init=False)  # the lowest of those checkpoint ids (set per page)
    _oldest_ms: int | None = field(default=None, init=False)  # the oldest commitInfo.timestamp read
    _read: int = field(default=0, init=False)  # commits of the history read so far, newest first
    _exhausted: bool = field(default=False, init=False)  # the last page held the whole history
    _reached_start: bool = field(default=False, init=False)  # ... and it went back to version 0

    def version_of(self, checkpoint_id: int) -> tuple[int | None, bool]:
        """The version of checkpoint ``checkpoint_id``'s commit, and whether its absence is
        certain: the history reached an older commit of ours, or version 0."""
        while checkpoint_id not in self._ours and not self._passed(checkpoint_id) and not self._exhausted:
            self._read_more()
        if checkpoint_id in self._ours:
            return self._ours[checkpoint_id], True
        return None, self._passed(checkpoint_id) or self._reached_start

    def newest_since(self, written_ms: int) -> tuple[OwnCommit | None, bool]:
        """The newest commit of ours made after ``written_ms`` (less
        :data:`CLOCK_SKEW_ALLOWANCE_MS`), and whether its absence is certain: the history reached
        back before that time, or to version 0. ``(None, False)``: the log no longer reaches back
        that far and holds no commit of ours after it.

        A checkpoint's commit comes after its files were written, so commits of ours older than
        them (a run before the checkpoint ids started again) say nothing about it.
        """
        since = written_ms - CLOCK_SKEW_ALLOWANCE_MS
        while self._newest is None and not self._exhausted and not self._reached_before(since):
            self._read_more()
        newest = self._newest
        if newest is not None and (newest.timestamp_ms is None or newest.timestamp_ms >= since):
            return newest, True
        return None, newest is not None or self._reached_start or self._reached_before(since)

    def newest(self) -> OwnCommit | None:
        """The newest commit of ours the history still holds (reads all of it if there is none)."""
        while self._newest is None and not self._exhausted:
            self._read_more()
        return self._newest

    def _passed(self, checkpoint_id: int) -> bool:
        """Whether the history read holds a commit of ours older than ``checkpoint_id``'s would be."""
        return bool(self._ours) and self._oldest < checkpoint_id

    def _reached_before(self, since_ms: int) -> bool:
        return self._oldest_ms is not None and self._oldest_ms < since_ms

    def _read_more(self) -> None:
        """Read the history again, newest first and twice as deep."""
        limit = max(FIRST_HISTORY_PAGE, 2 * self._read)
        page = self.table.history(limit=limit)  # newest first
        for h in page:
            if h.get(META_APP_ID) == self.app_id and h.get(META_CHECKPOINT) is not None:
                checkpoint_id, version = int(h[META_CHECKPOINT]), int(h["version"])
                self._ours[checkpoint_id] = version
                if self._newest is None or version > self._newest.version:
                    timestamp = h.get("timestamp")
                    self._newest = OwnCommit(
                        checkpoint_id, version, None if timestamp is None else int(timestamp)
                    )
        self._oldest = min(self._ours, default=0)
        stamps = [int(h["timestamp"]) for h in page if h.get("timestamp") is not None]
        self._oldest_ms = min(stamps, default=None)
        self._exhausted = len(page) < limit
        self._reached_start = any(h.get("version") == 0 for h in page)
        self._read = len(page)


@dataclass
class ReferenceIndex:
    """Answers "does any commit reference this file?" for one loaded table state (module docstring).

    Args:
        location: the table root (for reading single log entries).
        table: the latest table, or ``None`` if it does not exist.
        app_id: this job's sink's ``txn.appId``.
        removed: what earlier cleanups found referenced outside the snapshot; grown by this index.
    """

    location: TableLocation
    table: DeltaTable | None
    app_id: str
    removed: RemovedReferences = field(default_factory=RemovedReferences)
    _current: set[str] | None = field(default=None, init=False)
    _history: OwnCommits | None = field(default=None, init=False)
    _by_version: dict[int, set[str] | None] = field(default_factory=dict, init=False)
    # the appId's txn version in this table state, asked once: delta-rs replays the log for each
    # ask, and a table maintained with OPTIMIZE has thousands of removed files to decide
    _txn: int | None = field(default=None, init=False)
    _txn_read: bool = field(default=False, init=False)

    def is_referenced(self, relative_path: str, checkpoint_id: int) -> bool | None:
        """True / False, or ``None`` when it cannot be decided (then keep the file)."""
        if self.table is None:
            return False
        if self._current is None:
            self._current = snapshot_paths(self.table)
        if relative_path in self._current or relative_path in self.removed:
            return True
        if not self._txn_read:
            self._txn, self._txn_read = self.table.transaction_version(self.app_id), True
        txn = self._txn
        if txn is not None and checkpoint_id > txn:
            return False
        if self._history is None:
            self._history = OwnCommits(self.table, self.app_id)
        version, certain = self._history.version_of(checkpoint_id)
        if version is None:
            return False if certain else None
        paths = self._adds_of(version)
        if paths is None:
            return None
        if relative_path in paths:
            self.removed.add(relative_path)
            return True
        return False

    def _adds_of(self, version: int) -> set[str] | None:
        if version not in self._by_version:
            self._by_version[version] = commit_adds(self.location, version)
        return self._by_version[version]


def own_files(location: TableLocation, token: str) -> list[tuple[str, naming.DataFileName]]:
    """Our data files under the table root: ``[(relative path, parsed name), ...]``.

    Skips ``_delta_log`` and every folder starting with ``_`` or ``.`` (hidden, as Spark does).
    """
    selector = pafs.FileSelector(location.root, recursive=True, allow_not_found=True)
    found = []
    for info in location.fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        rel = location.relative(info.path)
        if any(part.startswith(("_", ".")) for part in rel.split("/")[:-1]):
            continue
        parsed = naming.parse_data_file_name(rel.rsplit("/", 1)[-1])
        if parsed is not None and parsed.token == token:
            found.append((rel, parsed))
    return found


def delete_unreferenced(
    location: TableLocation,
    index: ReferenceIndex,
    candidates: Iterable[tuple[str, int]],
    log_fields: dict[str, object],
) -> int:
    """Delete each ``(relative path, checkpoint id)`` that no commit references; return how many."""
    doomed: list[tuple[str, int]] = []
    for rel, checkpoint_id in candidates:
        referenced = index.is_referenced(rel, checkpoint_id)
        if referenced is None:
            log_event(log, logging.WARNING, "kept undecidable", file=rel)
        elif not referenced:
            doomed.append((rel, checkpoint_id))
    location.delete([rel for rel, _ in doomed])
    for rel, checkpoint_id in doomed:
        log_event(log, logging.INFO, "deleted unreferenced", file=rel, checkpoint=checkpoint_id)
    return len(doomed)
