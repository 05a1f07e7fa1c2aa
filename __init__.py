"""twophase: exactly-once two-phase-commit sinks (Kafka, S3, Delta, PostgreSQL, Iceberg) for PySpark.

One line gives a pipeline everything it needs::

    from twophase import Job, KafkaSink, KafkaSinkConfig, S3Sink, S3SinkConfig, DeltaSink, DeltaSinkConfig

The repository's top-level folders install under this one root (setuptools ``package_dir``):
``twophase.sinks`` (the sink API), ``twophase.coordinator`` (the runtime), ``twophase.connectors``
(Kafka, S3, Delta) and ``twophase.integration`` (services, the CLI, the flights job).

The names below are imported on first use (PEP 562), so that ``import twophase.sinks.api`` in a
Spark task does not load boto3, deltalake and librdkafka for sinks the job does not use. The
connectors' names (``KafkaSink``, ...) are the ones their declarations re-export
(:mod:`twophase.sinks.registry`); a connector whose extra is not installed raises
``MissingExtraError`` naming it (``pip install 'twophase[kafka]'``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Job": "twophase.coordinator.spark.job",
    "JobHandle": "twophase.coordinator.spark.handle",
    "JobResult": "twophase.coordinator.spark.results",
    "JobState": "twophase.coordinator.state.job_lifecycle",
    "RuntimeConfig": "twophase.coordinator.run.runtime_config",
    "CleanupMode": "twophase.coordinator.run.runtime_config",
    "CheckpointConfig": "twophase.coordinator.checkpoint.checkpoint_state",
    "CommitPolicy": "twophase.coordinator.commit.commit_policy",
    "RestartStrategy": "twophase.coordinator.run.restart",
    "RestartKind": "twophase.coordinator.run.restart",
    "S3Options": "twophase.sinks.s3_options",
    "AzureStorageOptions": "twophase.coordinator.storage.azure_blob",
    "GcsStorageOptions": "twophase.coordinator.storage.gcs",
}


if TYPE_CHECKING:
    # for type checkers only (at run time the declarations provide these names): a connector that
    # is not listed here is still exported, typed as Any; ``as`` marks the re-exports
    from twophase.connectors.delta import DeltaSink as DeltaSink
    from twophase.connectors.delta import DeltaSinkConfig as DeltaSinkConfig
    from twophase.connectors.iceberg import IcebergSink as IcebergSink
    from twophase.connectors.iceberg import IcebergSinkConfig as IcebergSinkConfig
    from twophase.connectors.kafka import KafkaSink as KafkaSink
    from twophase.connectors.kafka import KafkaSinkConfig as KafkaSinkConfig
    from twophase.connectors.postgres import (
        PostgresSink as PostgresSink,
    )
    from twophase.connectors.postgres import (
        PostgresSinkConfig as PostgresSinkConfig,
    )
    from twophase.connectors.s3 import (
        FileFormat as FileFormat,
    )
    from twophase.connectors.s3 import (
        RollingPolicy as RollingPolicy,
    )
    from twophase.connectors.s3 import (
        S3Sink as S3Sink,
    )
    from twophase.connectors.s3 import (
        S3SinkConfig as S3SinkConfig,
    )
    from twophase.coordinator.checkpoint.checkpoint_state import CheckpointConfig as CheckpointConfig
    from twophase.coordinator.commit.commit_policy import CommitPolicy as CommitPolicy
    from twophase.coordinator.run.restart import RestartKind as RestartKind
    from twophase.coordinator.run.restart import RestartStrategy as RestartStrategy
    from twophase.coordinator.run.runtime_config import CleanupMode as CleanupMode
    from twophase.coordinator.run.runtime_config import RuntimeConfig as RuntimeConfig
    from twophase.coordinator.spark.handle import JobHandle as JobHandle
    from twophase.coordinator.spark.job import Job as Job
    from twophase.coordinator.spark.results import JobResult as JobResult
    from twophase.coordinator.state.job_lifecycle import JobState as JobState
    from twophase.coordinator.storage.azure_blob import AzureStorageOptions as AzureStorageOptions
    from twophase.coordinator.storage.gcs import GcsStorageOptions as GcsStorageOptions
    from twophase.sinks.s3_options import S3Options as S3Options


def _connector_names() -> list[str]:
    from twophase.sinks.registry import CONNECTORS

    return [n for d in CONNECTORS.all().values() for n in d.top_level]


def __getattr__(name: str) -> Any:
    if name == "__all__":  # computed on first use: it needs the connectors' declarations
        names = sorted([*_EXPORTS, *_connector_names()])
        globals()["__all__"] = names
        return names
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    else:
        from twophase.sinks.registry import CONNECTORS

        declaration = CONNECTORS.exporting(name)
        if declaration is None:
            raise AttributeError(f"module 'twophase' has no attribute {name!r}")
        value = declaration.export(name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_connector_names()])
