"""The Delta connector's declaration: the one place outside this folder's code that the
runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(commits with txn actions through delta-rs (deltalake); S3 tables listed with boto3) is a
``MissingExtraError`` naming ``pip install 'twophase[delta]'``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="delta",
    title="Delta",
    package="twophase.connectors.delta",
    config="twophase.connectors.delta.config:DeltaSinkConfig",
    sink="twophase.connectors.delta.sink:DeltaSink",
    extra="delta",
    # what `pip install 'twophase[delta]'` brings (setup.py reads this tuple from the source):
    # commits with txn actions from the driver (delta-rs; RemoveAction is new in 1.6.6), and its
    # deletes and listings on S3 (boto3)
    requirements=("deltalake>=1.6.6,<2", "boto3>=1.35.2,<2"),
    libraries={"deltalake": "deltalake", "boto3": "boto3", "botocore": "botocore"},
    exports={
        "DeltaSink": "sink",
        "DeltaSinkConfig": "config",
        "DeltaAddFile": "internal.committable",
        "DeltaCommittable": "internal.committable",
    },
    top_level=("DeltaSink", "DeltaSinkConfig"),
    listing="twophase.connectors.delta.listing:list_lingering",
)
"""The Delta connector, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
