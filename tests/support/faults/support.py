"""The fault suite's harness: run the flights job in-process, inject a service fault at a chosen
moment, let the job finish through its restart strategy, and record what it took.

Moments (:class:`Moment`):

- ``write``: the job's first records reached the Kafka topic (a watcher polls the partitions'
  high watermarks, which count uncommitted transactional records): the tasks of the first epoch are
  writing every sink;
- a driver fault point of :mod:`twophase.coordinator.state.faults`: ``after_persist`` (between persist and
  commit), ``mid_commit`` (after the first of several commits), ``during_final_checkpoint``, ...
  The injector is the runtime's fault hook (``JobRuntime(fault=...)``), so the fault happens
  synchronously at that point, on the driver, before the job goes on.

The job is the flights job (:mod:`twophase.integration.jobs.flights`: Kafka, S3 Parquet and Delta on
``s3://``) built with its own restart strategy, so a failed epoch restores and retries in the same
process. Time to recover is from the injection to the next checkpoint whose commits completed
(the next ``after_commit`` point).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from twophase.connectors.kafka import KafkaSink
from twophase.coordinator.commit.commit_policy import CommitPolicy
from twophase.coordinator.run.restart import RestartStrategy
from twophase.coordinator.run.runtime_config import RuntimeConfig
from twophase.coordinator.spark.job import Job
from twophase.coordinator.state.job_lifecycle import JobState
from twophase.coordinator.storage.base import CheckpointStorage
from twophase.integration.jobs.flights import (
    KAFKA_SINK,
    FlightsEndpoints,
    FlightsJobSpec,
    build_sinks,
    flights_stream,
)
from twophase.integration.jobs.flights_sinks import verify_run
from twophase.integration.verify import VerifyReport
from twophase.sinks.api import TwoPhaseCommitSink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOB_CASE_MARKS = [
    pytest.mark.faults,
    pytest.mark.spark,
    pytest.mark.kafka,
    pytest.mark.s3,
    pytest.mark.delta,
    pytest.mark.slow,
]
"""The marks of every fault case that runs a job (its services and speed)."""

BUCKET = "twophase-faults"

log = logging.getLogger(__name__)
AnySink = TwoPhaseCommitSink[Any, Any]

WRITE = "write"
"""The moment the first epoch's tasks are writing (its first records reached Kafka)."""
DAYS = 14
FILES_PER_TRIGGER = 7
"""Two micro-batches of seven daily files, then the final checkpoint."""
EXPECTED_RECORDS = 12208
"""Flights in the first 14 days of 2013."""
JOB_TIMEOUT_S = 900.0
"""The longest one faulted job may run; past it the job is canceled and the case fails."""
REPORT_ENV = "TWOPHASE_FAULTS_REPORT"
"""Where results are appended as JSON lines (default ``build/faults-report.jsonl``)."""
REPO = Path(__file__).resolve().parents[3]


def fault_runtime_config(transaction_timeout_ms: int) -> RuntimeConfig:
    """Runtime settings of a faulted job: default checkpointing and commit retries, and a restart
    strategy that rides out a service outage of tens of seconds (exponential backoff from 1 s to
    15 s, at most 8 restarts)."""
    return RuntimeConfig(
        commit=CommitPolicy(transaction_timeout_ms=transaction_timeout_ms),
        restart=RestartStrategy.exponential_backoff(
            max_restarts=8, initial_delay_ms=1_000, max_delay_ms=15_000
        ),
    )


@dataclass(frozen=True)
class Moment:
    """When a fault is injected: ``point`` (:data:`WRITE` or a driver fault point) at its ``hit``-th
    occurrence (counted in this process, restarts included)."""

    point: str
    hit: int = 1

    @property
    def label(self) -> str:
        """``point`` or ``point:hit``."""
        return self.point if self.hit == 1 else f"{self.point}:{self.hit}"


