"""Read-only listing of what a job's sinks left behind: the state ``abort_lingering`` would clean up.

Each connector lists its own sinks by the rules of its own ``abort_lingering``, changing nothing:
its declaration (:mod:`twophase.sinks.registry`) names the listing function, found here by the
sink's class. Every item is ``lingering``, ``held`` or ``undecidable``
(:mod:`twophase.sinks.listing`). A sink of a connector that declares no listing, or of a class no
declaration names, is reported as not listable; its own ``abort_lingering`` still works. No
listing shows a password.
"""

from __future__ import annotations

from typing import Any

from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.context import LingeringScope
from twophase.sinks.listing import ItemStatus, LingeringItem, SinkLingering
from twophase.sinks.registry import CONNECTORS

__all__ = ["ItemStatus", "LingeringItem", "SinkLingering", "list_lingering"]

AnySink = TwoPhaseCommitSink[Any, Any]


def list_lingering(sink: AnySink, scope: LingeringScope[Any]) -> SinkLingering:
    """List what ``sink`` left behind for ``scope``'s job, classified against ``scope``'s held state.

    Args:
        sink: the job's sink, configured as the job configures it.
        scope: the job id and sink name, and what retained checkpoints hold (decoded committables
            and in-progress states). An empty scope lists everything as lingering.

    Raises:
        ServiceUnavailableError: the external system cannot be reached.
        CommittableDecodeError: a held in-progress state cannot be decoded.
    """
    declaration = CONNECTORS.of_sink(sink)
    if declaration is None:
        return SinkLingering(sink.name, type(sink).__name__, "(cannot be listed)", listable=False)
    return declaration.list_lingering(sink, scope)
