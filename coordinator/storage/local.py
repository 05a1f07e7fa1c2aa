"""Checkpoint storage on a local or POSIX (shared) file system.

Layout and rules: :mod:`twophase.coordinator.storage.base` and :mod:`twophase.coordinator.storage.layout`.

Publishing is atomic and never overwrites (DESIGN.md §5): the metadata bytes are written to
``chk-<n>/_metadata.tmp-<random>`` (owner-only, flushed and fsynced), then hard-linked to
``_metadata``. ``link(2)`` fails with ``EEXIST`` if the name exists, so two publishes of one id
cannot both succeed, unlike ``rename(2)`` which silently replaces. The directory is fsynced so the
new name survives a power loss. A crash at any step before the link leaves no ``_metadata``, hence
no visible checkpoint; leftover temporary files are never listed and are removed by retention.

A checkpoint's committable files (format v3,
:mod:`~twophase.coordinator.storage.committable_files`) are created by the same steps (temporary
file, fsync, a link that never overwrites) and the directory fsynced before ``_metadata`` is linked.

On a file system without hard links (``EPERM``/``ENOTSUP`` from ``link``) publish falls back to
check-then-``os.replace``, which is still atomic for readers but relies on the coordinator being the
job's single writer to refuse duplicates.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import CheckpointWriter, MissingFile, leftovers_to_delete
from twophase.coordinator.storage.common import (
    check_publishable,
    decode_metadata,
    latest_by_listing,
    log_deleted,
    log_published,
    plan_retention,
    sort_refs,
)
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    ConfigError,
    CorruptCheckpointError,
)
from twophase.sinks.internal.structured_log import log_event

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
_NO_HARDLINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK}


class LocalCheckpointStorage:
    """Checkpoints of one job under ``<base_dir>/<job_id>/`` on a POSIX file system.

    Directories are created ``0o700`` and files ``0o600`` whatever the process umask. Nothing is
    created until the first publish.

    Attributes:
        writer: names and encodes this run's committable files (format v3).

    Args:
        base_dir: the checkpoint directory shared by jobs (``str`` or ``Path``); created if missing.
        job_id: the job's stable id, one safe path segment.

    Raises:
        ConfigError: ``job_id`` is not a safe path segment.
    """

    def __init__(self, base_dir: str | os.PathLike[str], job_id: str) -> None:
        self.job_id: str = layout.validate_job_id(job_id)
        self.base_dir = Path(os.path.abspath(os.fspath(base_dir)))
        self.job_dir = self.base_dir / self.job_id
        self.writer = CheckpointWriter()

    def __repr__(self) -> str:
        return f"LocalCheckpointStorage({str(self.job_dir)!r})"

    # -- paths ---------------------------------------------------------------------------------

    def checkpoint_dir(self, checkpoint_id: int, kind: CheckpointKind) -> Path:
        """The directory of checkpoint ``checkpoint_id`` of ``kind`` (it may not exist)."""
        return self.job_dir / layout.relative_dir(checkpoint_id, kind)

    def metadata_path(self, checkpoint_id: int, kind: CheckpointKind) -> Path:
        """The ``_metadata`` file of checkpoint ``checkpoint_id`` of ``kind`` (it may not exist)."""
        return self.checkpoint_dir(checkpoint_id, kind) / layout.METADATA_NAME

    # -- publish -------------------------------------------------------------------------------

    def publish(self, metadata: CheckpointMetadata) -> CheckpointRef:
        """Atomically publish ``metadata``; see the module docstring for the steps.

        Every exit is one of three (DESIGN.md §12): published (returns); not published
        (``CheckpointNotPublishedError``: a step before the link failed, the id exists, or the
        link failed and the name is absent or holds other bytes); unknown
        (``CheckpointPublishUnknownError``: the link answered an error and the name cannot be
        read back; the directory fsync failed after the link).

        Returns:
            the ref of the published checkpoint (``location`` = the ``_metadata`` path).

        Raises:
            CheckpointNotPublishedError: nothing of this publish is visible.
            CheckpointPublishUnknownError: it may be visible, or not durable.
        """
        cid, kind = metadata.checkpoint_id, metadata.kind
        target = self.metadata_path(cid, kind)
        encoded = self.writer.encode(metadata)
        data = encoded.manifest
        try:  # nothing before the link makes a checkpoint visible
            check_publishable(metadata, self.job_id)
            # checkpoints and savepoints share one id sequence: an id names at most one of them
            other = (
                CheckpointKind.CHECKPOINT if kind is CheckpointKind.SAVEPOINT else CheckpointKind.SAVEPOINT
            )
            for existing in (target, self.metadata_path(cid, other)):
                if os.path.lexists(existing):
                    raise CheckpointNotPublishedError(
                        f"checkpoint {cid} of job {self.job_id!r} exists: {existing}"
                    )
            created = self._ensure_dir(target.parent)
            self._set_final_marker(target.parent, final=kind is CheckpointKind.FINAL)
            self._write_files(target.parent, encoded.files)
            tmp = self._write_temp(target, data)
        except (CheckpointStorageError, OSError) as e:
            self._discard(target.parent, encoded.files)
            if isinstance(e, CheckpointNotPublishedError):
                raise
            raise CheckpointNotPublishedError(f"cannot publish checkpoint {cid} to {target}: {e}") from e
        try:
            self._link(tmp, target, data)
        except CheckpointNotPublishedError:
            self._discard(target.parent, encoded.files)
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        try:
            # the new _metadata name, and the name of every directory this publish created
            for d in {target.parent, *(c.parent for c in created)}:
                _fsync_dir(d)
        except OSError as e:  # linked, so visible now, but maybe not durable across a crash
            raise CheckpointPublishUnknownError(
                f"checkpoint {cid} at {target} is linked but its directory fsync failed, so it may "
                f"or may not survive a crash: {e}"
            ) from e
        ref = CheckpointRef(cid, kind, str(target))
        log_published(self.job_id, ref, len(data))
        return ref

    def _write_files(self, directory: Path, files: tuple[tuple[str, bytes], ...]) -> None:
        """Create each committable file in ``directory`` (temp file, fsync, a link that never
        overwrites), then fsync the directory: durable before the manifest is linked.

        Raises:
            CheckpointNotPublishedError: a file exists with other bytes, or cannot be written.
            OSError: a write failed.
        """
        for name, data in files:
            path = directory / name
            tmp = self._write_temp(path, data)
            try:
                self._link(tmp, path, data)
            except CheckpointPublishUnknownError as e:  # no manifest names it yet: nothing is visible
                raise CheckpointNotPublishedError(f"cannot write committable file {path}: {e}") from e
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        if files:
            _fsync_dir(directory)

    def _discard(self, directory: Path, files: tuple[tuple[str, bytes], ...]) -> None:
        """Remove this publish's own committable files once it is proven not published (best
        effort: what stays is a leftover retention removes)."""
        for name, _ in files:
            with contextlib.suppress(OSError):
                os.unlink(directory / name)

    def _ensure_dir(self, path: Path) -> list[Path]:
        """Create ``path`` and missing parents owner-only; return the directories created (outermost last)."""
        created: list[Path] = []
        missing: list[Path] = []
        p = path
        while not p.is_dir():
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
        for d in reversed(missing):
            try:
                d.mkdir(mode=DIR_MODE)
            except FileExistsError:
                if not d.is_dir():
                    raise CheckpointStorageError(f"not a directory: {d}") from None
                continue
            os.chmod(d, DIR_MODE)  # mkdir's mode is masked by the umask
            created.append(d)
        return list(reversed(created))

    def _set_final_marker(self, directory: Path, *, final: bool) -> None:
        # The marker goes in before _metadata, so a visible final checkpoint always lists as final.
        # A stale marker from a crashed final publish of the same id must not mark a plain one.
        marker = directory / layout.FINAL_MARKER_NAME
        if final:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            try:
                os.fchmod(fd, FILE_MODE)
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)

    def _write_temp(self, target: Path, data: bytes) -> Path:
        """``data`` in a new owner-only temporary file beside ``target``, fsynced; returns its path."""
        tmp = target.with_name(f"{layout.METADATA_NAME}{layout.TEMP_INFIX}{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), FILE_MODE)  # os.open's mode is masked by the umask
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def _link(self, tmp: Path, target: Path, data: bytes) -> None:
        """Give ``tmp`` the name ``target`` (link, or rename without hard links); never overwrites.

        Raises:
            CheckpointNotPublishedError: the name is absent, or holds another writer's bytes.
            CheckpointPublishUnknownError: the call failed and the name cannot be read back.
        """
        try:
            os.link(tmp, target)
            return
        except OSError as e:
            if isinstance(e, FileExistsError) or e.errno not in _NO_HARDLINKS:
                self._settle(target, data, e)
                return
        log_event(
            log, logging.WARNING, "no hard links on this file system; publishing by rename", path=target
        )
        if os.path.lexists(target):
            raise CheckpointNotPublishedError(f"checkpoint exists already: {target}")
        try:
            os.replace(tmp, target)
        except OSError as e:
            self._settle(target, data, e)

    def _settle(self, target: Path, data: bytes, error: OSError) -> None:
        """After a link or rename answered ``error``: returns if ``target`` holds our ``data`` (a
        retransmitted request on a network file system may have done it).

        Raises:
            CheckpointNotPublishedError: ``target`` is absent, or holds other bytes (exists already).
            CheckpointPublishUnknownError: ``target`` cannot be read back.
        """
        try:
            ours = target.read_bytes() == data
        except FileNotFoundError:
            raise CheckpointNotPublishedError(f"cannot publish checkpoint to {target}: {error}") from error
        except OSError as e:
            raise CheckpointPublishUnknownError(
                f"publishing {target} answered {error}, and reading it back failed, so it may be ours: {e}"
            ) from e
        if not ours:
            raise CheckpointNotPublishedError(f"checkpoint exists already: {target}") from error
        log_event(
            log, logging.WARNING, "publish answered an error but our checkpoint is in place", path=target
        )

    # -- driver epochs (issue #43) ---------------------------------------------------------------

    @property
    def drivers_dir(self) -> Path:
        """``<job>/_drivers``: one file per driver epoch."""
        return self.job_dir / layout.DRIVERS_DIR

    def driver_epochs(self) -> list[int]:
        """Every driver epoch claimed and not pruned, ascending.

        Raises:
            CheckpointStorageError: the directory cannot be listed.
        """
        try:
            names = os.listdir(self.drivers_dir)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise CheckpointStorageError(f"cannot list driver epochs in {self.drivers_dir}: {e}") from e
        return sorted(e for e in map(layout.parse_driver_epoch, names) if e is not None)

    def create_driver_epoch(self, epoch: int, record: bytes) -> bool:
        """Create ``_drivers/driver-<epoch>`` with ``record`` by the publish's own steps (temp
        file, fsync, link that never overwrites, directory fsync); False if it exists.

        Raises:
            CheckpointStorageError: it cannot be written, or its outcome is unknown.
        """
        target = self.drivers_dir / layout.driver_epoch_name(epoch)
        try:
            created = self._ensure_dir(target.parent)
            tmp = self._write_temp(target, record)
        except OSError as e:
            raise CheckpointStorageError(f"cannot claim driver epoch {epoch} at {target}: {e}") from e
        try:
            self._link(tmp, target, record)
        except CheckpointPublishUnknownError:
            raise
        except CheckpointNotPublishedError:
            if os.path.lexists(target):
                return False  # another driver's claim
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        try:
            for d in {target.parent, *(c.parent for c in created)}:
                _fsync_dir(d)
        except OSError as e:
            raise CheckpointStorageError(f"driver epoch {epoch} at {target} may not be durable: {e}") from e
        return True

    def read_driver_epoch(self, epoch: int) -> bytes | None:
        """The record of driver epoch ``epoch``, or ``None`` if it is gone.

        Raises:
            CheckpointStorageError: it cannot be read.
        """
        path = self.drivers_dir / layout.driver_epoch_name(epoch)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CheckpointStorageError(f"cannot read driver epoch {path}: {e}") from e

    def prune_driver_epochs(self, below: int) -> None:
        """Delete the claims of driver epochs below ``below``. Idempotent.

        Raises:
            CheckpointStorageError: a deletion failed.
        """
        for epoch in self.driver_epochs():
            if epoch < below:
                path = self.drivers_dir / layout.driver_epoch_name(epoch)
                try:
                    path.unlink(missing_ok=True)
                except OSError as e:
                    raise CheckpointStorageError(f"cannot delete driver epoch {path}: {e}") from e

    # -- read ----------------------------------------------------------------------------------

    def list_checkpoints(self) -> list[CheckpointRef]:
        """All published checkpoints and savepoints of the job, ascending by numeric id.

        Only directories holding ``_metadata`` count; crashed publishes and temp files are ignored.

        Raises:
            CheckpointStorageError: the job directory cannot be listed.
        """
        refs: list[CheckpointRef] = []
        for cid, d in self._scan(self.job_dir, layout.parse_checkpoint_dir):
            meta = d / layout.METADATA_NAME
            if meta.is_file():
                final = (d / layout.FINAL_MARKER_NAME).exists()
                kind = CheckpointKind.FINAL if final else CheckpointKind.CHECKPOINT
                refs.append(CheckpointRef(cid, kind, str(meta)))
        for cid, d in self._scan(self.job_dir / layout.SAVEPOINTS_DIR, layout.parse_savepoint_dir):
            meta = d / layout.METADATA_NAME
            if meta.is_file():
                refs.append(CheckpointRef(cid, CheckpointKind.SAVEPOINT, str(meta)))
        return sort_refs(refs)

    def _scan(self, directory: Path, parse: Callable[[str], int | None]) -> list[tuple[int, Path]]:
        out: list[tuple[int, Path]] = []
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    cid = parse(entry.name)
                    if cid is not None and entry.is_dir(follow_symlinks=False):
                        out.append((cid, Path(entry.path)))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise CheckpointStorageError(f"cannot list checkpoints in {directory}: {e}") from e
        return out

    def load(self, ref: CheckpointRef) -> CheckpointMetadata:
        """Read one checkpoint of this job; its id and kind must match ``ref``.

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata; the message names the file.
            CheckpointStorageError: there is no such checkpoint (e.g. deleted by retention).
        """
        path = self.metadata_path(ref.checkpoint_id, ref.kind)
        return decode_metadata(
            _read(path), str(path), _sibling_reader(path), job_id=self.job_id, expected=ref
        )

    def load_location(self, location: str) -> CheckpointMetadata:
        """Read a checkpoint or savepoint by location: a ``_metadata`` path, its directory, or ``file://``.

        The metadata may belong to another job (restoring a savepoint into a new job is allowed).

        Raises:
            CorruptCheckpointError: unreadable or invalid metadata; the message names the file.
            CheckpointStorageError: nothing is at ``location``.
            ConfigError: ``location`` is not a local path or ``file://`` URI.
        """
        path = Path(local_path(location))
        if path.is_dir():
            path = path / layout.METADATA_NAME
        return decode_metadata(_read(path), str(path), _sibling_reader(path))

    def latest(self, *, fallback_to_valid: bool = False) -> CheckpointMetadata | None:
        """The newest published checkpoint or savepoint by listing, or ``None`` for a new job.

        Args:
            fallback_to_valid: opt-in only: skip corrupt checkpoints (logged as errors) and return
                the newest valid one. Off by default: the protocol never falls back silently.

        Raises:
            CorruptCheckpointError: the newest one is corrupt (and ``fallback_to_valid`` is off).
        """
        return latest_by_listing(self, fallback_to_valid=fallback_to_valid)

    # -- delete / retention --------------------------------------------------------------------

    def mark_committed(self, location: str) -> None:
        """An empty ``_committed`` beside the checkpoint's ``_metadata``, fsynced. Idempotent.

        Raises:
            CheckpointStorageError: it cannot be written.
        """
        marker = Path(layout.committed_marker_of(local_path(location)))
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(marker.parent)
        except OSError as e:
            raise CheckpointStorageError(f"cannot write {marker}: {e}") from e

    def is_committed(self, location: str) -> bool:
        """True if the checkpoint's ``_committed`` marker exists."""
        return Path(layout.committed_marker_of(local_path(location))).exists()

    def delete(self, ref: CheckpointRef) -> None:
        """Delete one checkpoint's directory (savepoints too, when asked explicitly). Idempotent.

        ``_metadata`` goes first, so a crash mid-delete leaves an invisible leftover, never a
        half-deleted checkpoint that lists.

        Raises:
            CheckpointStorageError: the directory cannot be removed.
        """
        d = self.checkpoint_dir(ref.checkpoint_id, ref.kind)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(d / layout.METADATA_NAME)
                _fsync_dir(d)
            _rmtree(d)
        except OSError as e:
            raise CheckpointStorageError(f"cannot delete checkpoint {ref.checkpoint_id} at {d}: {e}") from e
        log_deleted(self.job_id, ref)

    def apply_retention(self, keep: int) -> list[CheckpointRef]:
        """Delete all but the newest ``keep`` (≥ 1) non-savepoint checkpoints; return what was deleted.

        Final checkpoints count as checkpoints (:func:`~twophase.coordinator.storage.common.plan_retention`);
        savepoints are never deleted. Also removes leftovers of crashed publishes: temp files, and
        directories without ``_metadata`` whose id is below the newest published id.

        Raises:
            ConfigError: ``keep`` < 1.
            CheckpointStorageError: a deletion failed.
        """
        refs = self.list_checkpoints()
        doomed = plan_retention(refs, keep)
        for ref in doomed:
            self.delete(ref)
        newest = refs[-1].checkpoint_id if refs else 0
        self._clean_leftovers(newest)
        return doomed

    def _clean_leftovers(self, newest_id: int) -> None:
        dirs = self._scan(self.job_dir, layout.parse_checkpoint_dir)
        dirs += self._scan(self.job_dir / layout.SAVEPOINTS_DIR, layout.parse_savepoint_dir)
        for cid, d in dirs:
            try:
                if (d / layout.METADATA_NAME).is_file():
                    for name in os.listdir(d):
                        if layout.is_temp_name(name):
                            os.unlink(d / name)
                elif cid < newest_id:  # a publish that never completed; a newer one may still be running
                    for name in leftovers_to_delete(os.listdir(d), self.writer):
                        _rmtree(d / name) if (d / name).is_dir() else os.unlink(d / name)
                    with contextlib.suppress(OSError):  # not empty: another run's files stay
                        d.rmdir()
                else:
                    continue
            except OSError as e:
                raise CheckpointStorageError(f"cannot clean up {d}: {e}") from e
            log_event(log, logging.DEBUG, "cleaned publish leftovers", job=self.job_id, path=d)


