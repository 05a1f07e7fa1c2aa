"""The chaos suite's configurations (issue #14): the paths around the main job's one.

Each :class:`ChaosConfig` is a way a user may set the flights job up; the runner crashes every one
of them at every fault point and with kill -9. The three sinks run together in all of them.

- ``parquet``: the main job's path (S3 Parquet rolled per checkpoint, synchronous commit, local
  checkpoints, a steady partition count).
- ``jsonl``: S3 JSON lines whose files span checkpoints (resumed uploads and tails).
- ``partitions``: JSON lines with one partition per input file, so the last micro-batch has fewer
  subtasks than the others (the extra partitions' files are finished on the driver).
- ``async``: asynchronous commit (the next epoch runs while the previous checkpoint commits).
- ``s3``: the Delta table and twophase's checkpoints on ``s3://`` (MinIO).
- ``all``: everything above at once.
- ``cluster`` (issue #17, not in the default list): the main path on a Spark standalone cluster of
  two one-core workers, everything on S3, the rows hash-shuffled into 2 partitions before the sinks
  (so a lost executor's map output makes a fetch failure and a stage retry beside running
  attempts); its executor-side faults kill the executor JVM or the whole worker (which comes back).
- ``cluster4`` (issue #17, not in the default list): the same with two one-core executors per
  worker and one partition per input file, executor-side faults only: a failed task's retry starts
  at once on an idle executor and fails to fetch the lost executor's map output while the other
  task of the stage still runs, so that task finishes as a zombie attempt beside the stage retry.
- ``cluster4z`` (issue #26 item 4, not in the default list): ``cluster4`` with Spark speculation
  on (aggressive: :data:`SPECULATION_CONF`; every sink of the flights job is speculation-safe) and
  the workers on two loopback addresses (Spark starts no copy on a host that runs an attempt of the
  task). Every trial holds one attempt of one partition at an executor point for a seeded number
  of seconds (``point:n:pause=S``, :mod:`twophase.coordinator.state.faults`), so that Spark starts a
  speculative copy on the other worker that wins, and the held attempt runs on beside it or is
  killed: a deliberate zombie attempt. Every other trial also kills an executor or worker at
  another point, as ``cluster4`` does. No plain run and no driver kill: each trial makes zombies.
- ``secured`` (issue #27, not in the default list): the ``s3`` path against secured services
  (:mod:`twophase.integration.chaos.secured`): Kafka over SASL_SSL with SCRAM-SHA-512 and ACLs,
  the sink's principal holding only the documented ones, and MinIO over TLS (CA through
  ``AWS_CA_BUNDLE``) with a least-privilege IAM user per run; read back by other principals.
- ``expiry`` (issue #26 item 2, not in the default list): asynchronous commit against a broker of
  its own that forgets a transactional id 5 s after its last transaction ended
  (``transactional.id.expiration.ms``, :data:`EXPIRY_BROKER`); after every crash the driver stays
  down 12 s before it restarts, so the restore re-commits on ids the coordinator forgot. What
  committed before the crash without its checkpoint's committed marker (a crash at
  ``mid_commit``, between a commit landing and the marker) is found by its COMMIT marker in the
  partition's log; a restore that reported it LOST would not start and fail the trial.
- ``publish`` (issue #26 item 1, not in the default list): the ``s3`` path (the job's checkpoints
  on MinIO) where, besides the usual faults and kills, trials hold the driver just before it
  publishes a checkpoint and stop MinIO (SIGSTOP) as it goes on, for 20 s (the PUT waits and
  lands late) or 75 s (longer than the 60 s read timeout: the PUT times out and is retried; if
  MinIO still wrote the abandoned request, the retry meets it and the publish must read it back),
  then let MinIO go on (``point:n+s3-stall:S``). Each trial counts the retried S3 calls and
  read-backs in the driver's log.
- ``five`` (issue #28, not in the default list): the main path with all five sinks (Kafka, S3,
  Delta, PostgreSQL and Iceberg); besides the usual faults and kills, trials that hold the job at a
  fault point and crash PostgreSQL as it goes on (``point:n+pg-restart``): as the driver commits,
  mid-COPY and after PREPARE TRANSACTION on an executor.
- ``unmarked`` (issue #43, not in the default list): ``expiry`` with the checkpoints on ``s3://``
  and the job's S3 keys an IAM user whose policy denies ``s3:PutObject`` on every ``_committed``
  marker of its checkpoints (MinIO refuses each marker write, :mod:`~twophase.integration.chaos.unmarked`):
  every restore re-commits what the latest checkpoint holds, on Kafka ids the broker forgot, and
  each sink decides from its own durable evidence alone.
- ``two-drivers`` (issue #43, not in the default list): the ``s3`` path where every trial starts a
  second driver of the same job while the first runs (:data:`SECOND_DRIVER_AFTER_S`, drawn per
  trial), as a YARN application-master retry or a replaced Kubernetes driver pod does: the newer
  driver fences the older (``DriverFencedError``, exit status 1), besides the usual faults and kills.
- ``yarn`` (issue #45 item 2, not in the default list): the ``s3`` path submitted to a native YARN
  (:mod:`twophase.integration.services.yarn`) in cluster deploy mode with the packed environment
  and ``spark.yarn.maxAppAttempts=2`` (:mod:`twophase.integration.jobs.flights_yarn`): the driver
  runs in the application master's container. A driver fault ends that attempt and a kill trial
  kills the container (SIGKILL to its process group: launch script, JVM, the driver's Python)
  instead of the submitting process: YARN starts a second attempt, which restores from the
  ``s3://`` checkpoint, and spark-submit ends with the application's final status.
- ``azure`` (issue #46 item 5, not in the default list): the main path with ``--store azure``:
  twophase's checkpoints, the Azure file sink's Parquet files (staged blocks committed with
  ``Put Block List``) and the Delta table on ``abfss://`` (Azurite), Kafka as before; the files are
  read back with pyarrow and with Spark through hadoop-azure.
- ``gcs`` (issue #46 item 5, not in the default list): the main path with ``--store gcs``: twophase's
  checkpoints and the GCS file sink's Parquet files (resumable upload sessions finalized by the
  driver) on ``gs://`` (fake-gcs-server), Kafka as before; the Delta table in the trial's work
  directory (delta-rs cannot write ``gs://`` to fake-gcs-server:
  :data:`~twophase.integration.jobs.flights_spec.GCS_DELTA_REFUSED`); the files are read back with
  pyarrow and with Spark through Google's GCS connector.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from twophase.integration.jobs.flights_sinks import BASE_SINKS
from twophase.integration.jobs.flights_spec import FlightsJobSpec
from twophase.sinks.errors import ConfigError

PACKED_TASKS = 2
"""Partitions per micro-batch when the file source packs the batch's files (``local[2]``)."""
PG_RESTART = "pg-restart"
"""The action of a ``point:n+pg-restart`` trial: hold the job at the point, let it go on and crash
PostgreSQL under it (``pg_ctl stop -m immediate``: prepared transactions survive in the WAL, open
sessions and unprepared transactions do not), then start the server again."""
PG_RESTART_POINTS = (
    "after_persist:1",
    "mid_write:1",
    "after_persist:2",
    "after_pre_commit:1",
    "mid_commit:1",
)
"""Where a ``five`` trial crashes PostgreSQL: as a checkpoint's commits start (COMMIT PREPARED
meets the crash), while a task COPYs rows, once a task prepared, and between two sinks' commits."""

