"""The PostgreSQL connector's declaration: the one place outside this folder's code that the
runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(prepared transactions through psycopg 3, binary COPY encoded by pgpq) is a ``MissingExtraError``
naming ``pip install 'twophase[postgres]'``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="postgres",
    title="PostgreSQL",
    package="twophase.connectors.postgres",
    config="twophase.connectors.postgres.config:PostgresSinkConfig",
    sink="twophase.connectors.postgres.sink:PostgresSink",
    extra="postgres",
    # what `pip install 'twophase[postgres]'` brings (setup.py reads this tuple from the source):
    # psycopg 3 with its binary build of libpq; pgpq encodes Arrow batches into binary COPY
    # natively (decimal support is new in 0.12)
    requirements=("psycopg[binary]>=3.2,<4", "pgpq>=0.12,<0.13"),
    libraries={"psycopg": "psycopg", "psycopg_binary": "psycopg[binary]", "pgpq": "pgpq"},
    exports={
        "PostgresSink": "sink",
        "PostgresSinkConfig": "config",
        "PostgresCommittable": "internal.committable",
    },
    top_level=("PostgresSink", "PostgresSinkConfig"),
    listing="twophase.connectors.postgres.listing:list_lingering",
)
"""The PostgreSQL connector, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