MOMENTS = {
    "write": Moment(WRITE),
    "persist_commit": Moment("after_persist"),
    "mid_commit": Moment("mid_commit"),
    "final_checkpoint": Moment("during_final_checkpoint"),
}
"""The moments of issue #16: during the write, between persist and commit, during the commit,
during the final checkpoint."""


class Injector:
    """Fires ``action(self)`` once, at ``moment``; is the runtime's fault hook; records timings.

    ``action`` runs on the thread that reached the moment (the driver, or the write watcher) and
    may schedule follow-ups with :meth:`later` (e.g. restart a killed broker after a while).
    """

    def __init__(self, moment: Moment, action: Callable[[Injector], None]) -> None:
        self.moment = moment
        self._action = action
        self._lock = threading.Lock()
        self._hits: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._stop = threading.Event()
        self.started_at = time.monotonic()
        self.fired_at: float | None = None
        self.recovered_at: float | None = None
        self.notes: list[str] = []

    # -- the hook ---------------------------------------------------------------------------------

    def __call__(self, point: str) -> None:
        with self._lock:
            self._hits[point] = self._hits.get(point, 0) + 1
            due = (
                point == self.moment.point and self._hits[point] == self.moment.hit and self.fired_at is None
            )
            if point == "after_commit" and self.fired_at is not None and self.recovered_at is None:
                self.recovered_at = time.monotonic()
        if due:
            self._fire()

    def _fire(self) -> None:
        with self._lock:
            if self.fired_at is not None:
                return
            self.fired_at = time.monotonic()
        log.warning("fault injected moment=%s at=%.1fs", self.moment.label, self.fired_at - self.started_at)
        self._action(self)

    # -- helpers for actions ----------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Add a line to the case's record (what was done, to which broker, how long it took)."""
        log.warning("fault note: %s", text)
        self.notes.append(text)

    def later(self, delay_s: float, fn: Callable[[], object], what: str) -> None:
        """Run ``fn`` on a background thread after ``delay_s`` seconds; its error fails the case."""

        def run() -> None:
            time.sleep(delay_s)
            try:
                fn()
                self.note(f"{what} (after {delay_s:g} s)")
            except BaseException as e:
                log.exception("fault follow-up failed: %s", what)
                self._errors.append(e)

        self._spawn(run, what)

    def watch_writes(self, bootstrap: str, topic: str) -> None:
        """For the :data:`WRITE` moment: fire once the topic's high watermarks pass zero."""
        if self.moment.point != WRITE:
            return
        self._spawn(partial(self._watch, bootstrap, topic), "write watcher")

    def _watch(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"twophase-faults-{uuid.uuid4().hex}",
                "log_level": 3,
            }
        )
        try:
            while not self._stop.is_set() and self.fired_at is None:
                try:
                    meta = consumer.list_topics(topic, timeout=2).topics.get(topic)
                    if meta is not None and meta.error is None and meta.partitions:
                        high = sum(
                            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2)[1]
                            for p in meta.partitions
                        )
                        if high > 0:
                            self._fire()
                            return
                except KafkaException:
                    pass
                time.sleep(0.05)
        except BaseException as e:
            self._errors.append(e)
        finally:
            consumer.close()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=f"fault-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def finish(self, timeout_s: float = 300.0) -> None:
        """Stop watching and wait for follow-ups; re-raise the first follow-up error.

        Raises:
            TimeoutError: a follow-up did not end within ``timeout_s``.
        """
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.1))
            if thread.is_alive():
                raise TimeoutError(f"fault follow-up {thread.name} still running after {timeout_s:g} s")
        if self._errors:
            raise self._errors[0]


Action = Callable[[Injector], None]
"""What an injector does at its moment (it may schedule follow-ups with :meth:`Injector.later`)."""


