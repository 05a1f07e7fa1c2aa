"""The Apache Iceberg two-phase-commit sink (pyiceberg; issue #28).

Executors write Parquet data files with pyarrow under the job's data prefix of the table's
location; the driver commits them as ONE append snapshot per checkpoint whose summary records
``twophase.job-id``, ``twophase.sink`` and ``twophase.checkpoint-id``, which makes the commit
idempotent (Iceberg table spec: snapshot summary, optimistic concurrency). Catalogs: pyiceberg's
SQL catalog on SQLite (embedded default) or PostgreSQL; REST is untested.

Public API: :class:`IcebergSinkConfig`, :class:`IcebergSink`, :class:`IcebergCommittable`,
:class:`IcebergDataFile`, and :func:`staging_jar` (the JVM half of ``write_path="spark"``, where
Iceberg's own Spark writer writes the data files and the sink commits them).

The names load on first use (PEP 562), so that reading the connector's declaration imports
none of its client libraries; a missing one is a ``MissingExtraError`` naming its extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twophase.connectors.iceberg.declaration import DECLARATION

__all__ = ["IcebergCommittable", "IcebergDataFile", "IcebergSink", "IcebergSinkConfig", "staging_jar"]

if TYPE_CHECKING:
    from twophase.connectors.iceberg.config import IcebergSinkConfig
    from twophase.connectors.iceberg.internal.committable import IcebergCommittable, IcebergDataFile
    from twophase.connectors.iceberg.jvm_jar import staging_jar
    from twophase.connectors.iceberg.sink import IcebergSink


__getattr__, __dir__ = DECLARATION.lazy_exports(globals(), __all__)
