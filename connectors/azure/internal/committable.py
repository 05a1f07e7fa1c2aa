"""The Azure file sink's committable: frozen dataclasses, versioned JSON (never pickle).

Committable (``kind "azure.files"``, version 1), one per subtask and checkpoint: every file
that rolled in the epoch, each a blob name and the ids of the blocks staged for it, in order::

    {"kind": "azure.files", "version": 1, "body": {"files": [
        {"container": "c", "blob": "p/part-00000-3-<token>-<uuid>.parquet",
         "block_ids": ["<nonce>000001", "<nonce>000002"], "byte_count": 9000000,
         "record_count": 1000, "content_type": "application/vnd.apache.parquet"}]}}

No secrets: names, ids and sizes only.
"""

from __future__ import annotations

from dataclasses import dataclass

from twophase.sinks.codec import CommittableCodec


@dataclass(frozen=True)
class StagedFile:
    """One rolled file: blocks staged under its final blob name, waiting for Put Block List.

    Attributes:
        container: the container.
        blob: the blob name the file becomes visible at (unique to this file).
        block_ids: the staged blocks, in file order (ids as given to Put Block, before base64).
        byte_count: the file's size in bytes (sum of the blocks'); checked on a repeated commit.
        record_count: rows in the file.
        content_type: the blob's Content-Type, set by Put Block List.
    """

    container: str
    blob: str
    block_ids: tuple[str, ...]
    byte_count: int
    record_count: int
    content_type: str

    def __post_init__(self) -> None:
        if not self.block_ids:
            raise ValueError(f"{self.blob}: a staged file has at least one block")
        if len(set(self.block_ids)) != len(self.block_ids):
            raise ValueError(f"{self.blob}: block ids repeat")


@dataclass(frozen=True)
class AzureCommittable:
    """The committable of one subtask and checkpoint: the files that rolled (never empty)."""

    files: tuple[StagedFile, ...]

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError("an Azure committable holds at least one file")


COMMITTABLE_CODEC: CommittableCodec[AzureCommittable] = CommittableCodec(
    AzureCommittable, kind="azure.files", version=1
)
"""Encodes :class:`AzureCommittable` (checkpoint metadata)."""
