"""twophase's sink API: two-phase-commit sinks, their context, outcomes, codecs and errors.

This package imports nothing else from the project (DESIGN.md §3).
"""

from sinks.api import CheckpointCommitSink, InProgressSink, TwoPhaseCommitSink
from sinks.codec import CommittableCodec
from sinks.context import JsonObject, LingeringScope, WriterContext
from sinks.errors import (
    CheckpointStorageError,
    CommitFailedError,
    CommittableDecodeError,
    ConfigError,
    CorruptCheckpointError,
    IllegalTransitionError,
    JobError,
    RecordError,
    SchemaError,
    ServiceUnavailableError,
    TransactionLostError,
    TwoPhaseError,
)
from sinks.outcome import CommitOutcome

__all__ = [
    "CheckpointCommitSink",
    "CheckpointStorageError",
    "CommitFailedError",
    "CommitOutcome",
    "CommittableCodec",
    "CommittableDecodeError",
    "ConfigError",
    "CorruptCheckpointError",
    "IllegalTransitionError",
    "InProgressSink",
    "JobError",
    "JsonObject",
    "LingeringScope",
    "RecordError",
    "SchemaError",
    "ServiceUnavailableError",
    "TransactionLostError",
    "TwoPhaseCommitSink",
    "TwoPhaseError",
    "WriterContext",
]
