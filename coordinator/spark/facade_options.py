"""The Python Data Source facade's own options and the naming rules its tasks and driver share.

Options are case-insensitive (Spark lower-cases them): ``job`` (job name; the id is derived as in
the Job API) or ``jobId``; ``twophaseCheckpointDir`` (required); ``checkpointLocation`` (Spark's,
required by Spark); ``s3.<field>`` for checkpoints on ``s3://``: the fields of
:class:`~twophase.sinks.s3_options.S3Options` (``s3.endpoint_url``, ``s3.region``, ``s3.profile``,
``s3.access_key_id``, ...), over the standard AWS chain. ``asyncProgressTrackingEnabled=true`` is
refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from twophase.coordinator.spark.checks import check_job_id, job_id_from_name
from twophase.coordinator.storage import open_storage
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.context import JsonObject
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Spark local property holding the micro-batch id in a streaming write's tasks."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark local property holding the streaming query id (stable across restarts)."""

OPTION_JOB = "job"
OPTION_JOB_ID = "jobid"
OPTION_CHECKPOINT_DIR = "twophasecheckpointdir"
OPTION_ASYNC_PROGRESS = "asyncprogresstrackingenabled"
OPTION_S3_PREFIX = "s3."
"""Options of the checkpoint storage's S3 client: ``s3.`` + an :class:`S3Options` field name."""
OPTION_SPECULATION = "speculation"
"""``speculation=false`` states that ``spark.speculation`` is off (the facade's worker cannot read it)."""


def checkpoint_id_for_batch(batch_id: int) -> int:
    """The checkpoint id of micro-batch ``batch_id`` (``batch_id + 1``: ids start at 1).

    Deterministic, so that tasks (which write before any checkpoint is triggered) and the commit
    worker agree, and monotonic, so that Delta's ``txn`` versions and lingering scopes keep working.

    Raises:
        ConfigError: a negative batch id.
    """
    if batch_id < 0:
        raise ConfigError(f"Spark batch id must be >= 0, got {batch_id}")
    return batch_id + 1


def spark_position(query_id: str, batch_id: int) -> JsonObject:
    """The source position of micro-batch ``batch_id`` of query ``query_id`` (as the Job API writes it)."""
    return {"engine": "spark", "query_id": query_id, "batch_id": batch_id}


@dataclass(frozen=True)
class FacadeSettings:
    """The facade's own options, parsed from the ``writeStream`` options.

    Attributes:
        job_id: the job's stable id (``jobId``, or derived from ``job``).
        checkpoint_dir: where the job's checkpoints live (``twophaseCheckpointDir``).
        s3: how to reach S3 for checkpoints on ``s3://`` (``s3.*`` options; secrets masked).
    """

    job_id: str
    checkpoint_dir: str
    s3: S3Options = field(default_factory=S3Options)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FacadeSettings:
        """Parse and check the options (keys in any case).

        Raises:
            ConfigError: ``twophaseCheckpointDir`` or the job is missing, a bad job id, or
                ``asyncProgressTrackingEnabled`` is on (Spark would mark batches done before their
                checkpoint is durable).
        """
        opts = lower_keys(options)
        if opts.get(OPTION_ASYNC_PROGRESS, "").strip().lower() == "true":
            raise ConfigError(
                "asyncProgressTrackingEnabled must be off: Spark would mark batches done before "
                "their checkpoint is durable, breaking exactly-once"
            )
        checkpoint_dir = opts.get(OPTION_CHECKPOINT_DIR, "").strip()
        if not checkpoint_dir:
            raise ConfigError('option "twophaseCheckpointDir" (the job\'s checkpoint directory) is required')
        if opts.get(OPTION_JOB_ID):
            job_id = check_job_id(opts[OPTION_JOB_ID])
        elif opts.get(OPTION_JOB):
            job_id = job_id_from_name(opts[OPTION_JOB])
        else:
            raise ConfigError('option "job" (the job name) or "jobId" is required')
        return cls(
            job_id=job_id, checkpoint_dir=checkpoint_dir, s3=S3Options.from_strings(opts, OPTION_S3_PREFIX)
        )

    def open_storage(self) -> CheckpointStorage:
        """The job's checkpoint storage (writes nothing)."""
        return open_storage(self.checkpoint_dir, self.job_id, s3_options=self.s3)


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """A plain dict of ``options`` with lower-cased keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}
