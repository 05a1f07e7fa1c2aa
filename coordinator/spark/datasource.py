"""The Python Data Source facade (Spark ≥ 4.1): one two-phase-commit sink behind ``writeStream.format``.

Usage (single sink; classic PySpark)::

    class KafkaTwoPhase(TwoPhaseDataSource):
        format_name = "twophase-kafka"
        def build_sink(self, options):
            return KafkaSink(...options...)
    # or: KafkaTwoPhase = TwoPhaseDataSource.for_sink("twophase-kafka", build_kafka_sink)

    spark.dataSource.register(KafkaTwoPhase)
    (df.writeStream.format("twophase-kafka")
       .option("job", "orders")                      # job name (or "jobId": an explicit job id)
       .option("twophaseCheckpointDir", "/chk")      # OUR checkpoints (local path or s3://)
       .option("checkpointLocation", "/spark-chk")   # Spark's own (offsets, commit log)
       .trigger(availableNow=True).start())

How Spark 4.2 runs a Python data source stream writer (verified on pyspark 4.2.0, local[2]):

- per micro-batch, a driver-side Python worker (``pyspark.sql.worker.write_into_data_source``)
  instantiates the data source with the ``writeStream`` options (keys lower-cased, including
  ``checkpointLocation``), calls :meth:`TwoPhaseDataSource.streamWriter` and pickles the writer into
  the tasks' ``mapInArrow``-like function;
- each task calls :meth:`TwoPhaseStreamWriter.write` with its partition's Arrow batches. The task's
  local properties carry ``streaming.sql.batchId`` and ``sql.streaming.queryId`` (set by
  ``MicroBatchExecution``), so the writer context's checkpoint id is derived deterministically:
  ``checkpoint id = batch id + 1`` (:func:`checkpoint_id_for_batch`);
- ``commit(messages, batchId)`` (or ``abort``) runs in ANOTHER driver-side Python worker
  (``pyspark.sql.worker.python_streaming_sink_runner``) that unpickles the data source, calls
  ``streamWriter`` again and then ``commit``. That worker is forked from Spark's daemon and may be
  reused, so no state may be kept in it: every commit rebuilds the job's state from checkpoint
  storage. Spark writes its commit log for the batch only after ``commit`` returned; if ``commit``
  fails Spark calls ``abort`` with the same messages and fails the query.

Per micro-batch N (DESIGN.md §6, in the order the facade can run it):

1. **Write** (tasks): replay check first — if our latest checkpoint already covers N (a crash
   after step 3 and before Spark's commit log), the task writes nothing (re-writing could fence
   the durable but uncommitted transactions, e.g. Kafka's). Otherwise ``begin_transaction`` →
   ``write`` each Arrow batch → ``pre_commit`` (:func:`twophase.coordinator.run.fanout.write_subtasks`); the
   task returns a :class:`TwoPhaseCommitMessage` with the encoded committable.
2. **Restore** (commit worker): open storage, ``JobRuntime.restore()`` — re-commit the latest
   checkpoint's committables, abort lingering transactions (the messages' committables are held:
   they belong to the epoch being acknowledged).
3. **Replay check**, **trigger** checkpoint N + 1, **acknowledge** every message, **complete**:
   persist atomically, commit, abort lingering (failed/speculative attempts). Then return: Spark
   writes its commit log for N.

=====================================  =========================================================
the driver dies…                       on restart (Spark replays N with the same offsets)
=====================================  =========================================================
before our checkpoint is persisted     tasks rewrite N; restore aborts the old attempt's leftovers
after persist, before Spark's log      tasks skip N; restore re-commits N's committables; the
                                       replay check returns without a new checkpoint
after Spark's commit log               nothing to do
=====================================  =========================================================

Limitations of the facade (use :class:`twophase.coordinator.spark.job.Job` for these):

- single sink per query;
- **no end-of-input hook**: a Python data source writer never learns that a bounded stream
  (``availableNow``) ended, so no final checkpoint (FLIP-147) is taken. Every batch's data is
  committed with that batch's checkpoint instead, so bounded streams lose nothing — but sinks whose
  transactions span epochs (:class:`~twophase.sinks.api.InProgressSink`) would leave their last in-progress
  data uncommitted, so they are refused with :class:`~twophase.sinks.errors.ConfigError`;
- ``WriterContext.num_partitions`` in tasks is a lower bound (``partition + 1``): Spark's Python
  data source API does not tell tasks the write's parallelism. The checkpoint records the true
  parallelism (the number of commit messages);
- tasks read the job's checkpoint storage (replay check), so it must be reachable from executors
  (for S3: the ``s3.*`` options travel with the writer; otherwise the executors' own AWS chain);
- every commit restores from storage, so the latest checkpoint's committables are re-committed
  once per batch (idempotent; ``ALREADY_COMMITTED``);
- ``asyncProgressTrackingEnabled`` and complete output mode (``overwrite``) are refused; commits
  are synchronous (``CommitPolicy.async_commit=True`` is refused; its default ``None`` commits
  synchronously here, whatever the size).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, ClassVar

from pyspark.sql.types import StructType

from twophase.coordinator.spark.compat import arrow_schema, require_data_source_api

try:
    from pyspark.sql.datasource import DataSource
except ImportError:  # Spark 3.5: say which Spark is needed, by name
    require_data_source_api()
    raise
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.facade_options import (
    OPTION_SPECULATION,
    FacadeSettings,
    checkpoint_id_for_batch,
    lower_keys,
)
from twophase.coordinator.spark.facade_writer import TwoPhaseCommitMessage, TwoPhaseStreamWriter
from twophase.sinks.api import InProgressSink, TwoPhaseCommitSink
from twophase.sinks.errors import ConfigError

AnySink = TwoPhaseCommitSink[Any, Any]

__all__ = [
    "FacadeSettings",
    "TwoPhaseCommitMessage",
    "TwoPhaseDataSource",
    "TwoPhaseStreamWriter",
    "checkpoint_id_for_batch",
]


class TwoPhaseDataSource(DataSource):
    """Base of ``twophase-<connector>`` formats: subclass it (``format_name`` + :meth:`build_sink`)
    or use :meth:`for_sink`. Register the class with ``spark.dataSource.register``.

    Options (case-insensitive): ``job`` (job name; the id is derived as in the Job API) or
    ``jobId``; ``twophaseCheckpointDir`` (required); ``checkpointLocation`` (Spark's, required by
    Spark); ``speculation=false`` (required for sinks that are not speculation-safe: this data
    source cannot read ``spark.speculation``); anything the sink needs.
    ``asyncProgressTrackingEnabled=true`` is refused.

    Attributes:
        format_name: the name given to ``writeStream.format``, e.g. ``"twophase-kafka"``.
    """

    format_name: ClassVar[str] = ""

    @classmethod
    def name(cls) -> str:
        """The format name (:attr:`format_name`).

        Raises:
            ConfigError: the subclass did not set ``format_name``.
        """
        if not cls.format_name:
            raise ConfigError(f"{cls.__name__} must set format_name (e.g. 'twophase-kafka')")
        return cls.format_name

    def build_sink(self, options: Mapping[str, str]) -> AnySink:
        """Build the job's sink from the options (lower-cased keys, string values).

        Called on the driver for every batch's write plan and in every commit worker, so it must
        be cheap and deterministic: the same options must give a sink of the same name.

        Raises:
            ConfigError: a bad or missing option.
        """
        raise ConfigError(f"{type(self).__name__} must implement build_sink(options)")

    def runtime_config(self, options: Mapping[str, str]) -> RuntimeConfig:
        """Runtime settings (retention, commit retries); override to read them from options.

        Restart strategies do not apply: Spark restarts the query. Commits must be synchronous.
        """
        return RuntimeConfig()

    def streamWriter(self, schema: StructType, overwrite: bool) -> TwoPhaseStreamWriter:
        """The stream writer (runs on the driver, before anything is written).

        Raises:
            ConfigError: bad options (see :class:`FacadeSettings`), complete output mode
                (``overwrite``), an :class:`~twophase.sinks.api.InProgressSink` that keeps files open
                across checkpoints (no end-of-input hook),
                asynchronous commit.
            SchemaError: the sink cannot take ``schema``.
        """
        options = lower_keys(self.options)
        settings = FacadeSettings.from_options(options)
        if overwrite:
            raise ConfigError("complete output mode is not supported by two-phase-commit sinks; use append")
        sink = self.build_sink(options)
        if isinstance(sink, InProgressSink) and sink.keeps_in_progress:
            raise ConfigError(
                f"sink {sink.name!r} keeps files open across batches (InProgressSink); the Python "
                "Data Source facade has no end-of-input hook to finish them (FLIP-147 final checkpoint): "
                "use twophase.Job, or roll files on every checkpoint (Parquet, or rolling.on_checkpoint=true)"
            )
        if not sink.speculation_safe and options.get(OPTION_SPECULATION, "").strip().lower() != "false":
            raise ConfigError(
                f"sink {sink.name!r} cannot take two concurrent attempts of one task; this data source "
                "cannot read spark.speculation, so state that it is off for the query with "
                '.option("speculation", "false") (and keep spark.speculation off)'
            )
        config = self.runtime_config(options)
        if config.commit.async_commit:
            raise ConfigError("the Python Data Source facade commits synchronously; async_commit must be off")
        # Spark's commit callback returns once the batch is committed: never queued, whatever its size
        config = replace(config, commit=replace(config.commit, async_commit=False))
        # no session here (a data source worker): validation needs only whether a timestamp has a zone
        sink.validate(arrow_schema(schema, "UTC"))
        return TwoPhaseStreamWriter(sink, settings, config)

    @classmethod
    def for_sink(
        cls, format_name: str, build_sink: Callable[[Mapping[str, str]], AnySink]
    ) -> type[TwoPhaseDataSource]:
        """A data source class named ``format_name`` whose sink comes from ``build_sink(options)``.

        ``build_sink`` is pickled with the class (cloudpickle), so it must be a module-level
        function or a picklable closure.

        Raises:
            ConfigError: ``format_name`` is empty.
        """
        if not format_name:
            raise ConfigError("format_name must not be empty")

        def _build(self: TwoPhaseDataSource, options: Mapping[str, str]) -> AnySink:
            return build_sink(options)

        class_name = "".join(p.capitalize() for p in format_name.replace("_", "-").split("-")) or "Sink"
        return type(class_name, (cls,), {"format_name": format_name, "build_sink": _build})
