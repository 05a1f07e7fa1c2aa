"""An in-memory Apache Iceberg service for the model-based protocol test: a catalog and its object
storage, as the :class:`~twophase.connectors.iceberg.IcebergSink` relies on them (pyiceberg 0.12).

What is modelled, as the real service behaves where exactly-once depends on it:

- **the catalog's metadata pointer** (:class:`IcebergModel`): one table whose current metadata
  location swaps atomically. A commit goes the way pyiceberg's ``SqlCatalog.commit_table`` goes:
  the client's requirements (``AssertTableUUID``, ``AssertRefSnapshotId`` of ``main``...) are
  validated against the *current* metadata, the updates applied to it, the pointer swapped under
  a lock. A commit built on a stale base fails with pyiceberg's ``CommitFailedException`` (Iceberg
  table spec, "Commit Conflict Resolution and Retry"). Table metadata (schemas, specs, the
  snapshot list and log, each snapshot's ``summary`` where ``twophase.checkpoint-id`` is
  recorded, refs) is pyiceberg's own ``TableMetadata``, updated by pyiceberg's own
  ``update_table_metadata``;
- **object storage** (:class:`ObjectStore`): a flat key → bytes map behind a pyarrow file system
  (:class:`ModelFileIO`, a ``PyArrowFileIO`` on the ``mem://`` scheme). The sink's tasks write
  their Parquet data files there, pyiceberg its manifests and manifest lists; listing (lingering
  cleanup), sizes (the committer's LOST check), reads and deletes are served from it. Objects
  carry the storage's own wall-clock modification time, as a real store's ``Last-Modified``.
  A file is visible from its creation (empty until closed, as on a local file system) and a close
  after it was deleted does not bring it back (POSIX unlink): an executor the test kills mid-task
  leaves its stream unclosed, and its garbage-collected writer must not land a file after the
  cleanup that deleted it (a dead process never finishes an upload);
- **faults**, armed by the test's rules and consumed by the next operations:
  ``conflicts`` — another writer appends a snapshot (its own data file, rows ``other<n>``) after
  a commit loaded the table and before its pointer swap, so the commit fails with
  ``CommitFailedException``; ``refused`` — the catalog is unreachable: the next connections are
  refused (``ConnectionRefusedError`` from the factory, as ``load_catalog`` of a SQL catalog
  fails when its database is down); ``lost_answers`` — the next commits' answers are lost: the
  commit is applied (or not: both happen when a connection breaks mid-request) and the client
  hears an error (pyiceberg REST's ``CommitStateUnknownException``, SQLAlchemy's
  ``OperationalError`` from a SQL catalog, or a reset socket);
- **table maintenance** (:meth:`IcebergModel.expire_snapshots`, now or armed in ``maintenance``
  to follow the next commit): pyiceberg's own ``expire_snapshots`` removes every snapshot but the
  current one (after another writer's append, or not), and with them their summaries
  (issue #43: a restore whose committed marker was refused must then decide from what is left,
  the table's properties and the current snapshot's data files). Table properties are
  pyiceberg's ``TableMetadata.properties``, carried by every commit, never expired.

Left out, because exactly-once does not depend on them here: metadata JSON files (the metadata
objects are kept by location, never serialized; old ones are never deleted), expiry by age,
orphan-file removal and compaction (a compaction that rewrites the sink's files and then expires
them leaves a table without the sink's property nothing to decide from: DESIGN.md §12), branches
other than ``main``, views, namespaces beyond a name set, several tables, schema or partition
evolution, storage faults (throttling, failed writes or deletes), the sink's ``s3://`` paths
(boto3's ``DeleteObjects`` for deletes: on ``mem://`` the sink deletes through the FileIO),
eventual consistency (S3 and the catalogs pyiceberg supports are strongly consistent), and
latency.
"""

from __future__ import annotations

