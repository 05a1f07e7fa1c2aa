"""Attach two-phase-commit sinks to a PySpark pipeline: the ``Job`` API (DESIGN.md §6).

Batch::

    result = Job(spark, "orders", checkpoint_dir="/chk").sink(kafka).sink(delta).write(df)

Streaming (``foreachBatch`` + ``mapInArrow``; data stays in Arrow)::

    handle = (Job(spark, "orders", checkpoint_dir="/chk").sink(kafka).sink(delta)
              .start(stream_df, spark_checkpoint_location="/spark-chk", trigger={"availableNow": True}))
    handle.await_termination()      # bounded input: finishes with ONE final checkpoint (FLIP-147)
    handle.stop(savepoint=True, drain=False)   # or: graceful stop between batches; cancel()

Per micro-batch N the handler runs the replay check, triggers checkpoint c, writes every sink in
one pass over the data in Spark tasks (each task pre-commits and returns its committables as
Arrow rows: the acknowledgements), persists c atomically, commits everything pending ≤ c, aborts
what failed and speculative attempts left, and only then returns, so that Spark writes its commit
log for N after our checkpoint is durable.

A graceful stop never interrupts a running batch: it waits for the batch in flight, then makes any
later batch refuse to start (Spark replays it on resume), then stops the query and takes the
savepoint or the final retained checkpoint. A failed batch fails the query; the restart strategy
restores the runtime and restarts the query from Spark's checkpoint and ours.

Classic PySpark only (``foreachBatch`` runs in this driver process; Spark Connect is not supported).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from twophase.coordinator.run.fanout import sink_names_unique
from twophase.coordinator.run.runtime import JobRuntime
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.checks import (
    batch_position,
    check_job_id,
    check_query_id,
    check_speculation,
    check_stream_options,
    input_fingerprint,
    job_id_from_name,
    read_spark_last_committed_batch,
    read_spark_query_id,
)
from twophase.coordinator.spark.compat import arrow_schema, require_map_in_arrow
from twophase.coordinator.spark.handle import JobHandle
from twophase.coordinator.spark.results import EpochMetrics, JobResult
from twophase.coordinator.spark.tasks import run_spark_epoch
from twophase.coordinator.state.faults import fault_point
from twophase.coordinator.state.metadata import CheckpointMetadata
from twophase.coordinator.state.metrics import CheckpointMetrics
from twophase.coordinator.storage import AzureStorageOptions, GcsStorageOptions, open_storage
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.sinks.api import TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError
from twophase.sinks.s3_options import S3Options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

AnySink = TwoPhaseCommitSink[Any, Any]


class Job:
    """A pipeline's exactly-once sinks and their checkpoints.

    Args:
        spark: the (classic) SparkSession.
        name: the job's name; the job id is derived from it unless ``job_id`` is given. The id is
            stable across restarts: it names the job's checkpoints and transactions.
        checkpoint_dir: where checkpoints live: a local path, ``s3://bucket/prefix``,
            ``abfss://container@account.dfs.core.windows.net/prefix`` (or ``wasbs://…``) or
            ``gs://bucket/prefix``.
        job_id: explicit job id (``[A-Za-z0-9][A-Za-z0-9_.]*``).
        config: checkpointing, commit, restart-strategy and cancel settings.
        from_savepoint: a savepoint's location to resume from instead of the latest checkpoint.
        storage_options: how to reach the checkpoints' store:
            :class:`~twophase.sinks.s3_options.S3Options` for ``s3://…`` (unset fields from the
            standard AWS chain), :class:`~twophase.coordinator.storage.azure_blob.AzureStorageOptions`
            for ``abfss://``/``wasbs://`` (else ``AZURE_STORAGE_*`` or ``DefaultAzureCredential``),
            :class:`~twophase.coordinator.storage.gcs.GcsStorageOptions` for ``gs://`` (else
            Application Default Credentials). ``None``: each platform's chain alone.
        storage: checkpoint storage to use instead of opening ``checkpoint_dir`` (tests, custom S3
            clients).
        fault: the driver's fault-point hook (fault-injection suites; default: the
            ``TWOPHASE_FAULT`` environment variable, :mod:`twophase.coordinator.state.faults`).

    Raises:
        ConfigError: a bad name, job id, checkpoint location or ``storage_options``.
    """

    def __init__(
        self,
        spark: SparkSession,
        name: str,
        checkpoint_dir: str,
        *,
        job_id: str | None = None,
        config: RuntimeConfig | None = None,
        from_savepoint: str | None = None,
        storage_options: S3Options | AzureStorageOptions | GcsStorageOptions | None = None,
        storage: CheckpointStorage | None = None,
        fault: Callable[[str], None] = fault_point,
    ) -> None:
        self.spark = spark
        self.name = name
        self.job_id = check_job_id(job_id) if job_id is not None else job_id_from_name(name)
        self.checkpoint_dir = checkpoint_dir
        self.config = config or RuntimeConfig()
        self.from_savepoint = from_savepoint
        if storage_options is not None and not isinstance(
            storage_options, S3Options | AzureStorageOptions | GcsStorageOptions
        ):
            raise ConfigError(
                "Job storage_options must be an S3Options, AzureStorageOptions or GcsStorageOptions"
            )
        self._storage = storage
        self._storage_options = storage_options
        self._fault = fault
        self._sinks: list[AnySink] = []

    def sink(self, sink: AnySink) -> Job:
        """Add a sink; every record reaches every sink, in the same checkpoints.

        Raises:
            ConfigError: the sink's name is used already.
        """
        sink_names_unique([*self._sinks, sink])
        self._sinks.append(sink)
        return self

    @property
    def sinks(self) -> tuple[AnySink, ...]:
        """The job's sinks, in the order they were added."""
        return tuple(self._sinks)

    def _runtime(self) -> JobRuntime:
        if not self._sinks:
            raise ConfigError(f"job {self.job_id} has no sinks; add one with .sink(...)")
        options = self._storage_options
        storage = self._storage or open_storage(
            self.checkpoint_dir,
            self.job_id,
            s3_options=options if isinstance(options, S3Options) else None,
            azure_options=options if isinstance(options, AzureStorageOptions) else None,
            gcs_options=options if isinstance(options, GcsStorageOptions) else None,
        )
        return JobRuntime(self.job_id, self._sinks, storage, self.config, fault=self._fault)

    def _validate(self, df: DataFrame) -> None:
        require_map_in_arrow()
        check_speculation(self.spark.sparkContext.getConf().get("spark.speculation", "false"), self._sinks)
        # Spark's Arrow batches label timestamps with the session time zone
        schema = arrow_schema(df.schema, self.spark.conf.get("spark.sql.session.timeZone") or "UTC")
        for s in self._sinks:
            s.validate(schema)

    def write(self, df: DataFrame) -> JobResult:
        """Batch write: one epoch, then the final checkpoint; every record exactly once.

        Re-running the same job after a crash resumes it: a write whose checkpoint completed is
        not written again, only committed and finished. A job id names one write (its input is
        fingerprinted); use a new name for a new one.

        Raises:
            SchemaError, ConfigError: a sink cannot take the data (before anything is written).
            UnsupportedSparkError: this Python lacks what Spark's ``mapInArrow`` needs (pandas;
                distutils for Spark 3.5 on Python 3.12), before anything is written.
            JobError: the job already wrote other input (before anything is written).
            JobError: the restart strategy is exhausted (the job FAILED); CommitFailedError,
                TransactionLostError: commits failed.
        """
        self._validate(df)
        runtime = self._runtime()
        if self.from_savepoint is not None:
            last: CheckpointMetadata | None = runtime.storage.load_location(self.from_savepoint)
        else:
            last = runtime.storage.latest()
        stored = last.source_position if last is not None else None
        position = batch_position(self.job_id, stored, input_fingerprint(df))
        epochs: list[EpochMetrics] = []

        def body(rt: JobRuntime) -> CheckpointMetrics | None:
            if not rt.replay_check(position):
                epochs.append(run_spark_epoch(rt, df, position, batch_id=None))
            return rt.finish(position)

        try:
            final = runtime.run_with_restarts(body, self.from_savepoint)
        finally:
            runtime.close()
        return JobResult(self.job_id, runtime.state, tuple(epochs), final)

    def start(
        self,
        df: DataFrame,
        *,
        spark_checkpoint_location: str,
        trigger: Mapping[str, Any] | None = None,
        output_mode: str = "append",
        query_name: str | None = None,
        options: Mapping[str, str] | None = None,
    ) -> JobHandle:
        """Start a streaming job on ``df`` (a streaming DataFrame).

        Args:
            df: the streaming DataFrame; every sink receives every row.
            spark_checkpoint_location: Spark's own checkpoint (offsets, commit log). Must stay
                paired with this job's checkpoints: resuming against another one is refused.
            trigger: ``DataStreamWriter.trigger`` keywords, e.g. ``{"availableNow": True}`` (a
                bounded stream: the job finishes with the final checkpoint when input ends) or
                ``{"processingTime": "10 seconds"}``.
            output_mode: ``append`` or ``update``.
            query_name: Spark query name.
            options: further ``writeStream`` options.

        Returns:
            A handle to await, stop or cancel the job.

        Raises:
            ConfigError: asyncProgressTrackingEnabled on, an unsupported output mode, no sinks.
            UnsupportedSparkError: this Python lacks what Spark's ``mapInArrow`` needs.
            SchemaError: a sink cannot take the stream's schema.
            JobError: the job's checkpoint belongs to another Spark checkpoint location.
            CorruptCheckpointError: restoring found a corrupt checkpoint (the restore's commit
                errors are raised as they are).
        """
        if not df.isStreaming:
            raise ConfigError("start() needs a streaming DataFrame; use write() for batch data")
        check_stream_options(output_mode, options or {})
        self._validate(df)
        runtime = self._runtime()
        restored = runtime.restore(self.from_savepoint)
        check_query_id(
            restored.source_position,
            read_spark_query_id(self.spark, spark_checkpoint_location),
            spark_checkpoint_location,
            committed_batch=read_spark_last_committed_batch(self.spark, spark_checkpoint_location),
        )
        handle = JobHandle(
            runtime,
            df,
            spark_checkpoint_location=spark_checkpoint_location,
            trigger=dict(trigger or {"processingTime": "0 seconds"}),
            output_mode=output_mode,
            query_name=query_name,
            options=dict(options or {}),
        )
        handle._launch()
        return handle
