"""twophase: exactly-once two-phase-commit sinks (Kafka, S3, Delta, PostgreSQL, Iceberg) for PySpark.

One line gives a pipeline everything it needs::

    from twophase import Job, KafkaSink, KafkaSinkConfig, S3Sink, S3SinkConfig, DeltaSink, DeltaSinkConfig

The repository's top-level folders install under this one root (setuptools ``package_dir``):
``twophase.sinks`` (the sink API), ``twophase.coordinator`` (the runtime), ``twophase.connectors``
(Kafka, S3, Delta) and ``twophase.integration`` (services, the CLI, the flights job).

The names below are imported on first use (PEP 562), so that ``import twophase.sinks.api`` in a
Spark task does not load boto3, deltalake and librdkafka for sinks the job does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Job": "twophase.coordinator.spark.job",
    "JobHandle": "twophase.coordinator.spark.handle",
    "JobResult": "twophase.coordinator.spark.results",
    "JobState": "twophase.coordinator.job_lifecycle",
    "RuntimeConfig": "twophase.coordinator.runtime_config",
    "CleanupMode": "twophase.coordinator.runtime_config",
    "CheckpointConfig": "twophase.coordinator.checkpoint_state",
    "CommitPolicy": "twophase.coordinator.commit_policy",
    "RestartStrategy": "twophase.coordinator.restart",
    "RestartKind": "twophase.coordinator.restart",
    "KafkaSink": "twophase.connectors.kafka",
    "KafkaSinkConfig": "twophase.connectors.kafka",
    "S3Sink": "twophase.connectors.s3",
    "S3SinkConfig": "twophase.connectors.s3",
    "RollingPolicy": "twophase.connectors.s3",
    "FileFormat": "twophase.connectors.s3",
    "DeltaSink": "twophase.connectors.delta",
    "DeltaSinkConfig": "twophase.connectors.delta",
    "PostgresSink": "twophase.connectors.postgres",
    "PostgresSinkConfig": "twophase.connectors.postgres",
    "IcebergSink": "twophase.connectors.iceberg",
    "IcebergSinkConfig": "twophase.connectors.iceberg",
    "S3Options": "twophase.sinks.s3_options",
    "AzureStorageOptions": "twophase.coordinator.storage.azure_blob",
    "GcsStorageOptions": "twophase.coordinator.storage.gcs",
}

__all__ = [
    "AzureStorageOptions",
    "CheckpointConfig",
    "CleanupMode",
    "CommitPolicy",
    "DeltaSink",
    "DeltaSinkConfig",
    "FileFormat",
    "GcsStorageOptions",
    "IcebergSink",
    "IcebergSinkConfig",
    "Job",
    "JobHandle",
    "JobResult",
    "JobState",
    "KafkaSink",
    "KafkaSinkConfig",
    "PostgresSink",
    "PostgresSinkConfig",
    "RestartKind",
    "RestartStrategy",
    "RollingPolicy",
    "RuntimeConfig",
    "S3Options",
    "S3Sink",
    "S3SinkConfig",
]

if TYPE_CHECKING:
    from twophase.connectors.delta import DeltaSink, DeltaSinkConfig
    from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig
    from twophase.connectors.kafka import KafkaSink, KafkaSinkConfig
    from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
    from twophase.connectors.s3 import FileFormat, RollingPolicy, S3Sink, S3SinkConfig
    from twophase.coordinator.checkpoint_state import CheckpointConfig
    from twophase.coordinator.commit_policy import CommitPolicy
    from twophase.coordinator.job_lifecycle import JobState
    from twophase.coordinator.restart import RestartKind, RestartStrategy
    from twophase.coordinator.runtime_config import CleanupMode, RuntimeConfig
    from twophase.coordinator.spark.handle import JobHandle
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.spark.results import JobResult
    from twophase.coordinator.storage.azure_blob import AzureStorageOptions
    from twophase.coordinator.storage.gcs import GcsStorageOptions
    from twophase.sinks.s3_options import S3Options


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'twophase' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
