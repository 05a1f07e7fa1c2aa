"""The Azure Blob Storage file sink's declaration: the one place outside this folder's code that
the runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(azure-storage-blob, azure-identity) is a ``MissingExtraError`` naming ``pip install 'twophase[azure]'``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="azure",
    title="Azure Blob Storage",
    package=__package__ or "twophase.connectors.azure",
    config="twophase.connectors.azure.config:AzureBlobSinkConfig",
    sink="twophase.connectors.azure.sink:AzureBlobSink",
    extra="azure",
    # what `pip install 'twophase[azure]'` brings (setup.py reads this tuple from the source):
    # the blob SDK and DefaultAzureCredential (issue #46)
    requirements=("azure-storage-blob>=12.19,<13", "azure-identity>=1.15,<2"),
    libraries={"azure": "azure-storage-blob"},
    exports={
        "AzureBlobSink": "sink",
        "AzureBlobSinkConfig": "config",
        "RollingPolicy": "config",
        "FileFormat": "config",
        "AzureCommittable": "internal.committable",
        "StagedFile": "internal.committable",
    },
    top_level=("AzureBlobSink", "AzureBlobSinkConfig"),
    listing="twophase.connectors.azure.listing:list_lingering",
)
"""The Azure Blob Storage file sink, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