SPECULATION_CONF: tuple[tuple[str, str], ...] = (
    ("spark.speculation", "true"),
    ("spark.speculation.interval", "500ms"),
    ("spark.speculation.quantile", "0.5"),  # of a stage's 2 tasks, one done is enough
    ("spark.speculation.multiplier", "2"),
    ("spark.speculation.minTaskRuntime", "5s"),  # not the short map tasks of a loaded machine
    # speculate on run time alone: a held attempt's progress rate says nothing Spark can weigh
    ("spark.speculation.efficiency.enabled", "false"),
)
"""Spark settings of the speculation configurations: a task that runs twice as long as the median
of its stage's finished tasks, and at least 5 s, gets a copy within half a second."""
S3_STALL = "s3-stall"
"""The action of a ``point:n+s3-stall:S`` trial: hold the driver at the point, let it go on and
stop MinIO under it for S seconds (SIGSTOP, then SIGCONT)."""
STORAGE_STALL_POINTS = ("before_persist:1", "before_persist:2", "before_persist:4")
"""Where a ``publish`` trial stalls the checkpoint storage: the first epoch's checkpoint, the
second's (the first's commits may still run), and the final checkpoint of a 3-batch run."""
STORAGE_STALLS_S = (20.0, 75.0)
"""How long a ``publish`` trial stops MinIO: less, and more, than the 60 s S3 read timeout."""
EXPIRY_BROKER: tuple[tuple[str, str], ...] = (
    ("transactional.id.expiration.ms", "5000"),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "1000"),
)
"""Broker settings of the ``expiry`` configuration: a transactional id is forgotten about 5–6 s
after its transaction ended (Kafka's defaults: 7 days, checked hourly)."""
EXPIRY_DOWN_S = 12.0
"""How long the ``expiry`` configuration's driver stays down after a crash: past the expiration."""
SECOND_DRIVER_AFTER_S = (2.0, 12.0, 25.0)
"""When a ``two-drivers`` trial starts its second driver after the first (drawn per trial): before
the first restored, during its first epochs, near its end."""
ZOMBIE_PAUSES_S = (30.0, 90.0)
"""How long a ``cluster4z`` trial holds its attempt (drawn per trial): 30 s may end before the copy
wins (both attempts write at once), 90 s outlasts it (Spark kills the held attempt)."""


