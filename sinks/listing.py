"""What a sink left behind, as the read-only lingering listing reports it (``twophase lingering``).

A connector's declaration (:mod:`twophase.sinks.registry`) names a listing function that returns
a :class:`SinkLingering`: the sink's open transactions, pending uploads or unreferenced files for
one job, each classified by the same rules as the sink's own ``abort_lingering``, without changing
anything. Every item is ``lingering`` (no retained checkpoint or savepoint holds it: the sink's
``abort_lingering`` aborts or deletes it), ``held`` (a retained checkpoint or savepoint holds it:
it must be committed, never aborted) or ``undecidable`` (kept, e.g. a file that may belong to an
attempt still writing). No listing shows a password.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


class ItemStatus(enum.Enum):
    """What a listed item is (see the module docstring)."""

    LINGERING = "lingering"
    HELD = "held"
    UNDECIDABLE = "undecidable"


@dataclass(frozen=True)
class LingeringItem:
    """One open transaction, pending upload, tail object or data file.

    Attributes:
        id: the transactional id, the object key, the gid or the data file's path.
        status: lingering, held or undecidable.
        detail: e.g. the S3 upload id, ``tail object``, the checkpoint a data file was written for.
    """

    id: str
    status: ItemStatus
    detail: str = ""

    @classmethod
    def of(cls, item_id: str, held: bool, detail: str = "") -> LingeringItem:
        """A ``held`` item when ``held``, else a ``lingering`` one."""
        return cls(item_id, ItemStatus.HELD if held else ItemStatus.LINGERING, detail)

    def to_json(self) -> dict[str, str]:
        """``{"id", "status", "detail"}``."""
        return {"id": self.id, "status": self.status.value, "detail": self.detail}


def sorted_items(items: Iterable[LingeringItem]) -> tuple[LingeringItem, ...]:
    """``items`` by id, then detail (a listing's stable order)."""
    return tuple(sorted(items, key=lambda i: (i.id, i.detail)))


@dataclass(frozen=True)
class SinkLingering:
    """What one sink left behind.

    Attributes:
        sink: the sink's name.
        kind: the connector's kind (``kafka``, ``postgres``, ...), or the class name of a sink that
            cannot be listed.
        what: what the items are (``open transactions``, ...).
        items: the items, sorted by id.
        listable: False for sinks whose connector declares no listing.
        detail: extra facts (e.g. a table's version and the job's data files).
    """

    sink: str
    kind: str
    what: str
    items: tuple[LingeringItem, ...] = ()
    listable: bool = True
    detail: str = ""

    def ids(self, status: ItemStatus) -> list[str]:
        """The ids of the items with ``status``."""
        return [i.id for i in self.items if i.status is status]

    def count(self, status: ItemStatus) -> int:
        """How many items have ``status``."""
        return sum(1 for i in self.items if i.status is status)

    def to_json(self) -> dict[str, Any]:
        """``{"sink", "type", "what", "listable", "detail", "items": [...]}``."""
        return {
            "sink": self.sink,
            "type": self.kind,
            "what": self.what,
            "listable": self.listable,
            "detail": self.detail,
            "items": [i.to_json() for i in self.items],
        }
