"""The read-only listing of what a job's Iceberg sink left behind (``twophase lingering``).

This job's and sink's data files under its data prefix of the table's location that no snapshot
references (:mod:`~twophase.connectors.iceberg.internal.lingering`), by the rules of the sink's own
``abort_lingering``, changing nothing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from twophase.connectors.iceberg.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import ItemStatus, LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.iceberg.sink import IcebergSink


def list_lingering(sink: IcebergSink, scope: LingeringScope[Any], now_ms: int | None = None) -> SinkLingering:
    """The job's data files of its Iceberg sink that no snapshot
    references, by path relative to the table's location. One younger than the sink's
    ``lingering_grace_ms`` (at ``now_ms``, default now) or of a checkpoint after
    ``scope.up_to_checkpoint`` is ``undecidable``: ``abort_lingering`` keeps it.

    Raises:
        ServiceUnavailableError: the catalog cannot be reached (the message is redacted).
        OSError: the table's location cannot be listed.
    """
    from twophase.connectors.iceberg.internal import naming
    from twophase.connectors.iceberg.internal.catalog import load_table, open_catalog
    from twophase.connectors.iceberg.internal.committer import referenced_paths
    from twophase.connectors.iceberg.internal.lingering import own_files

    config = sink.config
    now = int(time.time() * 1000) if now_ms is None else now_ms
    with open_catalog(config) as catalog:
        table = load_table(catalog, config)
        if table is None:
            return SinkLingering(
                scope.sink_name,
                DECLARATION.kind,
                "unreferenced data files",
                detail=f"no table {config.table}",
            )
        location = table.location().rstrip("/")
        prefix = naming.job_data_prefix(location, naming.job_token(scope.job_id, scope.sink_name))
        files = own_files(table.io, prefix)
        referenced = referenced_paths(table)
        snapshot = table.current_snapshot()
    held = {f.path for c in scope.held for f in c.files}
    items = []
    for f in files:
        if f.path in referenced:
            continue
        rel = f.path[len(location) + 1 :] if f.path.startswith(location + "/") else f.path
        detail = f"checkpoint {f.name.checkpoint_id}"
        young = f.modified_ms is None or now - f.modified_ms < config.lingering_grace_ms
        if f.path not in held and (young or f.name.checkpoint_id > scope.up_to_checkpoint):
            why = "younger than the grace" if young else "a later checkpoint"
            items.append(LingeringItem(rel, ItemStatus.UNDECIDABLE, f"{detail}, {why}: kept"))
        else:
            items.append(LingeringItem.of(rel, f.path in held, detail))
    current = snapshot.snapshot_id if snapshot is not None else "none"
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "unreferenced data files",
        sorted_items(items),
        detail=f"table {config.table} at {location}, snapshot {current}, {len(files)} data files of the job",
    )
