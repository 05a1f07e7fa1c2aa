"""Finding and deleting the Delta sink's data files that no commit references.

A file of ours (its name carries this job's and sink's token, see ``naming``) written for
checkpoint ``c`` is *referenced* if an Add action of any commit names it. We decide that without
reading the whole log:

1. it is in the current snapshot → referenced;
2. the table does not exist, or the table's ``txn`` version for our appId is below ``c`` →
   checkpoint ``c`` was never committed (commits happen in checkpoint order) → unreferenced;
3. otherwise find the commit of checkpoint ``c`` (its commitInfo carries ``twophase.appId`` and
   ``twophase.checkpoint``) and look the file up in the snapshot of that version: present →
   referenced (a later commit removed it; VACUUM's business, not ours), absent → unreferenced
   (e.g. a failed or speculative attempt's file);
4. if that commit cannot be found while the history is truncated, or the old version cannot be
   loaded → unknown, and the file is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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


def load_table(config: DeltaSinkConfig, version: int | None = None) -> DeltaTable | None:
    """The table at ``config.table_uri`` (latest, or ``version``), or ``None`` if there is none yet."""
    try:
        return DeltaTable(config.table_uri, version=version, storage_options=config.delta_storage_options())
    except TableNotFoundError:
        return None


def snapshot_paths(table: DeltaTable) -> set[str]:
    """Relative (decoded) paths of the files in ``table``'s snapshot."""
    adds = pa.table(table.get_add_actions(flatten=False))
    return {naming.decode_add_path(p) for p in adds.column("path").to_pylist()}


@dataclass
class ReferenceIndex:
    """Answers "does any commit reference this file?" for one loaded table state (module docstring).

    Args:
        config: the sink's configuration (for loading old versions).
        table: the latest table, or ``None`` if it does not exist.
        app_id: this job's sink's ``txn.appId``.
    """

    config: DeltaSinkConfig
    table: DeltaTable | None
    app_id: str
    _current: set[str] | None = None
    _history: list[dict[str, Any]] | None = None
    _by_version: dict[int, set[str] | None] = field(default_factory=dict)

    def is_referenced(self, relative_path: str, checkpoint_id: int) -> bool | None:
        """True / False, or ``None`` when it cannot be decided (then keep the file)."""
        if self.table is None:
            return False
        if self._current is None:
            self._current = snapshot_paths(self.table)
        if relative_path in self._current:
            return True
        txn = self.table.transaction_version(self.app_id)
        if txn is None or checkpoint_id > txn:
            return False
        version, complete = self._commit_version(checkpoint_id)
        if version is None:
            return False if complete else None
        paths = self._paths_at(version)
        return None if paths is None else relative_path in paths

    def _commit_version(self, checkpoint_id: int) -> tuple[int | None, bool]:
        assert self.table is not None
        if self._history is None:
            self._history = self.table.history()
        versions = [h.get("version") for h in self._history]
        complete = 0 in versions
        for h in self._history:
            if h.get(META_APP_ID) == self.app_id and h.get(META_CHECKPOINT) == checkpoint_id:
                return int(h["version"]), complete
        return None, complete

    def _paths_at(self, version: int) -> set[str] | None:
        if version not in self._by_version:
            try:
                old = load_table(self.config, version)
                self._by_version[version] = None if old is None else snapshot_paths(old)
            except Exception as e:  # log cleaned up, unreadable: undecidable
                log.warning("cannot load version=%d of the Delta table: %s", version, e)
                self._by_version[version] = None
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
