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
    libraries={"pyiceberg": "pyiceberg", "pyiceberg_core": "pyiceberg-core", "sqlalchemy": "SQLAlchemy"},
    exports={
        "IcebergSink": "sink",
        "IcebergSinkConfig": "config",
        "IcebergCommittable": "internal.committable",
        "IcebergDataFile": "internal.committable",
    },
    top_level=("IcebergSink", "IcebergSinkConfig"),
    listing="twophase.connectors.iceberg.listing:list_lingering",
)
"""The Iceberg connector, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
