"""Exactly-once S3 sink (multipart uploads): Parquet, JSON lines, CSV. See ``sink`` and DESIGN.md §7.

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.s3.declaration import DECLARATION

__all__ = [
    "FileFormat",
    "PendingFile",
    "RollingPolicy",
    "S3Committable",
    "S3Sink",
    "S3SinkConfig",
    "staging_jar",
]

if TYPE_CHECKING:
    from twophase.connectors.s3.config import FileFormat, RollingPolicy, S3SinkConfig
    from twophase.connectors.s3.internal.committable import PendingFile, S3Committable
    from twophase.connectors.s3.jvm_jar import staging_jar
    from twophase.connectors.s3.sink import S3Sink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