@dataclass
class FaultResult:
    """One faulted run of the job.

    Attributes:
        case: the case's name.
        moment: when the fault was injected.
        state: the job's final state (FINISHED, or FAILED where failing is the expectation).
        error: what ``await_termination`` raised, if anything.
        restarts: restarts the restart strategy granted.
        fired: the fault was injected.
        fault_at_s: seconds from the job's start to the injection.
        recover_s: seconds from the injection to the next checkpoint with its commits done.
        wall_s: the job's wall time, seconds.
        notes: what the fault's actions did.
        report: the read-back verification, when it ran.
        epoch_records: checkpoint id → records of each epoch this run completed.
    """

    case: str
    moment: str
    state: JobState
    error: BaseException | None
    restarts: int
    fired: bool
    fault_at_s: float | None
    recover_s: float | None
    wall_s: float
    notes: list[str] = field(default_factory=list)
    report: VerifyReport | None = None
    epoch_records: dict[int, int] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The record written to the report (JSON-serialisable)."""
        sinks = (
            {s.sink: [s.records, s.duplicates, s.missing, s.lingering] for s in self.report.sinks}
            if self.report
            else {}
        )
        return {
            "case": self.case,
            "moment": self.moment,
            "state": self.state.value,
            "error": f"{type(self.error).__name__}: {self.error}"[:300] if self.error else None,
            "restarts": self.restarts,
            "fired": self.fired,
            "fault_at_s": None if self.fault_at_s is None else round(self.fault_at_s, 1),
            "recover_s": None if self.recover_s is None else round(self.recover_s, 1),
            "wall_s": round(self.wall_s, 1),
            "notes": self.notes,
            "sinks[records,dup,missing,lingering]": sinks,
        }


def new_spec(base: Path, case: str, bucket: str) -> FlightsJobSpec:
    """A fresh flights run for ``case``: 14 days in 2 epochs, topic replicated by the brokers'
    default (3), S3 output and the Delta table on ``s3://bucket``."""
    job_id = f"faults_{case}_{uuid.uuid4().hex[:6]}"
    return FlightsJobSpec(
        job_id=job_id,
        work_dir=str(base / job_id),
        days=DAYS,
        files_per_trigger=FILES_PER_TRIGGER,
        kafka_replication=-1,
        bucket=bucket,
        delta_uri=f"s3://{bucket}/delta/{job_id}",
    )


def run_with_fault(
    spark: SparkSession,
    case: str,
    spec: FlightsJobSpec,
    endpoints: FlightsEndpoints,
    injector: Injector,
    *,
    checkpoint_dir: str | None = None,
    storage: CheckpointStorage | None = None,
    restart: RestartStrategy | None = None,
    timeout_s: float = JOB_TIMEOUT_S,
    kafka_overrides: dict[str, Any] | None = None,
    ignore_lost_on_recovery: bool = False,
) -> FaultResult:
    """Run (or resume) the flights job of ``spec`` in this process with ``injector`` as its fault
    hook, until it terminates (FINISHED, or FAILED once the restart strategy gives up).

    Args:
        checkpoint_dir / storage: twophase's checkpoint location and an explicit storage for it
            (default: the spec's local folder).
        restart: the restart strategy (default :func:`fault_runtime_config`'s).
        timeout_s: past this the job is canceled and the result carries a TimeoutError.
        kafka_overrides: ``KafkaSinkConfig`` fields to change (e.g. a short transaction timeout).
        ignore_lost_on_recovery: the user's opt-in to skip transactions LOST on recovery.
    """
    spec.save()
    endpoints.s3.ensure_bucket(spec.bucket)
    kafka, s3, delta = build_sinks(spec, endpoints)
    if kafka_overrides:
        kafka = KafkaSink(kafka.name, dataclasses.replace(kafka.config, **kafka_overrides))
    sinks: list[AnySink] = [kafka, s3, delta]
    config = fault_runtime_config(kafka.config.transaction_timeout_ms)
    if restart is not None:
        config = dataclasses.replace(config, restart=restart)
    if ignore_lost_on_recovery:
        config = dataclasses.replace(
            config, commit=dataclasses.replace(config.commit, ignore_lost_on_recovery=True)
        )
    started = time.monotonic()
    injector.started_at = started
    error: BaseException | None = None
    job = Job(
        spark,
        spec.job_id,
        checkpoint_dir or spec.checkpoint_dir,
        job_id=spec.job_id,
        config=config,
        storage=storage,
        fault=injector,
    )
    for s in sinks:
        job.sink(s)
    handle = job.start(
        flights_stream(spark, spec),
        spark_checkpoint_location=spec.spark_checkpoint,
        trigger={"availableNow": True},
        query_name=f"flights_{spec.job_id}",
    )
    injector.watch_writes(endpoints.kafka_bootstrap, spec.topic)
    try:
        if not handle.await_termination(timeout_s):
            error = TimeoutError(f"job {spec.job_id} did not terminate within {timeout_s:g} s; canceled")
            handle.cancel(60)
    except BaseException as e:
        error = e
    wall = time.monotonic() - started
    try:
        injector.finish()
    except BaseException as e:
        error = error or e
    fired_at, recovered_at = injector.fired_at, injector.recovered_at
    return FaultResult(
        case=case,
        moment=injector.moment.label,
        state=handle.status,
        error=error,
        restarts=len(handle.runtime.restarts.restarts),
        fired=fired_at is not None,
        fault_at_s=None if fired_at is None else fired_at - started,
        recover_s=None if fired_at is None or recovered_at is None else recovered_at - fired_at,
        wall_s=wall,
        notes=list(injector.notes),
        epoch_records={m.checkpoint_id: m.records for m in handle.metrics},
    )


