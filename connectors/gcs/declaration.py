"""The Google Cloud Storage file sink's declaration: the one place outside this folder's code that
the runtime, the data source and the CLI learn of it from (:mod:`twophase.sinks.registry`).

It imports nothing of the connector: its classes load on first use, and a missing client library
(google-cloud-storage, google-resumable-media) is a ``MissingExtraError`` naming
``pip install 'twophase[gcs]'``.
"""

from __future__ import annotations

from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="gcs",
    title="Google Cloud Storage",
    package=__package__ or "twophase.connectors.gcs",
    config="twophase.connectors.gcs.config:GcsFileSinkConfig",
    sink="twophase.connectors.gcs.sink:GcsFileSink",
    extra="gcs",
    # what `pip install 'twophase[gcs]'` brings (setup.py reads this tuple from the source):
    # Application Default Credentials; resumable upload sessions through
    # google-resumable-media's ResumableUpload (initiate with stream_final=False, 2.x) and their
    # digests through google-crc32c (issue #46)
    requirements=(
        "google-cloud-storage>=2.14,<4",
        "google-resumable-media>=2.7.2,<3",
        "google-crc32c>=1.5,<2",
    ),
    libraries={"google": "google-cloud-storage"},
    exports={
        "GcsFileSink": "sink",
        "GcsFileSinkConfig": "config",
        "RollingPolicy": "config",
        "FileFormat": "config",
        "GcsCommittable": "internal.committable",
        "PendingUpload": "internal.committable",
    },
    top_level=("GcsFileSink", "GcsFileSinkConfig"),
    listing="twophase.connectors.gcs.listing:list_lingering",
)
"""The Google Cloud Storage file sink, as :data:`~twophase.sinks.registry.CONNECTORS` knows it."""
