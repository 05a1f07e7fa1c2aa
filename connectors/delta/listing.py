"""The read-only listing of what a job's Delta sink left behind (``twophase lingering``).

This job's and sink's data files under the table root that no commit references
(:class:`~twophase.connectors.delta.internal.lingering.ReferenceIndex`), by the rules of the
sink's own ``abort_lingering``, changing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twophase.connectors.delta.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import ItemStatus, LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.delta.sink import DeltaSink


def list_lingering(sink: DeltaSink, scope: LingeringScope[Any]) -> SinkLingering:
    """The job's Delta data files no commit references.

    Raises:
        OSError / pyarrow errors: the table root cannot be listed.
    """
    from twophase.connectors.delta.internal import naming
    from twophase.connectors.delta.internal.filesystem import open_location
    from twophase.connectors.delta.internal.lingering import ReferenceIndex, load_table, own_files

    location = open_location(sink.config)
    token = naming.job_token(scope.job_id, scope.sink_name)
    held = {naming.decode_add_path(a.path) for c in scope.held for a in c.adds}
    table = load_table(sink.config)
    index = ReferenceIndex(location, table, naming.app_id(scope.job_id, scope.sink_name))
    files = own_files(location, token)
    items: list[LingeringItem] = []
    for rel, parsed in files:
        detail = f"checkpoint {parsed.checkpoint_id}"
        if rel in held:
            items.append(LingeringItem.of(rel, True, detail))
            continue
        referenced = index.is_referenced(rel, parsed.checkpoint_id)
        if referenced is None:
            items.append(LingeringItem(rel, ItemStatus.UNDECIDABLE, detail))
        elif not referenced:
            items.append(LingeringItem.of(rel, False, detail))
    version = table.version() if table is not None else -1
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "unreferenced data files",
        sorted_items(items),
        detail=f"version {version}, {len(files)} data files of the job",
    )
