"""The GCS file sink's committable: frozen dataclasses, versioned JSON (never pickle).

Committable (``kind "gcs.files"``, version 1), one per subtask and checkpoint: every file that
rolled in the epoch, each an unfinalized resumable upload session::

    {"kind": "gcs.files", "version": 1, "body": {"files": [
        {"bucket": "b", "name": "p/part-00000-3-<token>-<uuid>.parquet",
         "session_uri": "https://storage.googleapis.com/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=...",
         "persisted_bytes": 8388608, "tail": {"$b64": "..."}, "byte_count": 8390000,
         "crc32c": "<base64>", "md5": "<base64>", "record_count": 1000,
         "content_type": "application/vnd.apache.parquet"}]}}

Why the tail: GCS persists the chunks of an unfinished resumable upload only in multiples of
256 KiB, so the file's last ``byte_count % 256 KiB`` bytes (or, for a file smaller than a chunk,
all of it) cannot be sent before the final, finalizing request, which is the driver's commit.
They travel in the checkpoint: at most 256 KiB − 1 per file.

The session URI is a capability: whoever holds it can finish that one upload, without other
credentials, until the session ends (a week at most). It is in the checkpoint because the driver
needs it to commit; it is masked in ``repr`` and logs
(:func:`~twophase.connectors.gcs.internal.naming.mask_session`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twophase.connectors.gcs.config import CHUNK_QUANTUM
from twophase.connectors.gcs.internal.naming import mask_session
from twophase.sinks.codec import CommittableCodec


@dataclass(frozen=True)
class PendingUpload:
    """One rolled file: a resumable upload session holding all but its tail, waiting for the
    driver to finalize it.

    Attributes:
        bucket: the bucket.
        name: the object name the file becomes visible at (unique to this file).
        session_uri: the session's URI (a capability; masked in ``repr``).
        persisted_bytes: bytes the task uploaded into the session (a multiple of 256 KiB).
        tail: the file's remaining bytes (fewer than 256 KiB), sent by the finalizing request.
        byte_count: the file's size in bytes (``persisted_bytes + len(tail)``).
        crc32c: base64 of the file's big-endian CRC32C, as GCS reports it.
        md5: base64 of the file's MD5, as GCS reports it.
        record_count: rows in the file.
        content_type: the object's Content-Type, set when the session was initiated.
    """

    bucket: str
    name: str
    session_uri: str = field(repr=False)
    persisted_bytes: int
    tail: bytes = field(repr=False)
    byte_count: int
    crc32c: str
    md5: str
    record_count: int
    content_type: str

    def __post_init__(self) -> None:
        if self.persisted_bytes % CHUNK_QUANTUM or self.persisted_bytes + len(self.tail) != self.byte_count:
            raise ValueError(f"{self.name}: persisted bytes and tail do not make the file's size")
        if len(self.tail) >= CHUNK_QUANTUM or self.byte_count < 1:
            raise ValueError(f"{self.name}: a tail is under 256 KiB and a file is not empty")

    @property
    def session(self) -> str:
        """The session URI, masked for logs and messages."""
        return mask_session(self.session_uri)


@dataclass(frozen=True)
class GcsCommittable:
    """The committable of one subtask and checkpoint: the files that rolled (never empty)."""

    files: tuple[PendingUpload, ...]

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("a GCS committable holds at least one file")


COMMITTABLE_CODEC: CommittableCodec[GcsCommittable] = CommittableCodec(
    GcsCommittable, kind="gcs.files", version=1
)
"""Encodes :class:`GcsCommittable` (checkpoint metadata)."""