import io
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.exceptions import (
    CommitStateUnknownException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from sqlalchemy.exc import OperationalError

SCHEME = "mem"
"""The object storage's URI scheme: ``mem://<bucket>/<key>``."""
WAREHOUSE = f"{SCHEME}://warehouse"
"""Where the catalog places tables (``<warehouse>/<namespace>/<table>``)."""
FOREIGN = "other"
"""Key prefix of the rows the other writer appends."""
REFUSED = "refused a connection"
"""The event of a refused catalog connection (:attr:`IcebergModel.events`)."""
LOST_ANSWERS = ("rest_unknown", "sql_connection_lost", "socket_reset")
"""How a commit's lost answer reaches the client (:class:`IcebergModel`)."""


def lost_answer(kind: str) -> Exception:
    """The error a client hears when its commit's answer is lost (:data:`LOST_ANSWERS`).

    Raises:
        ValueError: an unknown kind.
    """
    if kind == "rest_unknown":
        return CommitStateUnknownException("504 Gateway Timeout: commit state unknown")
    if kind == "sql_connection_lost":
        return OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))
    if kind == "socket_reset":
        return ConnectionResetError(104, "Connection reset by peer")
    raise ValueError(f"unknown lost answer {kind!r}; known: {LOST_ANSWERS}")


@dataclass
class StoredObject:
    """One object: its bytes and modification time (ns since the epoch, the store's wall clock)."""

    data: bytes
    mtime_ns: int


