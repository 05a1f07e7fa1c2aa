"""The S3 connector's declaration: the one place outside this folder's code that the
runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(multipart uploads with boto3) is a ``MissingExtraError`` naming ``pip install 'twophase[s3]'``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="s3",
    title="S3",
    package=__package__ or "twophase.connectors.s3",
    config="twophase.connectors.s3.config:S3SinkConfig",
    sink="twophase.connectors.s3.sink:S3Sink",
    extra="s3",
    # what `pip install 'twophase[s3]'` brings (setup.py reads this tuple from the source):
    # multipart uploads, and checkpoints on s3:// (conditional PUT, If-None-Match: botocore
    # 1.35.2); an Iceberg table on s3:// needs it too for `twophase lingering --abort`
    requirements=("boto3>=1.35.2,<2",),
    libraries={"boto3": "boto3", "botocore": "botocore"},
    exports={
        "S3Sink": "sink",
        "S3SinkConfig": "config",
        "RollingPolicy": "config",
        "FileFormat": "config",
        "PendingFile": "internal.committable",
        "S3Committable": "internal.committable",
        "staging_jar": "jvm_jar",
    },
    top_level=("S3Sink", "S3SinkConfig", "RollingPolicy", "FileFormat"),
    listing="twophase.connectors.s3.listing:list_lingering",
)
"""The S3 connector, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
