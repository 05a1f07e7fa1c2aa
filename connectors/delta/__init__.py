"""The Delta Lake two-phase-commit sink (DESIGN.md §7 "Delta").

Executors write Parquet data files with pyarrow; the driver commits them with ``deltalake``
(delta-rs) as ONE Delta commit per checkpoint, carrying a ``txn`` action
``(appId = "<job-id>:<sink>", version = checkpoint id)`` that makes the commit idempotent
(Delta PROTOCOL.md, "Transaction Identifiers").

Public API: :class:`DeltaSinkConfig`, :class:`DeltaSink` (with ``commit_checkpoint``),
:class:`DeltaCommittable`, :class:`DeltaAddFile`.

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.delta.declaration import DECLARATION

__all__ = ["DeltaAddFile", "DeltaCommittable", "DeltaSink", "DeltaSinkConfig"]

if TYPE_CHECKING:
    from twophase.connectors.delta.config import DeltaSinkConfig
    from twophase.connectors.delta.internal.committable import DeltaAddFile, DeltaCommittable
    from twophase.connectors.delta.sink import DeltaSink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