@dataclass(frozen=True)
class ChaosConfig:
    """One configuration of the flights job under chaos.

    Attributes:
        name: short name (``--configs``).
        s3_format: ``parquet`` or ``jsonl``.
        async_commit: commit on the committer thread.
        on_s3: the Delta table and the job's checkpoints on ``s3://`` instead of local paths.
        partition_per_file: one Spark partition per input file.
        cluster: run on a standalone cluster (everything on S3, input included).
        shuffle_partitions: 0, or hash-partition the rows into this many partitions before the sinks.
        executors_per_worker: on a cluster, one-core executors per worker.
        driver_faults: the fault matrix has the driver's points too (else executor points only).
        secured: against the secured services of :mod:`twophase.integration.chaos.secured`.
        sinks: the sinks every record goes to (:data:`~twophase.integration.jobs.flights_sinks.SINK_CHOICES`).
        pg_restarts: fault points (``point:n``) at which a trial restarts PostgreSQL.
        spark_conf: further Spark settings of the job (on a cluster), e.g. :data:`SPECULATION_CONF`.
        zombie_pauses_s: non-empty: every trial holds one task attempt at an executor point for
            one of these many seconds (``point:n:pause=S``), so that speculation starts a copy.
        kafka_settings: non-empty: the trials run against a Kafka broker of their own with these
            broker settings laid over the defaults.
        storage_stalls: fault points (``point:n``) at which a trial stops MinIO, for each of
            :data:`STORAGE_STALLS_S`.
        down_s: after a crash, the driver stays down this long (s) before it restarts.
        refuse_markers: the job's S3 keys may not write any ``_committed`` marker (needs ``on_s3``).
        second_driver_s: non-empty: every trial starts a second driver of the job this many
            seconds (one drawn per trial) after the first.
        yarn: submit the job to YARN in cluster deploy mode (everything on S3, input included);
            a kill trial kills the driver's container, and YARN starts the driver again.
        store: where the checkpoints, the files and the Delta table live
            (:data:`~twophase.integration.jobs.flights_spec.STORES`); ``s3`` keeps the other
            fields' meaning, ``azure`` puts all three on Azurite.
        write_path: the one sink's ``write_path`` (``spark``: a JVM writer stages each epoch, the S3
            or the Kafka sink alone; no Python task runs, so faults are the driver's and kill -9).
    """

    name: str
    s3_format: str = "parquet"
    async_commit: bool = False
    on_s3: bool = False
    partition_per_file: bool = False
    cluster: bool = False
    shuffle_partitions: int = 0
    executors_per_worker: int = 1
    driver_faults: bool = True
    secured: bool = False
    sinks: tuple[str, ...] = BASE_SINKS
    pg_restarts: tuple[str, ...] = ()
    spark_conf: tuple[tuple[str, str], ...] = ()
    zombie_pauses_s: tuple[float, ...] = ()
    kafka_settings: tuple[tuple[str, str], ...] = ()
    down_s: float = 0.0
    storage_stalls: tuple[str, ...] = ()
    refuse_markers: bool = False
    second_driver_s: tuple[float, ...] = ()
    yarn: bool = False
    store: str = "s3"
    write_path: str = "python"

    @property
    def speculation(self) -> bool:
        """Spark speculation is on in this configuration's runs."""
        return dict(self.spark_conf).get("spark.speculation", "false") == "true"

    @property
    def executor_kills(self) -> tuple[str, ...]:
        """What an executor-side fault kills (``TWOPHASE_FAULT_KILL``): on a cluster the executor
        JVM or the whole worker, else a Python worker only (``""``); none where no Python task
        runs (Spark-staged writes: their tasks are killed by the kill -9 trials)."""
        if self.write_path == "spark":
            return ()
        return ("executor", "worker") if self.cluster else ("",)

    def spec(self, job_id: str, work_dir: Path, days: int, files_per_trigger: int) -> FlightsJobSpec:
        """The flights run of one trial in this configuration (S3 locations under the job's bucket)."""
        bucket = FlightsJobSpec.bucket  # the job's default bucket holds the s3:// locations too
        if self.store != "s3":
            return FlightsJobSpec.on_store(
                self.store,
                job_id,
                work_dir,
                days=days,
                files_per_trigger=files_per_trigger,
                async_commit=self.async_commit,
                partition_per_file=self.partition_per_file,
            )
        if self.cluster or self.yarn:
            return FlightsJobSpec.on_s3_bucket(
                job_id,
                work_dir,
                days=days,
                files_per_trigger=files_per_trigger,
                s3_format=self.s3_format,
                async_commit=self.async_commit,
                partition_per_file=self.partition_per_file,
                shuffle_partitions=self.shuffle_partitions,
            )
        return FlightsJobSpec(
            job_id=job_id,
            work_dir=str(work_dir),
            days=days,
            files_per_trigger=files_per_trigger,
            s3_format=self.s3_format,
            async_commit=self.async_commit,
            partition_per_file=self.partition_per_file,
            delta_uri=f"s3://{bucket}/delta/{job_id}" if self.on_s3 else "",
            checkpoint_uri=f"s3://{bucket}/checkpoints/{job_id}" if self.on_s3 else "",
            sinks=self.sinks,
            write_path=self.write_path,
        )

    def tasks_per_batch(self, days: int, files_per_trigger: int) -> list[int]:
        """Subtasks (partitions) of each micro-batch of a fresh run."""
        batches = math.ceil(days / files_per_trigger)
        files = [min(files_per_trigger, days - b * files_per_trigger) for b in range(batches)]
        if self.shuffle_partitions:
            return [self.shuffle_partitions] * batches
        if self.partition_per_file:
            return files
        return [min(PACKED_TASKS, f) for f in files]