def run_case(
    spark: SparkSession,
    endpoints: FlightsEndpoints,
    case: str,
    injector: Injector,
    spec: FlightsJobSpec,
    **options: Any,
) -> FaultResult:
    """:func:`run_with_fault` (``options`` are its keywords), then read every sink back
    (:func:`twophase.integration.jobs.flights_sinks.verify_run`, Delta with deltalake) and :func:`record`."""
    result = run_with_fault(spark, case, spec, endpoints, injector, **options)
    result.report = verify_run(spec, endpoints, None)
    kafka = result.report.sink(KAFKA_SINK)
    if kafka.error is None and kafka.missing:
        result.notes.append(_kafka_later(spec, endpoints))
    record(result)
    return result


def _kafka_later(
    spec: FlightsJobSpec, endpoints: FlightsEndpoints, tries: int = 6, every_s: float = 5.0
) -> str:
    """Diagnosis only (the verdict is the first read-back): whether records missing from a
    ``read_committed`` read appear later (commit markers written late) or never."""
    from confluent_kafka import Consumer, TopicPartition

    from twophase.integration.verify import read_kafka

    seen = []
    for _ in range(tries):
        time.sleep(every_s)
        seen.append(read_kafka(endpoints.kafka_bootstrap, spec.topic)[0].num_rows)
    consumer = Consumer(
        {"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": f"diag-{uuid.uuid4().hex}"}
    )
    try:
        meta = consumer.list_topics(spec.topic, timeout=10).topics[spec.topic]
        high = [
            consumer.get_watermark_offsets(TopicPartition(spec.topic, p), timeout=10)[1]
            for p in meta.partitions
        ]
    finally:
        consumer.close()
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=endpoints.kafka_bootstrap.split(","))
    try:
        (topic,) = admin.describe_topics([spec.topic])
        layout = [
            (p["partition_index"], p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"]))
            for p in topic["partitions"]
        ]
    finally:
        admin.close()
    return (
        f"Kafka re-read every {every_s:g} s after the verdict: {seen} records; high watermarks {high}; "
        f"partitions (id, leader, replicas, isr) {layout}"
    )


def record(result: FaultResult) -> None:
    """Append ``result`` to the report file (``$TWOPHASE_FAULTS_REPORT`` or
    ``build/faults-report.jsonl``) and log it."""
    path = Path(os.environ.get(REPORT_ENV) or REPO / "build" / "faults-report.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(result.row())
    with path.open("a") as out:
        out.write(line + "\n")
    log.warning("fault case result %s", line)
