"""The PostgreSQL two-phase-commit sink (psycopg 3; issue #28).

Executors write each subtask's rows in one database transaction (binary COPY; append or upsert)
and pre-commit it with ``PREPARE TRANSACTION '<gid>'``; the driver commits it with
``COMMIT PREPARED`` once the checkpoint is durable. A row of a small commit-record table, written
inside the prepared transaction, tells ALREADY_COMMITTED from LOST when a gid is gone. The server
needs ``max_prepared_transactions`` > 0.

Public API: :class:`PostgresSinkConfig`, :class:`PostgresSink`, :class:`PostgresCommittable`.

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.postgres.declaration import DECLARATION

__all__ = ["PostgresCommittable", "PostgresSink", "PostgresSinkConfig"]

if TYPE_CHECKING:
    from twophase.connectors.postgres.config import PostgresSinkConfig
    from twophase.connectors.postgres.internal.committable import PostgresCommittable
    from twophase.connectors.postgres.sink import PostgresSink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
