"""Exactly-once S3 sink (multipart uploads): Parquet, JSON lines, CSV. See ``sink`` and DESIGN.md §7."""

from connectors.s3.committable import (
    COMMITTABLE_CODEC,
    IN_PROGRESS_CODEC,
    InProgressFile,
    InProgressState,
    PendingFile,
    S3Committable,
    UploadedPart,
)
from connectors.s3.config import FileFormat, RollingPolicy, S3SinkConfig
from connectors.s3.sink import S3Sink

__all__ = [
    "COMMITTABLE_CODEC",
    "IN_PROGRESS_CODEC",
    "FileFormat",
    "InProgressFile",
    "InProgressState",
    "PendingFile",
    "RollingPolicy",
    "S3Committable",
    "S3Sink",
    "S3SinkConfig",
    "UploadedPart",
]
