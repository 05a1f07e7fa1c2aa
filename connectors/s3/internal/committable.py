"""The S3 sink's committable and in-progress state: frozen dataclasses, versioned JSON (never pickle).

Committable (``kind "s3.files"``, version 1), one per subtask and checkpoint: every file that
rolled in the epoch (several with partition columns or size rolling)::

    {"kind": "s3.files", "version": 1, "body": {"files": [
        {"bucket": "b", "key": "p/part-00000-3-<token>-<uuid>.parquet", "upload_id": "...",
         "parts": [{"number": 1, "etag": "\\"...\\"", "size": 8388608, "checksum_crc32": null}],
         "byte_count": 9000000, "record_count": 1000, "tail_prefix": null, "resumed": false}]}}

In-progress state (``kind "s3.in_progress"``, version 1), what ``snapshot_in_progress`` returns
and ``WriterContext.restored_state`` brings back: every file of the subtask still open::

    {"kind": "s3.in_progress", "version": 1, "body": {"files": [
        {"partition_path": "day=1", "bucket": "b", "key": "...", "file_id": "<uuid>",
         "upload_id": "...", "parts": [...], "uploaded_bytes": 5242880,
         "tail_key": "p/_twophase/<token>/tails/<uuid>/4-0-<nonce>.tail" | null, "tail_size": 1234,
         "record_count": 42, "opened_at_ms": 1700000000000, "last_write_ms": 1700000005000,
         "has_tails": true}]}}

No secrets: keys, ids, sizes and times only.
"""

from __future__ import annotations

from dataclasses import dataclass

from twophase.sinks.codec import CommittableCodec


@dataclass(frozen=True)
class UploadedPart:
    """One uploaded part of a multipart upload.

    Attributes:
        number: the part number, 1..10000, ascending within a file.
        etag: the ETag S3 returned for the part (quoted, as S3 sends it).
        size: the part's size in bytes.
        checksum_crc32: the part's CRC32 checksum if S3 returned one (sent back on completion).
    """

    number: int
    etag: str
    size: int
    checksum_crc32: str | None = None


@dataclass(frozen=True)
class PendingFile:
    """One rolled file waiting for CompleteMultipartUpload.

    Attributes:
        bucket: the bucket.
        key: the object key the file becomes visible at.
        upload_id: the multipart upload's id.
        parts: every part, ascending (all ≥ 5 MiB except the last).
        byte_count: the file's size in bytes (sum of part sizes); checked on recovery.
        record_count: rows in the file.
        tail_prefix: folder of temporary tail objects to delete after commit, or ``None``.
        resumed: the file was resumed from in-progress state that an earlier, durable checkpoint
            holds (one upload id and one tail folder for the file's whole life). Aborting this
            committable then leaves the upload and tails to that state: a retry resumes them again,
            and lingering cleanup removes them once no retained checkpoint holds them.
    """

    bucket: str
    key: str
    upload_id: str
    parts: tuple[UploadedPart, ...]
    byte_count: int
    record_count: int
    tail_prefix: str | None = None
    resumed: bool = False

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError(f"{self.key}: a pending file has at least one part")
        numbers = [p.number for p in self.parts]
        if numbers != sorted(set(numbers)):
            raise ValueError(f"{self.key}: part numbers must ascend without repeats, got {numbers}")
        if sum(p.size for p in self.parts) != self.byte_count:
            raise ValueError(f"{self.key}: byte_count {self.byte_count} != sum of part sizes")


@dataclass(frozen=True)
class S3Committable:
    """The committable of one subtask and checkpoint: the files that rolled (never empty)."""

    files: tuple[PendingFile, ...]

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("an S3 committable holds at least one file")


@dataclass(frozen=True)
class InProgressFile:
    """One file that stays open across a checkpoint (row formats only).

    Attributes:
        partition_path: Hive-style partition path of the file (``""`` without partition columns).
        bucket: the bucket.
        key: the object key (named after the checkpoint that opened the file).
        file_id: the uuid in the key; names the file's tail folder.
        upload_id: the open multipart upload.
        parts: parts uploaded so far (each ≥ 5 MiB).
        uploaded_bytes: sum of ``parts`` sizes.
        tail_key: the temporary object holding the bytes not yet uploaded (< 5 MiB), or ``None``.
        tail_size: the tail's size in bytes (0 without tail).
        record_count: rows written so far.
        opened_at_ms: when the file was opened (ms since the epoch), for the rollover interval.
        last_write_ms: when the file was last written (ms since the epoch), for inactivity.
        has_tails: whether any tail object was ever written for the file (cleanup after commit).
        resumed: the attempt resumed the file from an earlier checkpoint's state, so other attempts
            of the same subtask could have written to the same upload (checked before persisting).
    """

    partition_path: str
    bucket: str
    key: str
    file_id: str
    upload_id: str
    parts: tuple[UploadedPart, ...]
    uploaded_bytes: int
    tail_key: str | None
    tail_size: int
    record_count: int
    opened_at_ms: int
    last_write_ms: int
    has_tails: bool
    resumed: bool = False

    def __post_init__(self) -> None:
        if sum(p.size for p in self.parts) != self.uploaded_bytes:
            raise ValueError(f"{self.key}: uploaded_bytes {self.uploaded_bytes} != sum of part sizes")
        if (self.tail_key is None) != (self.tail_size == 0):
            raise ValueError(f"{self.key}: tail_key and tail_size disagree")

    @property
    def byte_count(self) -> int:
        """Bytes written to the file so far (parts plus tail)."""
        return self.uploaded_bytes + self.tail_size


@dataclass(frozen=True)
class InProgressState:
    """The in-progress state of one subtask: its open files (never empty)."""

    files: tuple[InProgressFile, ...]


COMMITTABLE_CODEC: CommittableCodec[S3Committable] = CommittableCodec(
    S3Committable, kind="s3.files", version=1
)
"""Encodes :class:`S3Committable` (checkpoint metadata)."""

IN_PROGRESS_CODEC: CommittableCodec[InProgressState] = CommittableCodec(
    InProgressState, kind="s3.in_progress", version=1
)
"""Encodes :class:`InProgressState` (``snapshot_in_progress`` / ``WriterContext.restored_state``)."""
