"""Exactly-once files on Google Cloud Storage (resumable uploads finalized by the driver):
Parquet, JSON lines, CSV. See ``sink``.

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.gcs.declaration import DECLARATION

__all__ = [
    "FileFormat",
    "GcsCommittable",
    "GcsFileSink",
    "GcsFileSinkConfig",
    "PendingUpload",
    "RollingPolicy",
]

if TYPE_CHECKING:
    from twophase.connectors.gcs.config import FileFormat, GcsFileSinkConfig, RollingPolicy
    from twophase.connectors.gcs.internal.committable import GcsCommittable, PendingUpload
    from twophase.connectors.gcs.sink import GcsFileSink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