@dataclass
class ObjectStore:
    """Object storage: ``<bucket>/<key>`` → :class:`StoredObject`. Thread-safe."""

    objects: dict[str, StoredObject] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` (a whole object at once, as a PUT)."""
        with self.lock:
            self.objects[path] = StoredObject(data, time.time_ns())

    def create(self, path: str) -> StoredObject:
        """Create (or truncate) ``path``, empty; return the new object."""
        with self.lock:
            created = self.objects[path] = StoredObject(b"", time.time_ns())
            return created

    def finish(self, path: str, created: StoredObject, data: bytes) -> bool:
        """Give ``created`` its bytes if ``path`` still holds it; False if it was deleted or
        replaced since (nothing is stored then)."""
        with self.lock:
            if self.objects.get(path) is not created:
                return False
            self.objects[path] = StoredObject(data, time.time_ns())
            return True

    def get(self, path: str) -> StoredObject | None:
        """The object at ``path``, or ``None``."""
        with self.lock:
            return self.objects.get(path)

    def delete(self, path: str) -> bool:
        """Delete ``path``; False if there was no such object."""
        with self.lock:
            return self.objects.pop(path, None) is not None

    def under(self, prefix: str) -> list[str]:
        """Every path below ``prefix/``, sorted."""
        with self.lock:
            return sorted(p for p in self.objects if p.startswith(prefix.rstrip("/") + "/"))


class _Upload(io.BytesIO):
    """An output stream: the file exists (empty) from its creation and gets its bytes when
    closed, unless it was deleted meanwhile (:meth:`ObjectStore.finish`)."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        super().__init__()
        self._store, self._path = store, path
        self._created = store.create(path)

    def close(self) -> None:
        if not self.closed:
            self._store.finish(self._path, self._created, self.getvalue())
        super().close()


class _StoreHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """:class:`ObjectStore` as a pyarrow file system (paths ``<bucket>/<key>``, no directories:
    a prefix with objects below reads as one)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def get_type_name(self) -> str:
        return "twophase-model"

    def equals(self, other: Any) -> bool:
        return isinstance(other, _StoreHandler) and other.store is self.store

    def normalize_path(self, path: str) -> str:
        return path

    def _info(self, path: str) -> pafs.FileInfo:
        obj = self.store.get(path)
        if obj is not None:
            return pafs.FileInfo(path, pafs.FileType.File, size=len(obj.data), mtime_ns=obj.mtime_ns)
        if self.store.under(path):
            return pafs.FileInfo(path, pafs.FileType.Directory)
        return pafs.FileInfo(path, pafs.FileType.NotFound)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.rstrip("/")
        paths = self.store.under(base)
        if not paths and not selector.allow_not_found:
            raise FileNotFoundError(base)
        if not selector.recursive:
            paths = sorted({base + "/" + p[len(base) + 1 :].split("/", 1)[0] for p in paths})
        return [self._info(p) for p in paths]

    def create_dir(self, path: str, recursive: bool) -> None:
        pass  # no directories in an object store

    def delete_dir(self, path: str) -> None:
        raise NotImplementedError

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        raise NotImplementedError

    def delete_root_dir_contents(self) -> None:
        raise NotImplementedError

    def delete_file(self, path: str) -> None:
        if not self.store.delete(path):
            raise FileNotFoundError(f"Path does not exist: {path}")

    def move(self, src: str, dest: str) -> None:
        raise NotImplementedError

    def copy_file(self, src: str, dest: str) -> None:
        raise NotImplementedError

    def _read(self, path: str) -> pa.BufferReader:
        obj = self.store.get(path)
        if obj is None:
            raise FileNotFoundError(f"Path does not exist: {path}")
        return pa.BufferReader(obj.data)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self._read(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self._read(path)

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        return pa.PythonFile(_Upload(self.store, path), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        raise NotImplementedError("objects are immutable")


class ModelFileIO(PyArrowFileIO):
    """pyiceberg's ``PyArrowFileIO`` on :class:`ObjectStore` for ``mem://`` locations (the sink's
    lingering cleanup lists through a ``PyArrowFileIO``'s file system, as on S3).

    Args:
        store: the object storage.
    """

    def __init__(self, store: ObjectStore) -> None:
        self._fs = pafs.PyFileSystem(_StoreHandler(store))
        super().__init__()

    def _initialize_fs(self, scheme: str, netloc: str | None = None) -> pafs.FileSystem:
        if scheme != SCHEME:
            raise ValueError(f"the model's storage serves {SCHEME}:// only, not {scheme}://")
        return self._fs


class ModelCatalog(MetastoreCatalog):
    """One client's connection to :class:`IcebergModel`'s catalog (what ``load_catalog`` returns).

    Args:
        model: the service.
        faults: whether the model's armed faults apply to this client (the other writer's don't).
    """

    def __init__(self, model: IcebergModel, *, faults: bool = True) -> None:
        super().__init__("model", warehouse=WAREHOUSE)
        self.model = model
        self.faults = faults

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        return self.model.io

    def load_table(self, identifier: str | Identifier) -> Table:
        ident = Catalog.identifier_to_tuple(identifier)
        location, metadata = self.model.current(ident)
        return Table(ident, metadata, location, self.model.io, self)

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        return self.model.commit(self, table.name(), requirements, updates)

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema | pa.Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        staged = self._create_staged_table(
            identifier, schema, location, partition_spec, sort_order, properties
        )
        self.model.create(staged.name(), staged.metadata_location, staged.metadata)
        return self.load_table(identifier)

    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        ns = Catalog.identifier_to_tuple(namespace)
        if ns in self.model.namespaces:
            raise NamespaceAlreadyExistsError(f"namespace {ns} exists")
        self.model.namespaces.add(ns)

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        ns = Catalog.identifier_to_tuple(namespace)
        if ns not in self.model.namespaces:
            raise NoSuchNamespaceError(f"no namespace {ns}")
        return {}

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        return sorted(self.model.namespaces)

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        ns = Catalog.identifier_to_tuple(namespace)
        return sorted(t for t in self.model.tables if t[:-1] == ns)

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("not modelled (see support.iceberg_model)")

    register_table = drop_table = rename_table = drop_namespace = update_namespace_properties = _unsupported
    list_views = drop_view = view_exists = load_view = register_view = _unsupported


@dataclass
class IcebergModel:
    """The Iceberg catalog and object storage (see the module docstring). Thread-safe.

    Attributes:
        store: the object storage.
        io: its FileIO, shared by every table the catalog loads.
        tables: table → (current metadata location, metadata): the catalog's pointer.
        metadata: metadata location → metadata, every version ever committed.
        namespaces: the catalog's namespaces.
        conflicts: commits still to lose to the other writer.
        maintenance: table maintenance armed to run right after the next commit applied (the
            other writer appends if it says so, then :meth:`expire_snapshots`): between the
            sink's commit and whatever the driver does next, as while it is down.
        refused: catalog connections still to refuse.
        lost_answers: how the next commits' answers are lost, in order: (applied, kind).
        foreign: rows the other writer appended, as a multiset.
        events: what happened, for statistics and failure messages.
    """

    store: ObjectStore = field(default_factory=ObjectStore)
    io: ModelFileIO = field(init=False)
    tables: dict[Identifier, tuple[str, TableMetadata]] = field(default_factory=dict)
    metadata: dict[str, TableMetadata] = field(default_factory=dict)
    namespaces: set[Identifier] = field(default_factory=set)
    conflicts: int = 0
    maintenance: list[bool] = field(default_factory=list)
    refused: int = 0
    lost_answers: list[tuple[bool, str]] = field(default_factory=list)
    foreign: Counter[str] = field(default_factory=Counter)
    events: list[str] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _files_of: dict[int, tuple[str, ...]] = field(default_factory=dict)
    _rows_of: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.io = ModelFileIO(self.store)

    # -- the service -----------------------------------------------------------------------------

    def connect(self) -> ModelCatalog:
        """A client connection (the sink's ``catalog_factory``).

        Raises:
            ConnectionRefusedError: the catalog is unreachable (``refused`` armed).
        """
        with self._lock:
            if self.refused > 0:
                self.refused -= 1
                self.events.append(REFUSED)
                raise ConnectionRefusedError(111, "Connection refused: catalog unreachable")
        return ModelCatalog(self)

    def current(self, ident: Identifier) -> tuple[str, TableMetadata]:
        """The table's metadata location and metadata.

        Raises:
            NoSuchTableError: no such table.
        """
        with self._lock:
            if ident not in self.tables:
                raise NoSuchTableError(f"Table does not exist: {'.'.join(ident)}")
            return self.tables[ident]

    def create(self, ident: Identifier, location: str, metadata: TableMetadata) -> None:
        """Register a new table.

        Raises:
            TableAlreadyExistsError: it exists.
        """
        with self._lock:
            if ident in self.tables:
                raise TableAlreadyExistsError(f"Table {'.'.join(ident)} already exists")
            self.metadata[location] = metadata
            self.tables[ident] = (location, metadata)

    def commit(
        self,
        client: ModelCatalog,
        ident: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        """``SqlCatalog.commit_table``: validate ``requirements`` against the current metadata,
        apply ``updates``, swap the pointer (creating the table if it does not exist).

        Raises:
            CommitFailedException: a requirement does not hold (a stale base: another writer won).
            CommitStateUnknownException, OperationalError, ConnectionResetError: the answer was
                lost (the commit applied or not, ``lost_answers``).
        """
        with self._lock:
            lost = self.lost_answers.pop(0) if client.faults and self.lost_answers else None
            if client.faults and self.conflicts > 0:
                self.conflicts -= 1
                self.other_writer_appends(ident)
            if lost is not None and not lost[0]:
                self.events.append(f"commit not applied, answer lost ({lost[1]})")
                raise lost_answer(lost[1])
            base = self.tables.get(ident)
            current = None if base is None else Table(ident, base[1], base[0], self.io, client)
            staged = client._update_and_stage_table(current, ident, requirements, updates)
            if base is not None and staged.metadata == base[1]:
                response = CommitTableResponse(metadata=base[1], metadata_location=base[0])  # type: ignore[call-arg]
            else:
                self.metadata[staged.metadata_location] = staged.metadata
                self.tables[ident] = (staged.metadata_location, staged.metadata)
                response = CommitTableResponse(  # type: ignore[call-arg]
                    metadata=staged.metadata, metadata_location=staged.metadata_location
                )
                if client.faults and self.maintenance:
                    if self.maintenance.pop(0):
                        self.other_writer_appends(ident)
                    self.expire_snapshots(ident)
            if lost is not None:
                self.events.append(f"commit applied, answer lost ({lost[1]})")
                raise lost_answer(lost[1])
            return response

    def other_writer_appends(self, ident: Identifier) -> None:
        """Another writer (pyiceberg's own ``Table.append``) commits one row ``other<n>`` now."""
        with self._lock:
            table = ModelCatalog(self, faults=False).load_table(ident)
            key = f"{FOREIGN}{sum(self.foreign.values())}"
            rows = pa.table({"key": pa.array([key], pa.string()), "value": pa.array([key], pa.string())})
            table.append(rows, snapshot_properties={"writer": "other"})
            self.foreign[key] += 1
            self.events.append("the other writer appended")

    def expire_snapshots(self, ident: Identifier) -> int:
        """Table maintenance commits now (pyiceberg's ``MaintenanceTable.expire_snapshots``, through a
        client the armed faults do not touch): every snapshot but the current one is expired.
        Returns how many were."""
        with self._lock:
            table = ModelCatalog(self, faults=False).load_table(ident)
            current = table.current_snapshot()
            if current is None:
                return 0
            older = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current.snapshot_id]
            if not older:
                return 0
            table.maintenance.expire_snapshots().by_ids(older).commit()
            self.events.append("snapshots expired but the current one")
            return len(older)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No armed fault fires inside the block (the test's own reads)."""
        with self._lock:
            saved = (self.conflicts, self.refused, self.lost_answers, self.maintenance)
            self.conflicts, self.refused, self.lost_answers, self.maintenance = 0, 0, [], []
            try:
                yield
            finally:
                self.conflicts, self.refused, self.lost_answers, self.maintenance = saved

    # -- readers -----------------------------------------------------------------------------------

    def snapshot_data_files(self, ident: Identifier) -> tuple[str, ...]:
        """The data files the table's current snapshot references (live manifest entries)."""
        with self._lock:
            _, metadata = self.current(ident)
            snapshot = metadata.current_snapshot()
            if snapshot is None:
                return ()
            if snapshot.snapshot_id not in self._files_of:  # snapshots are immutable
                self._files_of[snapshot.snapshot_id] = tuple(
                    entry.data_file.file_path
                    for manifest in snapshot.manifests(self.io)
                    for entry in manifest.fetch_manifest_entry(self.io, discard_deleted=True)
                )
            return self._files_of[snapshot.snapshot_id]

    def records(self, ident: Identifier, column: str) -> Counter[str]:
        """Values of ``column`` a reader of the current snapshot sees, as a multiset.

        Raises:
            AssertionError: a referenced data file is missing from storage (data loss).
        """
        out: Counter[str] = Counter()
        for path in self.snapshot_data_files(ident):
            obj = self.store.get(_path(path))
            if obj is None:
                raise AssertionError(f"a data file of the current snapshot is gone: {path}")
            cached = self._rows_of.get((path, id(obj.data)))
            if cached is None:
                values = pq.read_table(io.BytesIO(obj.data)).column(column).to_pylist()
                cached = self._rows_of[(path, id(obj.data))] = Counter(str(v) for v in values)
            out.update(cached)
        return out

    def summaries(self, ident: Identifier) -> list[dict[str, str]]:
        """Every snapshot's summary the table holds, oldest first."""
        _, metadata = self.current(ident)
        return [dict(s.summary.additional_properties) if s.summary else {} for s in metadata.snapshots]

    def unreferenced_data_files(self, ident: Identifier) -> list[str]:
        """Objects under the table's ``data/`` folder that no snapshot of the table references
        (any live or deleted manifest entry of any snapshot): what a run must not leave behind."""
        _, metadata = self.current(ident)
        referenced: set[str] = set()
        for snapshot in metadata.snapshots:
            for manifest in snapshot.manifests(self.io):
                for entry in manifest.fetch_manifest_entry(self.io, discard_deleted=False):
                    referenced.add(_path(entry.data_file.file_path))
        return [p for p in self.store.under(_path(metadata.location) + "/data") if p not in referenced]


def _path(location: str) -> str:
    """``mem://bucket/key`` → the store's ``bucket/key``."""
    prefix = f"{SCHEME}://"
    return location[len(prefix) :] if location.startswith(prefix) else location
