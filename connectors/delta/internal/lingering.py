"""Finding and deleting the Delta sink's data files that no commit references.

A file of ours (its name carries this job's and sink's token, see ``naming``) written for
checkpoint ``c`` can be added only by the one commit of checkpoint ``c``. We decide whether a
commit references it without reading the whole log or loading old versions of the table:

1. it is in the current snapshot, or an earlier cleanup found it referenced → referenced;
2. the table does not exist, or the table's ``txn`` version for our appId is below ``c`` →
   checkpoint ``c`` was never committed (commits happen in checkpoint order) → unreferenced;
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
    _ours: dict[int, int] = field(default_factory=dict, init=False)  # checkpoint id -> its commit's version
    _oldest: int = field(default=0, init=False)  # the lowest of those checkpoint ids (set per page)
    _read: int = field(default=0, init=False)  # commits of the history read so far, newest first
    _exhausted: bool = field(default=False, init=False)  # the last page held the whole history
    _reached_start: bool = field(default=False, init=False)  # ... and it went back to version 0
    _by_version: dict[int, set[str] | None] = field(default_factory=dict, init=False)

    def is_referenced(self, relative_path: str, checkpoint_id: int) -> bool | None:
        """True / False, or ``None`` when it cannot be decided (then keep the file)."""
        if self.table is None:
            return False
        if self._current is None:
            self._current = snapshot_paths(self.table)
        if relative_path in self._current or relative_path in self.removed:
            return True
        txn = self.table.transaction_version(self.app_id)
        if txn is None or checkpoint_id > txn:
            return False
        version, certain = self._commit_version(checkpoint_id)
        if version is None:
            return False if certain else None
        paths = self._adds_of(version)
        if paths is None:
            return None
        if relative_path in paths:
            self.removed.add(relative_path)
            return True
        return False

    def _commit_version(self, checkpoint_id: int) -> tuple[int | None, bool]:
        """The version of checkpoint ``checkpoint_id``'s commit, and whether its absence is
        certain: the history reached an older commit of ours, or version 0."""
        while checkpoint_id not in self._ours and not self._passed(checkpoint_id) and not self._exhausted:
            self._read_more()
        if checkpoint_id in self._ours:
            return self._ours[checkpoint_id], True
        return None, self._passed(checkpoint_id) or self._reached_start

    def _passed(self, checkpoint_id: int) -> bool:
        """Whether the history read holds a commit of ours older than ``checkpoint_id``'s would be."""
        return bool(self._ours) and self._oldest < checkpoint_id

    def _read_more(self) -> None:
        """Read the history again, newest first and twice as deep."""
        assert self.table is not None
        limit = max(FIRST_HISTORY_PAGE, 2 * self._read)
        page = self.table.history(limit=limit)
        for h in page:
            if h.get(META_APP_ID) == self.app_id and h.get(META_CHECKPOINT) is not None:
                self._ours[int(h[META_CHECKPOINT])] = int(h["version"])
        self._oldest = min(self._ours, default=0)
        self._exhausted = len(page) < limit
        self._reached_start = any(h.get("version") == 0 for h in page)
        self._read = len(page)

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
