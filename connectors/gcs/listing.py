"""The read-only listing of what a job's GCS file sink left behind (``twophase lingering``): the
sessions a retained checkpoint holds, and the statement that no other session can be listed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twophase.connectors.gcs.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.gcs.sink import GcsFileSink


def list_lingering(sink: GcsFileSink, scope: LingeringScope[Any]) -> SinkLingering:
    """The objects-to-be of the job's GCS file sink that held checkpoints name (their sessions
    masked); sessions no checkpoint holds cannot be listed (the detail says so). No request is sent."""
    from twophase.connectors.gcs.internal.lingering import UNLISTABLE

    items = [LingeringItem.of(f.name, True, f"session {f.session}") for c in scope.held for f in c.files]
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "resumable upload sessions",
        sorted_items(items),
        detail=f"under {sink.config.location}; {UNLISTABLE}",
    )
