"""The S3 sink's Spark-staged epoch (issue #44 item 4): Spark's own Parquet writer writes, the
driver commits.

Spark writes the epoch through the S3A magic committer (Hadoop's ``hadoop-aws``, Spark's
``spark-hadoop-cloud``): every file a task writes stays a pending multipart upload, and each
committed task attempt lists its uploads in one ``.pendingset`` file under the job's
``__magic_job-<uuid>/`` folder (Spark's output commit coordination lets one attempt per partition
commit). The write names twophase's committer factory (``connectors/s3/jvm``) in its own options,
so its job commit, cleanup and abort do nothing: the uploads stay pending, and this module turns the
``.pendingset`` files into the epoch's committables (one :class:`S3Committable` per Spark task, its
parts read back with ListParts so that what is persisted is what S3 holds). The sink's driver then
completes them like any other committable (CompleteMultipartUpload). A job abort aborts nothing
here: the magic committer's own abort would abort every pending upload under the destination,
other checkpoints' pre-committed ones included; the lingering cleanup aborts what no retained
checkpoint holds.

Objects: ``<prefix>/part-<split>-<spark job uuid>-c000.snappy.parquet`` (Spark's names) and, until
the commit's cleanup, ``<prefix>/__magic_job-<job uuid>/...`` (the markers and ``.pendingset``
files; readers skip ``_``-prefixed folders). ``<job uuid>`` is :func:`staged_job_uuid`: the job and
sink's token, the checkpoint and a nonce per write attempt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from twophase.connectors.s3.internal.committable import PendingFile, S3Committable, UploadedPart
from twophase.sinks.errors import ConcurrentAttemptError, ConfigError

FACTORY_CLASS = "twophase.s3.StagingCommitterFactory"
"""The committer factory a staged write names (``connectors/s3/jvm``)."""

MAGIC_FOLDER = "__magic_job-"
"""How the magic committer names a job's folder under the destination: this, then the job's uuid."""

_CLOUD = "org.apache.spark.internal.io.cloud"
SESSION_SETTINGS = {
    "spark.sql.sources.commitProtocolClass": "twophase.s3.StagingCommitProtocol",
    "spark.sql.parquet.output.committer.class": f"{_CLOUD}.BindingParquetOutputCommitter",
}
"""Session settings a staged write needs (Spark's cloud-integration guide, "Hadoop S3A committers"):
only Spark's cloud commit protocol asks the committer where a task writes; twophase's
(``connectors/s3/jvm``) is that protocol, which also hands the committer the id Spark names the
write's files after, and changes no other write. Both are session-wide, so the sink checks them
rather than setting them."""

_TASK_RE = re.compile(r"task_\w+?_m_(?P<split>\d+)\.pendingset")
_UUID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def staged_job_uuid(token: str, checkpoint_id: int, nonce: str) -> str:
    """The job uuid of one staged write: ``twophase-<token>-<checkpoint>-<nonce>``.

    The magic committer names its folder after it (``__magic_job-<uuid>``), so the lingering cleanup
    can tell this sink's staged writes from anything else under the prefix, and each write attempt
    of a checkpoint has its own folder (``nonce``: hex, fresh per attempt).

    Raises:
        ValueError: a negative checkpoint or a token or nonce that is not ``[A-Za-z0-9]``.
    """
    if checkpoint_id < 0 or not token.isalnum() or not nonce.isalnum():
        raise ValueError(f"bad staged job uuid parts: {token!r}, {checkpoint_id}, {nonce!r}")
    return f"twophase-{token}-{checkpoint_id}-{nonce}"


def marker_key(prefix: str, token: str, job_uuid: str) -> str:
    """Where a staged write's committer records that the write started, before any task runs:
    ``<prefix>/_twophase/<token>/staged/<job uuid>`` (readers skip ``_twophase/``). It holds the
    write's job uuid and the id Spark names its files after (:func:`file_job_id`), which only
    ``StagingCommitProtocol`` sees, so that an attempt killed while it wrote a file leaves an
    upload the lingering cleanup can still place (:func:`files_of_write`)."""
    return (
        f"{prefix}/_twophase/{token}/staged/{job_uuid}" if prefix else f"_twophase/{token}/staged/{job_uuid}"
    )


def markers_root(prefix: str, token: str) -> str:
    """The folder of this job and sink's staged-write markers (ends with '/')."""
    return marker_key(prefix, token, "")


def write_options(job_uuid: str, marker: str | None = None) -> dict[str, str]:
    """The options of one staged write (``DataFrameWriter.options``): Spark builds each write's
    Hadoop configuration from them, so they reach this write's committer and no other. ``marker``:
    the ``s3a://`` location where the committer records that the write started (:func:`marker_key`).

    Raises:
        ValueError: ``job_uuid`` is not a valid uuid for a folder name.
    """
    if not _UUID_RE.fullmatch(job_uuid):
        raise ValueError(f"bad staged job uuid {job_uuid!r}")
    return {
        "mapreduce.outputcommitter.factory.scheme.s3a": FACTORY_CLASS,
        "fs.s3a.committer.name": "magic",
        "fs.s3a.committer.magic.enabled": "true",
        "fs.s3a.committer.uuid": job_uuid,
        "fs.s3a.committer.require.uuid": "true",
        **({"twophase.staged.marker": marker} if marker else {}),
    }


@dataclass(frozen=True)
class StagedTarget:
    """The names of one staged write.

    Attributes:
        bucket: the sink's bucket.
        job_uuid: the write's job uuid (:func:`staged_job_uuid`).
        marker: the key of its marker (:func:`marker_key`).
        folder: its magic folder's key prefix (:func:`magic_folder`, ends with '/').
        location: where Spark writes (``s3a://<bucket>/<prefix>``).
    """

    bucket: str
    job_uuid: str
    marker: str
    folder: str
    location: str

    @classmethod
    def of(cls, bucket: str, prefix: str, token: str, job_uuid: str) -> StagedTarget:
        """The names of ``job_uuid``'s write under ``bucket``/``prefix`` for ``token``."""
        return cls(
            bucket,
            job_uuid,
            marker_key(prefix, token, job_uuid),
            magic_folder(prefix, job_uuid),
            f"s3a://{bucket}/{prefix}" if prefix else f"s3a://{bucket}/",
        )

    def options(self) -> dict[str, str]:
        """The write's options (:func:`write_options`, with its marker)."""
        return write_options(self.job_uuid, f"s3a://{self.bucket}/{self.marker}")


def check_session(setting: Callable[[str], str | None]) -> None:
    """Check that the session can stage a write (:data:`SESSION_SETTINGS`).

    Args:
        setting: the session's value of a setting, or ``None`` (``spark.conf.get(key, None)``).

    Raises:
        ConfigError: a setting is missing or different, naming it and its value to set.
    """
    for key, wanted in SESSION_SETTINGS.items():
        if setting(key) != wanted:
            raise ConfigError(
                f"the S3 sink's Spark-staged writes need the session setting {key}={wanted} "
                "(Spark's cloud commit protocol; spark-hadoop-cloud on the class path)"
            )


def magic_folder(prefix: str, job_uuid: str) -> str:
    """The key prefix of one staged write's magic folder (ends with '/')."""
    return f"{prefix}/{MAGIC_FOLDER}{job_uuid}/" if prefix else f"{MAGIC_FOLDER}{job_uuid}/"


def split_of(key: str) -> int:
    """The Spark partition (split) a ``.pendingset`` key belongs to: ``..._m_<split>.pendingset``.

    Raises:
        ValueError: the key is not a task's ``.pendingset``.
    """
    m = _TASK_RE.fullmatch(key.rsplit("/", 1)[-1])
    if m is None:
        raise ValueError(f"not a task's .pendingset: {key!r}")
    return int(m.group("split"))


@dataclass(frozen=True)
class StagedUpload:
    """One file of a ``.pendingset``: the pending upload and the part ETags Spark's task recorded.

    Attributes:
        bucket: the bucket.
        key: the object key the file becomes visible at.
        upload_id: the multipart upload.
        etags: each part's ETag, part 1 first.
        length: the file's size in bytes.
    """

    bucket: str
    key: str
    upload_id: str
    etags: tuple[str, ...]
    length: int


def uploads_of(pendingset: Mapping[str, Any]) -> list[StagedUpload]:
    """The uploads one ``.pendingset`` lists (its JSON, Hadoop's ``PendingSet``).

    Hadoop 3.4 writes each part's ETag as an object (``{"etag": ...}``), earlier releases as a
    string; both are read.

    Raises:
        ValueError: a commit lacks its bucket, key, upload id or ETags.
    """
    out = []
    for c in pendingset.get("commits", []):
        etags = tuple(str(t["etag"] if isinstance(t, dict) else t) for t in c.get("etags") or ())
        if not (c.get("bucket") and c.get("destinationKey") and c.get("uploadId") and etags):
            raise ValueError(f"incomplete pending commit in a .pendingset: {sorted(c)}")
        out.append(
            StagedUpload(c["bucket"], c["destinationKey"], c["uploadId"], etags, int(c.get("length", 0)))
        )
    return out


def pending_file(
    upload: StagedUpload, listed: Mapping[int, tuple[str, int]], folder: str | None = None
) -> PendingFile:
    """The committable's file of ``upload``, its parts as S3 lists them (number → ETag, size);
    ``folder``, the write's magic folder, is deleted once the file is committed (as a tail folder
    is: every file of the write names it, and the first commit's cleanup removes it).

    Raises:
        ConcurrentAttemptError: S3's parts differ from the task's record (another attempt wrote
            to the upload, or it is gone): the checkpoint must not persist it.
    """
    numbers = list(range(1, len(upload.etags) + 1))
    if sorted(listed) != numbers or any(listed[n][0] != upload.etags[n - 1] for n in numbers):
        raise ConcurrentAttemptError(
            f"s3://{upload.bucket}/{upload.key}: the upload's parts are not those its task committed"
        )
    parts = tuple(UploadedPart(n, listed[n][0], listed[n][1]) for n in numbers)
    return PendingFile(
        upload.bucket, upload.key, upload.upload_id, parts, sum(p.size for p in parts), 0, tail_prefix=folder
    )


def staged_committables(
    pendingsets: Mapping[str, Mapping[str, Any]],
    list_parts: Callable[[str, str], Mapping[int, tuple[str, int]]],
    threads: int = 8,
    folder: str | None = None,
) -> dict[int, S3Committable]:
    """Each Spark partition's committable from the write's ``.pendingset`` files.

    Args:
        pendingsets: key → parsed JSON of every ``.pendingset`` in the write's magic folder.
        list_parts: ``(key, upload_id)`` → the upload's parts now (number → (ETag, size)).
        threads: ListParts calls in flight.
        folder: the write's magic folder, deleted after the commit (:func:`pending_file`).

    Returns:
        split → its committable; a split that wrote no file has none.

    Raises:
        ValueError: a key that is not a task's ``.pendingset``, two for one split, or a bad one.
        ConcurrentAttemptError: an upload's parts differ from its task's record.
    """
    uploads: dict[int, list[StagedUpload]] = {}
    for key, body in pendingsets.items():
        split = split_of(key)
        if split in uploads:
            raise ValueError(f"two .pendingset files for split {split}: only one attempt commits a task")
        uploads[split] = uploads_of(body)
    flat = [(split, u) for split, us in sorted(uploads.items()) for u in us]
    with ThreadPoolExecutor(max(1, min(threads, len(flat) or 1))) as pool:
        listed = list(pool.map(lambda su: list_parts(su[1].key, su[1].upload_id), flat))
    files: dict[int, list[PendingFile]] = {}
    for (split, upload), parts in zip(flat, listed, strict=True):
        files.setdefault(split, []).append(pending_file(upload, parts, folder))
    return {split: S3Committable(tuple(fs)) for split, fs in files.items()}


def read_pendingsets(
    keys: Iterable[str], get: Callable[[str], bytes], threads: int = 8
) -> dict[str, Mapping[str, Any]]:
    """Read and parse the ``.pendingset`` objects among ``keys`` (others are skipped).

    Raises:
        ValueError: one is not JSON.
    """
    wanted: Sequence[str] = [k for k in keys if k.endswith(".pendingset")]
    with ThreadPoolExecutor(max(1, min(threads, len(wanted) or 1))) as pool:
        bodies = list(pool.map(get, wanted))
    return {k: json.loads(b) for k, b in zip(wanted, bodies, strict=True)}


_FOLDER_RE = re.compile(r"__magic_job-twophase-(?P<token>[0-9a-f]+)-(?P<checkpoint>\d+)-(?P<nonce>[0-9a-f]+)")


@dataclass(frozen=True)
class StagedFolder:
    """One staged write's magic folder under the sink's prefix, as a listing shows it.

    Attributes:
        folder: its key prefix (ends with '/').
        checkpoint_id: the checkpoint the write staged.
        keys: every object under it (markers, ``.pending`` and ``.pendingset`` files).
    """

    folder: str
    checkpoint_id: int
    keys: tuple[str, ...]


def staged_folders(prefix: str, token: str, keys: Iterable[str]) -> list[StagedFolder]:
    """The magic folders of this job and sink's staged writes among ``keys`` (a listing of
    ``<prefix>/__magic_job-twophase-<token>``), each with its objects."""
    root = f"{prefix}/" if prefix else ""
    found: dict[str, tuple[int, list[str]]] = {}
    for key in keys:
        first, _, _ = key[len(root) :].partition("/") if key.startswith(root) else ("", "", "")
        m = _FOLDER_RE.fullmatch(first)
        if m is None or m.group("token") != token:
            continue
        folder = f"{root}{first}/"
        found.setdefault(folder, (int(m.group("checkpoint")), []))[1].append(key)
    return [StagedFolder(f, cid, tuple(ks)) for f, (cid, ks) in sorted(found.items())]


def staged_uploads(folder: StagedFolder, get: Callable[[str], bytes]) -> list[StagedUpload]:
    """Every upload a staged write's folder records: those of its committed tasks (``.pendingset``)
    and of task attempts that wrote files but never committed (``.pending``, one per file: a
    failed or killed attempt's; a committed attempt's are gone with its attempt folder).

    Raises:
        ValueError: an object that is not JSON or a record without its upload.
    """
    out: list[StagedUpload] = []
    for key in folder.keys:
        if key.endswith(".pendingset"):
            out.extend(uploads_of(json.loads(get(key))))
        elif key.endswith(".pending"):
            out.extend(uploads_of({"commits": [json.loads(get(key))]}))
    return out


@dataclass(frozen=True)
class StagedMarker:
    """A staged write's marker: its key, the write's job uuid and checkpoint."""

    key: str
    job_uuid: str
    checkpoint_id: int


def staged_markers(prefix: str, token: str, keys: Iterable[str]) -> list[StagedMarker]:
    """The markers of this job and sink's staged writes among ``keys`` (a listing of
    :func:`markers_root`)."""
    root = markers_root(prefix, token)
    out = []
    for key in keys:
        name = key[len(root) :] if key.startswith(root) else ""
        m = _FOLDER_RE.fullmatch(MAGIC_FOLDER + name)
        if m is not None and m.group("token") == token:
            out.append(StagedMarker(key, name, int(m.group("checkpoint"))))
    return out


def file_job_id(marker_body: bytes) -> str | None:
    """The id Spark named a staged write's files after, as its marker records it (the marker's
    second line, written by ``StagingCommitter.setupJob`` from ``StagingCommitProtocol``), or
    ``None`` when the marker has none (a write whose session ran another commit protocol)."""
    lines = marker_body.decode("utf-8", "replace").split("\n")
    found = lines[1].strip() if len(lines) > 1 else ""
    return found if _UUID_RE.fullmatch(found) else None


def files_of_write(prefix: str, job_id: str, keys: Iterable[str]) -> list[str]:
    """Which of ``keys`` are files a staged write names: under ``prefix`` (partition folders
    included), named ``part-<split>-<job id>`` then Spark's suffix (``-c000.snappy.parquet``).
    Uploads at these keys that no retained checkpoint holds are that write's leftovers, among
    them the file an attempt was killed while writing, which no ``.pending`` record names."""
    root = f"{prefix}/" if prefix else ""
    name = re.compile(rf"part-\d+-{re.escape(job_id)}[-.].*")
    return [k for k in keys if k.startswith(root) and name.fullmatch(k.rsplit("/", 1)[-1])]
