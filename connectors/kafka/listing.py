"""The read-only listing of what a job's Kafka sink left behind (``twophase lingering``).

Ongoing transactions under ``<prefix>-<sink>-`` (ListTransactions, else probing the id pool:
:func:`~twophase.connectors.kafka.internal.lingering.list_ongoing`), by the rules of the sink's own
``abort_lingering``, changing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twophase.connectors.kafka.declaration import DECLARATION
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import LingeringItem, SinkLingering, sorted_items

if TYPE_CHECKING:
    from twophase.connectors.kafka.sink import KafkaSink


def list_lingering(sink: KafkaSink, scope: LingeringScope[Any]) -> SinkLingering:
    """Ongoing transactions of the job's Kafka sink.

    Raises:
        ServiceUnavailableError: the brokers cannot be reached.
    """
    from twophase.connectors.kafka.internal import lingering, naming
    from twophase.connectors.kafka.internal.admin import KafkaAdmin

    prefix = sink.config.prefix(scope.job_id)
    admin = KafkaAdmin.connect(sink.config)
    try:
        ongoing = lingering.list_ongoing(admin, sink.config, scope)
    finally:
        admin.close()
    held = {c.transactional_id for c in scope.held}
    ours = sorted({t for t in ongoing if naming.parse_transactional_id(t, prefix, scope.sink_name)})
    return SinkLingering(
        scope.sink_name,
        DECLARATION.kind,
        "open transactions",
        sorted_items(LingeringItem.of(t, t in held) for t in ours),
        detail=f"transactional ids {prefix}-{scope.sink_name}-*",
    )
