"""The read-only listing of what a job's Azure file sink left behind (``twophase lingering``):
its blobs holding staged blocks and no committed blob, by the rules of the sink's own
``abort_lingering``, changing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twophase.connectors.azure.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.azure.sink import AzureBlobSink


def list_lingering(sink: AzureBlobSink, scope: LingeringScope[Any]) -> SinkLingering:
    """Blobs of the job's Azure file sink that hold staged blocks only.

    Raises:
        ServiceUnavailableError / ConfigError: Azure keeps failing or access is denied.
    """
    from twophase.connectors.azure.internal import lingering
    from twophase.connectors.azure.internal.blobs import BlobOps, cached_client

    ops = BlobOps(cached_client(sink.config), sink.config)
    items = [
        LingeringItem.of(name, held, "staged blocks") for name, held in lingering.lingering_blobs(ops, scope)
    ]
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "staged blocks",
        sorted_items(items),
        detail=f"under {sink.config.location}",
    )