def local_path(location: str) -> str:
    """A filesystem path from a plain path or a ``file://`` URI (percent-decoded).

    Raises:
        ConfigError: empty, a ``file://`` URI with a remote host, or another URI scheme.
    """
    if not location:
        raise ConfigError("empty checkpoint location")
    if location.startswith("file:"):
        parsed = urlparse(location)
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise ConfigError(f"file URI must be file:///absolute/path (no remote host): {location}")
        return unquote(parsed.path)
    if "://" in location:
        raise ConfigError(f"not a local checkpoint location: {location}")
    return location


def _read(path: Path) -> bytes:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptCheckpointError(f"checkpoint metadata is not a regular file: {path}")
        return path.read_bytes()
    except FileNotFoundError:
        raise CheckpointStorageError(f"no checkpoint metadata at {path}") from None
    except CheckpointStorageError:
        raise
    except OSError as e:
        raise CorruptCheckpointError(f"unreadable checkpoint metadata {path}: {e}") from e


def _sibling_reader(metadata_path: Path) -> Callable[[str], bytes]:
    """Reads a committable file beside ``metadata_path`` by name.

    Raises (the reader):
        MissingFile: there is none.
        CheckpointStorageError: it cannot be read.
    """

    def read(name: str) -> bytes:
        path = metadata_path.parent / name
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise MissingFile(str(path)) from None
        except OSError as e:
            raise CheckpointStorageError(f"cannot read committable file {path}: {e}") from e

    return read


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rmtree(path: Path) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
