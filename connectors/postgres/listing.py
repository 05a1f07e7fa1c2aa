"""The read-only listing of what a job's PostgreSQL sink left behind (``twophase lingering``).

This job's and sink's prepared transactions in ``pg_prepared_xacts`` (gids under
:func:`~twophase.connectors.postgres.internal.naming.gid_prefix`, the configured database's only),
by the rules of the sink's own ``abort_lingering``, changing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twophase.connectors.postgres.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import ItemStatus, LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.postgres.sink import PostgresSink


def list_lingering(sink: PostgresSink, scope: LingeringScope[Any]) -> SinkLingering:
    """The job's prepared transactions of its PostgreSQL sink, oldest
    first by gid; a gid of a checkpoint after ``scope.up_to_checkpoint`` is ``undecidable`` (work
    that may still run: ``abort_lingering`` keeps it).

    Raises:
        ServiceUnavailableError: the server cannot be reached (the message holds no password).
    """
    from twophase.connectors.postgres.internal import naming
    from twophase.connectors.postgres.internal.connection import connect
    from twophase.connectors.postgres.internal.lingering import prepared_transactions

    prefix = naming.gid_prefix(scope.job_id, scope.sink_name)
    with connect(sink.config, autocommit=True) as conn:
        prepared = prepared_transactions(conn, prefix)
    held = {c.gid for c in scope.held}
    items = []
    for p in prepared:
        detail = f"checkpoint {p.parts.checkpoint_id}, prepared {p.age_ms / 1000:.0f} s ago by {p.owner}"
        if p.gid not in held and p.parts.checkpoint_id > scope.up_to_checkpoint:
            items.append(LingeringItem(p.gid, ItemStatus.UNDECIDABLE, detail))
        else:
            items.append(LingeringItem.of(p.gid, p.gid in held, detail))
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "prepared transactions",
        sorted_items(items),
        detail=f"gids {prefix}* in {sink.config.where}",
    )
