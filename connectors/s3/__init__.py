"""Exactly-once S3 sink (multipart uploads): Parquet, JSON lines, CSV. See ``sink`` and DESIGN.md §7."""

from twophase.connectors.s3.config import FileFormat, RollingPolicy, S3SinkConfig
from twophase.connectors.s3.internal.committable import PendingFile, S3Committable
from twophase.connectors.s3.sink import S3Sink

__all__ = ["FileFormat", "PendingFile", "RollingPolicy", "S3Committable", "S3Sink", "S3SinkConfig"]
