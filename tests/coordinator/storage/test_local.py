"""LocalCheckpointStorage: the checkpoint-storage contract on a POSIX file system (DESIGN.md §5)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from support.checkpoints import NOT_PUBLISHED, PUBLISHED, UNKNOWN, publish_exit

from twophase.coordinator.state.metadata import CheckpointKind, CheckpointMetadata
from twophase.coordinator.storage import layout
from twophase.coordinator.storage.base import CheckpointRef
from twophase.coordinator.storage.committable_files import encode
from twophase.coordinator.storage.local import LocalCheckpointStorage
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    CommittableDecodeError,
    CommittableFileError,
    ConfigError,
    CorruptCheckpointError,
)

MakeMeta = Callable[..., CheckpointMetadata]
CK, FIN, SP = CheckpointKind.CHECKPOINT, CheckpointKind.FINAL, CheckpointKind.SAVEPOINT


@pytest.fixture
def storage(tmp_path: Path) -> LocalCheckpointStorage:
    return LocalCheckpointStorage(tmp_path / "checkpoints", "job-1")


def ids(storage: LocalCheckpointStorage) -> list[tuple[int, CheckpointKind]]:
    return [(r.checkpoint_id, r.kind) for r in storage.list_checkpoints()]


# -- round trip and layout ----------------------------------------------------------------------


def test_new_job_has_nothing_and_creates_nothing(storage: LocalCheckpointStorage) -> None:
    assert storage.list_checkpoints() == []
    assert storage.latest() is None
    assert storage.apply_retention(1) == []
    assert not storage.base_dir.exists()


@pytest.mark.parametrize("kind", list(CheckpointKind))
def test_publish_list_load_round_trip(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, kind: CheckpointKind
) -> None:
    meta = make_meta(4, kind, end_of_input=kind is not CK)
    ref = storage.publish(meta)
    rel = "savepoints/sp-4" if kind is SP else "chk-4"
    assert ref == CheckpointRef(4, kind, str(storage.base_dir / "job-1" / rel / "_metadata"))
    assert storage.list_checkpoints() == [ref]
    assert storage.load(ref) == meta
    assert storage.latest() == meta
    assert storage.load_location(ref.location) == meta
    assert json.loads(zlib.decompress(Path(ref.location).read_bytes()))["kind"] == kind.value


def test_load_location_accepts_directory_and_file_uri(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    meta = make_meta(2, SP)
    ref = storage.publish(meta)
    sp_dir = Path(ref.location).parent
    assert storage.load_location(str(sp_dir)) == meta
    assert storage.load_location(sp_dir.as_uri()) == meta
    with pytest.raises(ConfigError, match="not a local checkpoint location"):
        storage.load_location("s3://bucket/x")


def test_savepoint_of_another_job_loads_by_location(tmp_path: Path, make_meta: MakeMeta) -> None:
    other = LocalCheckpointStorage(tmp_path, "old-job")
    ref = other.publish(make_meta(9, SP, job_id="old-job"))
    assert LocalCheckpointStorage(tmp_path, "new-job").load_location(ref.location).job_id == "old-job"


def test_missing_location_is_not_reported_as_corrupt(storage: LocalCheckpointStorage) -> None:
    with pytest.raises(CheckpointStorageError, match="no checkpoint metadata at") as info:
        storage.load_location(str(storage.job_dir / "chk-1"))
    assert not isinstance(info.value, CorruptCheckpointError)


# -- publish never overwrites -------------------------------------------------------------------


def test_publishing_an_existing_id_raises_and_keeps_the_first(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    first = make_meta(3)
    storage.publish(first)
    with pytest.raises(CheckpointStorageError, match="exists"):
        storage.publish(make_meta(3, partitions=1))
    with pytest.raises(CheckpointStorageError, match="exists"):
        storage.publish(make_meta(3, FIN))
    with pytest.raises(CheckpointStorageError, match="exists"):
        storage.publish(make_meta(3, SP))  # ids are shared between checkpoints and savepoints
    assert ids(storage) == [(3, CK)]
    assert storage.latest() == first
    run = storage.writer.run  # the refused publishes removed their own committable files
    names = sorted(p.name for p in (storage.job_dir / "chk-3").iterdir())
    assert names == ["_metadata", f"committables-1-{run}-0.arrow"]


def test_link_refuses_an_existing_name_even_past_the_precheck(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = make_meta(5)
    storage.publish(first)
    monkeypatch.setattr(os.path, "lexists", lambda _p: False)  # a concurrent writer raced the check
    with pytest.raises(CheckpointStorageError, match="exists already"):
        storage.publish(make_meta(5, partitions=1))
    assert storage.load(storage.list_checkpoints()[0]) == first
    run = storage.writer.run  # the winner's file; the refused publish removed its own
    assert sorted(p.name for p in (storage.job_dir / "chk-5").iterdir()) == [
        "_metadata",
        f"committables-1-{run}-0.arrow",
    ]


def test_metadata_of_another_job_is_refused(storage: LocalCheckpointStorage, make_meta: MakeMeta) -> None:
    with pytest.raises(CheckpointStorageError, match="other-job"):
        storage.publish(make_meta(1, job_id="other-job"))
    assert not storage.base_dir.exists()


# -- atomicity ----------------------------------------------------------------------------------


def test_crash_before_link_leaves_no_visible_checkpoint(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    previous = make_meta(1)
    storage.publish(previous)
    # what a process killed after writing the temp file and before linking leaves behind
    crashed = storage.job_dir / "chk-2"
    crashed.mkdir(mode=0o700)
    (crashed / "_metadata.tmp-deadbeef").write_bytes(make_meta(2).dumps())
    assert ids(storage) == [(1, CK)]
    assert storage.latest() == previous
    # the id is still free: the next publish of 2 succeeds and the leftover is not mistaken for it
    storage.publish(make_meta(2))
    assert ids(storage) == [(1, CK), (2, CK)]


@pytest.mark.parametrize("failing", ["link", "fsync", "write"])
def test_failed_publish_raises_and_shows_previous(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    previous = make_meta(1)
    storage.publish(previous)

    def boom(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EIO, f"injected {failing} failure")

    if failing == "write":
        monkeypatch.setattr(CheckpointMetadata, "dumps", lambda _self: b'{"format": "twoph')
        monkeypatch.setattr(os, "fchmod", boom)
    else:
        monkeypatch.setattr(os, failing, boom)
    with pytest.raises(CheckpointStorageError, match="injected"):
        storage.publish(make_meta(2))
    monkeypatch.undo()
    assert ids(storage) == [(1, CK)]
    assert storage.latest() == previous
    assert not [p for p in (storage.job_dir / "chk-2").iterdir() if layout.is_temp_name(p.name)]
    assert storage.publish(make_meta(2)).checkpoint_id == 2


def test_stale_final_marker_does_not_mark_a_plain_checkpoint(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(os, "link", lambda *_a: (_ for _ in ()).throw(OSError(errno.EIO, "injected")))
        with pytest.raises(CheckpointStorageError):
            storage.publish(make_meta(1, FIN))
    assert (storage.job_dir / "chk-1" / "_final").exists()
    assert ids(storage) == []
    storage.publish(make_meta(1, CK))
    assert ids(storage) == [(1, CK)]
    assert storage.latest() == make_meta(1, CK)


def test_without_hard_links_publish_falls_back_to_rename(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", lambda *_a: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
    storage.publish(make_meta(1))
    with pytest.raises(CheckpointStorageError, match="exists"):
        storage.publish(make_meta(1, partitions=1))
    assert storage.latest() == make_meta(1)
    run = storage.writer.run
    assert sorted(p.name for p in (storage.job_dir / "chk-1").iterdir()) == [
        "_metadata",
        f"committables-1-{run}-0.arrow",
    ]


# -- corruption ---------------------------------------------------------------------------------


def _corrupt(storage: LocalCheckpointStorage, cid: int, data: bytes) -> Path:
    path = storage.metadata_path(cid, CK)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda good: good[: len(good) // 2], "not JSON"),
        (lambda good: zlib.compress(good)[:-5], "not a complete zlib stream"),
        (lambda good: zlib.compress(good)[:-1] + b"\0", "not a complete zlib stream"),
        (lambda good: b"", "not JSON"),
        (lambda good: b"\xff\xfe garbage", "not JSON"),
        (lambda good: b"[1, 2, 3]", "not a twophase.checkpoint object"),
        (lambda good: good.replace(b'"format":"twophase.checkpoint"', b'"format":"other"'), "not a twophase"),
        (
            lambda good: good.replace(b'"version":2', b'"version":99'),
            "unsupported checkpoint metadata version 99",
        ),
        (lambda good: good.replace(b'"checkpoint_id":2', b'"checkpoint_id":1'), "stored as 2"),
        (lambda good: good.replace(b'"kind":"checkpoint"', b'"kind":"savepoint"'), "stored as 'checkpoint'"),
        (lambda good: good.replace(b'"job_id":"job-1"', b'"job_id":"job-2"'), "belongs to job 'job-2'"),
    ],
)
def test_corrupt_newest_raises_naming_the_file(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, mutate: Callable[[bytes], bytes], why: str
) -> None:
    older = make_meta(1)
    storage.publish(older)
    storage.publish(make_meta(2))
    path = _corrupt(storage, 2, mutate(zlib.decompress(make_meta(2).dumps())))  # the plain JSON
    with pytest.raises(CorruptCheckpointError, match=why) as info:
        storage.latest()
    assert str(path) in str(info.value)
    with pytest.raises(CorruptCheckpointError, match=why):
        storage.load(storage.list_checkpoints()[-1])
    # only an explicit opt-in falls back to the newest valid checkpoint
    assert storage.latest(fallback_to_valid=True) == older


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_metadata_is_corrupt(storage: LocalCheckpointStorage, make_meta: MakeMeta) -> None:
    ref = storage.publish(make_meta(1))
    os.chmod(ref.location, 0)
    with pytest.raises(CorruptCheckpointError, match="unreadable checkpoint metadata") as info:
        storage.latest()
    assert ref.location in str(info.value)


def test_read_errors_are_corrupt_even_as_root(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = storage.publish(make_meta(1))

    def denied(self: Path) -> bytes:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(CorruptCheckpointError, match="unreadable checkpoint metadata") as info:
        storage.load(ref)
    assert ref.location in str(info.value)


# -- latest by listing --------------------------------------------------------------------------


def test_latest_is_numeric_not_lexicographic(storage: LocalCheckpointStorage, make_meta: MakeMeta) -> None:
    order = list(range(1, 13))
    random.Random(7).shuffle(order)
    for cid in order:
        storage.publish(make_meta(cid))
    assert [r.checkpoint_id for r in storage.list_checkpoints()] == list(range(1, 13))
    latest = storage.latest()
    assert latest is not None and latest.checkpoint_id == 12
    storage.publish(make_meta(100, SP))
    latest = storage.latest()
    assert latest is not None and (latest.checkpoint_id, latest.kind) == (100, SP)


def test_listing_ignores_foreign_entries(storage: LocalCheckpointStorage, make_meta: MakeMeta) -> None:
    storage.publish(make_meta(9))
    (storage.job_dir / "chk-10.tmp").mkdir()
    (storage.job_dir / "chk-011").mkdir()
    (storage.job_dir / "chk-12").write_text("a file, not a directory")
    (storage.job_dir / "notes.txt").write_text("x")
    assert ids(storage) == [(9, CK)]


# -- retention ----------------------------------------------------------------------------------


def test_retention_keeps_newest_n_and_never_deletes_savepoints(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    for cid in range(1, 6):
        storage.publish(make_meta(cid))
    storage.publish(make_meta(6, SP))
    storage.publish(make_meta(7))
    storage.publish(make_meta(8, FIN, end_of_input=True))
    deleted = storage.apply_retention(2)
    assert [r.checkpoint_id for r in deleted] == [1, 2, 3, 4, 5]
    assert ids(storage) == [(6, SP), (7, CK), (8, FIN)]
    assert sorted(p.name for p in storage.job_dir.iterdir()) == ["chk-7", "chk-8", "savepoints"]
    assert storage.apply_retention(1) == [CheckpointRef(7, CK, str(storage.metadata_path(7, CK)))]
    assert ids(storage) == [(6, SP), (8, FIN)]  # the final checkpoint is the newest: kept
    assert storage.apply_retention(1) == []


def test_retention_cleans_leftovers_of_crashed_publishes(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    storage.publish(make_meta(1))
    (storage.job_dir / "chk-1" / "_metadata.tmp-0001").write_text("left after link, before unlink")
    crashed = storage.job_dir / "chk-2"
    crashed.mkdir()
    (crashed / "_metadata.tmp-0002").write_text("{")
    storage.publish(make_meta(3))
    in_flight = storage.job_dir / "chk-4"  # newer than anything published: may be a publish in flight
    in_flight.mkdir()
    (in_flight / "_metadata.tmp-0004").write_text("{")
    assert storage.apply_retention(5) == []
    assert sorted(p.name for p in storage.job_dir.iterdir()) == ["chk-1", "chk-3", "chk-4"]
    run = storage.writer.run
    assert sorted(p.name for p in (storage.job_dir / "chk-1").iterdir()) == [
        "_metadata",
        f"committables-1-{run}-0.arrow",
    ]
    assert (in_flight / "_metadata.tmp-0004").exists()


def test_delete_is_idempotent(storage: LocalCheckpointStorage, make_meta: MakeMeta) -> None:
    ref = storage.publish(make_meta(1, SP))
    storage.delete(ref)
    storage.delete(ref)
    assert ids(storage) == []
    assert not (storage.job_dir / "savepoints" / "sp-1").exists()


@pytest.mark.parametrize("keep", [0, -3])
def test_retention_refuses_keep_below_one(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, keep: int
) -> None:
    storage.publish(make_meta(1))
    with pytest.raises(ConfigError):
        storage.apply_retention(keep)
    assert ids(storage) == [(1, CK)]


# -- permissions and job id ---------------------------------------------------------------------


@pytest.fixture(params=[0o000, 0o022, 0o277])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_files_are_owner_only_whatever_the_umask(tmp_path: Path, make_meta: MakeMeta, umask: int) -> None:
    storage = LocalCheckpointStorage(tmp_path / "new" / "base", "job-1")
    storage.publish(make_meta(1, FIN))
    storage.publish(make_meta(2, SP))
    dirs = [tmp_path / "new", tmp_path / "new" / "base", storage.job_dir, storage.job_dir / "chk-1"]
    dirs += [storage.job_dir / "savepoints", storage.job_dir / "savepoints" / "sp-2"]
    files = [storage.job_dir / "chk-1" / "_metadata", storage.job_dir / "chk-1" / "_final"]
    files += [storage.job_dir / "savepoints" / "sp-2" / "_metadata"]
    for d in dirs:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


@pytest.mark.parametrize("job_id", ["../escape", "a/b", "..", "nul\x00", ""])
def test_unsafe_job_id_refused_before_anything_is_written(tmp_path: Path, job_id: str) -> None:
    with pytest.raises(ConfigError):
        LocalCheckpointStorage(tmp_path / "base", job_id)
    assert not (tmp_path / "base").exists()


def test_a_directory_fsync_that_fails_after_the_link_has_an_unknown_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#14 scenario 4: the new _metadata is linked (visible) but maybe not durable."""
    import twophase.coordinator.storage.local as local

    storage = LocalCheckpointStorage(tmp_path, "job")
    meta = CheckpointMetadata("job", 1, CheckpointKind.CHECKPOINT, 0, {})

    def fail(path: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(local, "_fsync_dir", fail)
    with pytest.raises(CheckpointPublishUnknownError, match="may"):
        storage.publish(meta)


def test_the_committed_marker_sits_beside_the_metadata_and_goes_with_the_checkpoint(tmp_path: Path) -> None:
    storage = LocalCheckpointStorage(tmp_path, "job")
    ref = storage.publish(CheckpointMetadata("job", 1, CheckpointKind.CHECKPOINT, 0, {}))
    assert not storage.is_committed(ref.location)
    storage.mark_committed(ref.location)
    storage.mark_committed(ref.location)  # idempotent
    assert storage.is_committed(ref.location) and storage.is_committed(str(Path(ref.location).parent))
    storage.delete(ref)
    assert not storage.is_committed(ref.location)


def _link_then(error: OSError) -> Callable[[str, str], None]:
    real = os.link

    def link(src: str, dst: str) -> None:  # it lands, but the caller hears an error (NFS retransmit)
        real(src, dst)
        if str(dst).endswith("_metadata"):  # the manifest's link; the committable files' go well
            raise error

    return link


def _fsync_fails_after_the_manifest(directory: Path) -> None:
    if (directory / "_metadata").exists():
        raise OSError(errno.EIO, "x")


def _fail(error: OSError) -> Callable[..., None]:
    def fail(*_args: object, **_kwargs: object) -> None:
        raise error

    return fail


LINK_EXITS: dict[str, tuple[Callable[[pytest.MonkeyPatch], object], str]] = {
    "linked": (lambda m: None, PUBLISHED),
    "the temporary file cannot be written": (
        lambda m: m.setattr(os, "fsync", _fail(OSError(errno.EIO, "x"))),
        NOT_PUBLISHED,
    ),
    "link fails, nothing linked": (
        lambda m: m.setattr(os, "link", _fail(OSError(errno.EIO, "x"))),
        NOT_PUBLISHED,
    ),
    "link lands but answers EIO": (
        lambda m: m.setattr(os, "link", _link_then(OSError(errno.EIO, "x"))),
        PUBLISHED,
    ),
    "link lands but answers EEXIST": (
        lambda m: m.setattr(os, "link", _link_then(FileExistsError(errno.EEXIST, "x"))),
        PUBLISHED,
    ),
    "link answers EIO and the name cannot be read back": (
        lambda m: (
            m.setattr(os, "link", _link_then(OSError(errno.EIO, "x"))),
            m.setattr(Path, "read_bytes", _fail(OSError(errno.EIO, "read"))),
        ),
        UNKNOWN,
    ),
    "the directory fsync fails after the link": (
        lambda m: m.setattr("twophase.coordinator.storage.local._fsync_dir", _fsync_fails_after_the_manifest),
        UNKNOWN,
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_EXITS))
def test_every_exit_of_publish_is_published_not_published_or_unknown(
    tmp_path: Path, make_meta: MakeMeta, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """#26 item 1: every way out of publish is one of three, and each means what it says."""
    storage = LocalCheckpointStorage(tmp_path, "job-1")
    meta = make_meta(2)
    inject, want = LINK_EXITS[case]
    with monkeypatch.context() as m:
        inject(m)
        got = publish_exit(lambda: storage.publish(meta))
    assert got == want
    visible = [r.checkpoint_id for r in storage.list_checkpoints()]
    if want == PUBLISHED:
        assert visible == [2] and storage.load(storage.list_checkpoints()[0]) == meta
    elif want == NOT_PUBLISHED:
        assert visible == []


def test_publish_exits_before_the_link_are_not_published(tmp_path: Path, make_meta: MakeMeta) -> None:
    storage = LocalCheckpointStorage(tmp_path, "job-1")
    assert publish_exit(lambda: storage.publish(make_meta(2, job_id="other"))) == NOT_PUBLISHED
    storage.publish(make_meta(2))
    assert publish_exit(lambda: storage.publish(make_meta(2))) == NOT_PUBLISHED  # the id exists
    assert publish_exit(lambda: storage.publish(make_meta(2, kind=SP))) == NOT_PUBLISHED


# -- checkpoint format v3: committable files under a manifest (issue #42 item 2) ------------------


def _arrow(storage: LocalCheckpointStorage, cid: int) -> Path:
    return next((storage.job_dir / f"chk-{cid}").glob("committables-*.arrow"))


def test_a_checkpoint_is_a_manifest_over_one_arrow_file_per_sink(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    meta = make_meta(2)
    ref = storage.publish(meta)
    names = sorted(p.name for p in (storage.job_dir / "chk-2").iterdir())
    assert names == ["_metadata", f"committables-1-{storage.writer.run}-0.arrow"]  # sink "orders" only
    manifest = json.loads(zlib.decompress(Path(ref.location).read_bytes()))
    entry = manifest["sinks"]["orders"]["committables"]
    assert manifest["version"] == 3 and manifest["sinks"]["archive"]["committables"] is None
    data = _arrow(storage, 2).read_bytes()
    assert entry == {
        "file": names[1],
        "rows": 3,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert pa.ipc.open_file(pa.py_buffer(data)).read_all().column_names == [
        "partition",
        "attempt",
        "checkpoint_id",
        "payload",
    ]
    assert LocalCheckpointStorage(storage.base_dir, "job-1").load(ref) == meta  # a new process


@pytest.mark.parametrize("how", ["missing", "truncated", "altered"])
def test_a_missing_or_corrupt_committable_file_fails_the_load_naming_it(
    storage: LocalCheckpointStorage, make_meta: MakeMeta, how: str
) -> None:
    ref = storage.publish(make_meta(2))
    path = _arrow(storage, 2)
    good = path.read_bytes()
    if how == "missing":
        path.unlink()
    else:
        path.write_bytes(good[:-10] if how == "truncated" else good[:50] + b"X" + good[51:])
    with pytest.raises(CommittableFileError, match=path.name) as info:
        storage.load(ref)
    assert ref.location in str(info.value)
    with pytest.raises(CommittableFileError):
        storage.latest()


def test_a_stale_run_publishing_the_same_id_leaves_the_winners_files(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    stale = LocalCheckpointStorage(storage.base_dir, "job-1")
    ref = storage.publish(make_meta(2))
    with pytest.raises(CheckpointNotPublishedError, match="exists"):
        stale.publish(make_meta(2, partitions=1))
    assert storage.load(ref) == make_meta(2)
    assert [p.name for p in (storage.job_dir / "chk-2").glob("*.arrow")] == [_arrow(storage, 2).name]


def test_retention_removes_own_leftover_files_and_keeps_another_runs(
    storage: LocalCheckpointStorage, make_meta: MakeMeta
) -> None:
    stale = LocalCheckpointStorage(storage.base_dir, "job-1")
    storage.publish(make_meta(1))
    leftover = storage.job_dir / "chk-2"
    leftover.mkdir()
    for writer in (storage.writer, stale.writer):  # files of checkpoint 2, no manifest
        for name, data in encode(make_meta(2), writer.run, 0).files:
            (leftover / name).write_bytes(data)
    storage.publish(make_meta(3))
    storage.apply_retention(1)
    assert [p.name for p in leftover.iterdir()] == [f"committables-1-{stale.writer.run}-0.arrow"]
    assert [r.checkpoint_id for r in storage.list_checkpoints()] == [3]
    assert not (storage.job_dir / "chk-1").exists()  # its files went with its manifest


def test_a_newer_version_is_refused_by_name(storage: LocalCheckpointStorage, make_meta: MakeMeta) -> None:
    ref = storage.publish(make_meta(2))
    text = zlib.decompress(Path(ref.location).read_bytes()).replace(b'"version":3', b'"version":4')
    Path(ref.location).write_bytes(zlib.compress(text))
    with pytest.raises(CorruptCheckpointError, match="version 4: this twophase reads versions 1 to 3"):
        storage.load(ref)


def test_a_reader_of_versions_1_and_2_refuses_a_manifest_by_version(make_meta: MakeMeta) -> None:
    """The previous release's reader checks ``version`` against (1, 2) before anything else, so a
    version 3 manifest fails its load as "unsupported checkpoint metadata version 3" (checked by
    hand against commit e18c614); ``CheckpointMetadata.loads``, the bytes-only reader, does too."""
    manifest = encode(make_meta(2), "0badc0de", 0).manifest
    with pytest.raises(CommittableDecodeError, match="version 3 is a manifest"):
        CheckpointMetadata.loads(manifest)