CONFIGS: dict[str, ChaosConfig] = {
    c.name: c
    for c in (
        ChaosConfig("parquet"),
        ChaosConfig("jsonl", s3_format="jsonl"),
        ChaosConfig("partitions", s3_format="jsonl", partition_per_file=True),
        ChaosConfig("async", async_commit=True),
        ChaosConfig("s3", on_s3=True),
        ChaosConfig("all", s3_format="jsonl", async_commit=True, on_s3=True, partition_per_file=True),
        ChaosConfig("cluster", on_s3=True, cluster=True, shuffle_partitions=2),
        ChaosConfig(
            "cluster4",
            on_s3=True,
            cluster=True,
            shuffle_partitions=2,
            partition_per_file=True,
            executors_per_worker=2,
            driver_faults=False,
        ),
        ChaosConfig(
            "cluster4z",
            on_s3=True,
            cluster=True,
            shuffle_partitions=2,
            partition_per_file=True,
            executors_per_worker=2,
            driver_faults=False,
            spark_conf=SPECULATION_CONF,
            zombie_pauses_s=ZOMBIE_PAUSES_S,
        ),
        ChaosConfig("secured", on_s3=True, secured=True),
        ChaosConfig("expiry", async_commit=True, kafka_settings=EXPIRY_BROKER, down_s=EXPIRY_DOWN_S),
        ChaosConfig("publish", on_s3=True, storage_stalls=STORAGE_STALL_POINTS),
        ChaosConfig(
            "unmarked",
            async_commit=True,
            on_s3=True,
            kafka_settings=EXPIRY_BROKER,
            down_s=EXPIRY_DOWN_S,
            refuse_markers=True,
        ),
        ChaosConfig("two-drivers", on_s3=True, second_driver_s=SECOND_DRIVER_AFTER_S),
        ChaosConfig("yarn", on_s3=True, yarn=True),
        ChaosConfig("azure", store="azure"),
        ChaosConfig("gcs", store="gcs"),
        ChaosConfig(
            "five",
            sinks=(*BASE_SINKS, "postgres", "iceberg"),
            pg_restarts=PG_RESTART_POINTS,
        ),
        ChaosConfig("s3staged", on_s3=True, sinks=("s3",), write_path="spark"),
        ChaosConfig("kafkastaged", on_s3=True, sinks=("kafka",), write_path="spark"),
    )
}
"""Every configuration, by name, in matrix order."""
LOCAL = ",".join(
    name
    for name, c in CONFIGS.items()
    if not c.cluster
    and not c.secured
    and c.sinks == BASE_SINKS
    and not c.kafka_settings
    and not c.storage_stalls
    and not c.second_driver_s
    and not c.yarn
    and c.store == "s3"
)
"""The default ``--configs``: every configuration on ``local[2,4]`` against the plain services with
the three sinks (the cluster ones need a cluster, the secured one its own services, ``expiry`` its
own broker, ``publish`` stops the run's MinIO, ``five`` needs a PostgreSQL, ``unmarked`` its own
broker and IAM users, ``two-drivers`` runs two drivers at once, ``yarn`` needs YARN)."""


def configs_named(names: str) -> list[ChaosConfig]:
    """The configurations of a comma-separated list (``all`` is one of them, not a wildcard).

    Raises:
        ConfigError: an unknown name.
    """
    out = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in CONFIGS:
            raise ConfigError(f"unknown chaos configuration {name!r}; known: {', '.join(CONFIGS)}")
        out.append(CONFIGS[name])
    if not out:
        raise ConfigError("no chaos configuration given")
    return out
