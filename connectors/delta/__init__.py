"""The Delta Lake two-phase-commit sink (DESIGN.md §7 "Delta").

Executors write Parquet data files with pyarrow; the driver commits them with ``deltalake``
(delta-rs) as ONE Delta commit per checkpoint, carrying a ``txn`` action
``(appId = "<job-id>:<sink>", version = checkpoint id)`` that makes the commit idempotent
(Delta PROTOCOL.md, "Transaction Identifiers").

Public API: :class:`DeltaSinkConfig`, :class:`DeltaSink` (with ``commit_checkpoint``),
:class:`DeltaCommittable`, :class:`DeltaAddFile`.
"""

from twophase.connectors.delta.config import DeltaSinkConfig
from twophase.connectors.delta.internal.committable import DeltaAddFile, DeltaCommittable
from twophase.connectors.delta.sink import DeltaSink

__all__ = ["DeltaAddFile", "DeltaCommittable", "DeltaSink", "DeltaSinkConfig"]
