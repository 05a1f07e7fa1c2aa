"""twophase's sink API: two-phase-commit sinks, their context, outcomes, codecs and errors.

This package imports nothing else from the project (DESIGN.md §3).
"""

from twophase.sinks.api import CheckpointCommitSink, InProgressSink, TwoPhaseCommitSink
from twophase.sinks.codec import CommittableCodec
from twophase.sinks.context import JsonObject, LingeringScope, WriterContext
from twophase.sinks.errors import (
    CheckpointNotPublishedError,
    CheckpointPublishUnknownError,
    CheckpointStorageError,
    CommitFailedError,
    CommittableDecodeError,
    CommittableFileError,
    CommitWaitTimeoutError,
    ConcurrentAttemptError,
    ConfigError,
    CorruptCheckpointError,
    DriverFencedError,
    IllegalTransitionError,
    JobError,
    MissingExtraError,
    RecordError,
    SchemaError,
    ServiceUnavailableError,
    TransactionLostError,
    TwoPhaseError,
    UnsupportedSparkError,
)
from twophase.sinks.outcome import CommitOutcome, CommittableSize

__all__ = [
    "CheckpointCommitSink",
    "CheckpointNotPublishedError",
    "CheckpointPublishUnknownError",
    "CheckpointStorageError",
    "CommitFailedError",
    "CommitOutcome",
    "CommitWaitTimeoutError",
    "CommittableCodec",
    "CommittableDecodeError",
    "CommittableFileError",
    "CommittableSize",
    "ConcurrentAttemptError",
    "ConfigError",
    "CorruptCheckpointError",
    "DriverFencedError",
    "IllegalTransitionError",
    "InProgressSink",
    "JobError",
    "JsonObject",
    "LingeringScope",
    "MissingExtraError",
    "RecordError",
    "SchemaError",
    "ServiceUnavailableError",
    "TransactionLostError",
    "TwoPhaseCommitSink",
    "TwoPhaseError",
    "UnsupportedSparkError",
    "WriterContext",
]
