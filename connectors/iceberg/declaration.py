"""The Iceberg connector's declaration: the one place outside this folder's code that the
runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(fast appends through pyiceberg's catalogs) is a ``MissingExtraError`` naming ``pip install
'twophase[iceberg]'``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="iceberg",
    title="Iceberg",
    package="twophase.connectors.iceberg",
    config="twophase.connectors.iceberg.config:IcebergSinkConfig",
    sink="twophase.connectors.iceberg.sink:IcebergSink",
    extra="iceberg",
    # what `pip install 'twophase[iceberg]'` brings (setup.py reads this tuple from the source):
    # pyiceberg's SQL catalog (SQLite built in; PostgreSQL through psycopg 3, the `postgres`
    # extra) and its pyarrow file IO; fast appends through
    # Transaction.update_snapshot(snapshot_properties=...).fast_append() and the 0.12 write path
    # (ParquetFormatWriter and format models; older releases untested); pyiceberg-core computes the
    # time and bucket partition transforms (0.12 has no pure-Python pyarrow version of them)
    requirements=("pyiceberg[sql-sqlite,pyarrow,pyiceberg-core]>=0.12,<0.13",),
    libraries={"pyiceberg": "pyiceberg", "pyiceberg_core": "pyiceberg-core", "sqlalchemy": "SQLAlchemy"},
    exports={
        "IcebergSink": "sink",
        "IcebergSinkConfig": "config",
        "IcebergCommittable": "internal.committable",
        "IcebergDataFile": "internal.committable",
        "staging_jar": "jvm_jar",
    },
    top_level=("IcebergSink", "IcebergSinkConfig"),
    listing="twophase.connectors.iceberg.listing:list_lingering",
)
"""The Iceberg connector, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
