"""Exactly-once files on Azure Blob Storage / ADLS Gen2 (staged blocks committed by the driver):
Parquet, JSON lines, CSV. See ``sink``.

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.azure.declaration import DECLARATION

__all__ = [
    "AzureBlobSink",
    "AzureBlobSinkConfig",
    "AzureCommittable",
    "FileFormat",
    "RollingPolicy",
    "StagedFile",
]

if TYPE_CHECKING:
    from twophase.connectors.azure.config import AzureBlobSinkConfig, FileFormat, RollingPolicy
    from twophase.connectors.azure.internal.committable import AzureCommittable, StagedFile
    from twophase.connectors.azure.sink import AzureBlobSink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
