"""Where one run of the flights job lives and how it is configured: :class:`FlightsJobSpec`, stored
as the run's manifest so that restarts, ``twophase verify``, ``checkpoints`` and ``lingering``
find the same run."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from twophase.integration.jobs import flights_data
from twophase.sinks.errors import ConfigError

MANIFEST = "flights-job.json"
"""The run's manifest in its work directory: where everything lives (no endpoints, no secrets)."""
MANIFEST_VERSION = 1
"""Fields added later have defaults, so version-1 manifests of earlier runs still load."""

S3_FORMATS = ("parquet", "jsonl")
"""The S3 sink's file formats the job offers: Parquet (rolls per checkpoint) or JSON lines
(files span checkpoints, resumed across them)."""

BASE_SINKS = ("kafka", "s3", "delta")
"""The sinks whose services every run has (Kafka and S3), in the order they are attached."""
OPTIONAL_SINK_NAMES = ("postgres", "iceberg")
"""The optional sinks, each with a service of its own
(:data:`~twophase.integration.jobs.flights_sinks.OPTIONAL_SINKS`)."""
STORES = ("s3", "azure", "gcs")
"""Where a run keeps its checkpoints, its files and its Delta table (``--store``): MinIO, Azurite
(``abfss://``) or fake-gcs-server (``gs://``). The file sink is named after its store."""
STORE_FILE_SINKS = STORES[1:]
"""The file sinks of the other stores (``azure``: :mod:`twophase.connectors.azure`; ``gcs``:
``twophase.connectors.gcs``), each in place of ``s3`` on its store."""
SINK_CHOICES = (*BASE_SINKS, *OPTIONAL_SINK_NAMES, *STORE_FILE_SINKS)
"""Every name ``--sinks`` accepts, in the order sinks are attached."""
AZURE_ACCOUNT = "twophase"
"""The storage account of ``--store azure`` runs (Azurite's, :mod:`~twophase.integration.services.azurite`):
its name is part of every ``abfss://`` location, its key comes from the environment only."""
GCS_DELTA_REFUSED = (
    "Delta on gs:// is refused: delta-rs writes and lists gs:// tables through GCS's XML API, which "
    "fake-gcs-server does not serve (fsouza/fake-gcs-server#331, #1164): on --store gcs keep the "
    "Delta table in the run's work directory (the default) or give --delta-uri a local path or s3://"
)
"""Why a ``--store gcs`` run's Delta table may not be on ``gs://`` (one line, before anything is
written). The rest of the run (checkpoints, the GCS file sink) is on ``gs://``."""


def check_sinks(sinks: Iterable[str]) -> tuple[str, ...]:
    """``sinks`` as a tuple in :data:`SINK_CHOICES` order, each once.

    Raises:
        ConfigError: an unknown name, or none at all.
    """
    names = [s.strip() for s in sinks if s.strip()]
    unknown = [s for s in names if s not in SINK_CHOICES]
    if unknown:
        raise ConfigError(f"unknown sink(s) {unknown}: choose from {','.join(SINK_CHOICES)}")
    if not names:
        raise ConfigError(f"no sink given: choose from {','.join(SINK_CHOICES)}")
    return tuple(s for s in SINK_CHOICES if s in names)


_SCHEMES = {"s3": "s3://", "azure": "abfss://", "gcs": "gs://"}

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]*")


@dataclass(frozen=True)
class FlightsJobSpec:
    """One run of the flights job: its id and where its input, checkpoints and outputs live.

    Stored as JSON in ``<work_dir>/flights-job.json`` so that a restart, ``twophase verify``,
    ``checkpoints`` and ``lingering`` find the same run. Holds no endpoint and no secret.

    Attributes:
        job_id: the stable job id (``[A-Za-z0-9][A-Za-z0-9_.]*``): names checkpoints, Kafka
            transactional ids (``twophase-<job_id>-kafka-...``), S3 keys and the Delta ``txn`` appId.
        work_dir: holds the manifest, checkpoints, Spark's checkpoint and (by default) the Delta table.
        days: days of 2013 to process (1..365).
        files_per_trigger: input files (days) per micro-batch.
        topic: the Kafka topic (created with ``kafka_partitions`` partitions if missing).
        kafka_partitions: partitions of a topic the job creates.
        kafka_replication: replication factor of a topic the job creates (-1: the brokers' default).
        bucket: the S3 bucket (created if missing).
        s3_prefix: key prefix of the S3 Parquet output.
        delta_uri: the Delta table: a local path, ``s3://bucket/prefix`` or (``--store azure``)
            ``abfss://``; never ``gs://`` (:data:`GCS_DELTA_REFUSED`).
        s3_format: the S3 sink's format, one of :data:`S3_FORMATS`.
        async_commit: commit on the ordered committer thread (the next epoch may run meanwhile).
        checkpoint_uri: twophase's checkpoint storage: ``""`` for ``<work_dir>/checkpoints``, or
            ``s3://bucket/prefix`` (credentials from the job's S3 endpoint, never the manifest).
        partition_per_file: one Spark partition per input file, so a micro-batch has as many
            subtasks as files and the last, shorter batch has fewer (partition counts change).
        spark_checkpoint_uri: Spark's own checkpoint location: ``""`` for
            ``<work_dir>/spark-checkpoint``, or ``s3a://bucket/prefix`` (``s3://`` is read as s3a).
        input_uri: where Spark reads the input: ``""`` for the landed files in the local cache, or
            ``s3://bucket/prefix``: the landed files are copied there once and read with s3a (what
            executors on other machines can reach).
        shuffle_partitions: 0, or hash-partition the enriched rows by ``flight_id`` into this many
            partitions before the sinks: a shuffle in the plan, so that the sinks' tasks read map
            output another executor holds (a lost executor means a fetch failure and a stage retry).
        sinks: the sinks the run writes every record to, among
            :data:`~twophase.integration.jobs.flights_sinks.SINK_CHOICES` (Kafka, S3 and Delta by
            default; ``postgres`` too with ``twophase demo --sinks kafka,s3,delta,postgres``). On
            another store its file sink takes the place of ``s3`` (``kafka,azure,delta``).
        store: where the checkpoints, the files and the Delta table live, one of :data:`STORES`
            (build a run with :meth:`on_store`). ``azure``: ``abfss://`` locations in the
            container ``bucket`` of account :data:`AZURE_ACCOUNT` (Azurite; the key and the Blob
            endpoint come from ``TWOPHASE_AZURE_CONNECTION_STRING`` or ``services up --azure``).
            ``gcs``: ``gs://`` checkpoints and files in the bucket ``bucket`` (fake-gcs-server:
            ``TWOPHASE_GCS_ENDPOINT`` or ``services up --gcs``); the Delta table never on ``gs://``
            (:data:`GCS_DELTA_REFUSED`).
        write_path: the ``write_path`` of the run's one sink (``python``, or ``spark``: a JVM writer
            stages each epoch; a run whose only sink is ``s3`` (Parquet, ``--store s3``: Spark's
            Parquet writer through twophase's committer) or ``kafka`` (twophase's Kafka writer).
    """

    job_id: str
    work_dir: str
    days: int = flights_data.DAYS
    files_per_trigger: int = 31
    topic: str = ""
    kafka_partitions: int = 3
    kafka_replication: int = 1
    bucket: str = "twophase-flights"
    s3_prefix: str = ""
    delta_uri: str = ""
    s3_format: str = "parquet"
    async_commit: bool = False
    checkpoint_uri: str = ""
    partition_per_file: bool = False
    spark_checkpoint_uri: str = ""
    input_uri: str = ""
    shuffle_partitions: int = 0
    sinks: tuple[str, ...] = BASE_SINKS
    store: str = "s3"
    write_path: str = "python"

    def __post_init__(self) -> None:
        if self.store not in STORES:
            raise ConfigError(f"store must be one of {','.join(STORES)}, got {self.store!r}")
        object.__setattr__(self, "sinks", self._store_sinks(check_sinks(self.sinks)))  # a list from JSON
        if self.s3_format not in S3_FORMATS:
            raise ConfigError(f"s3_format must be one of {S3_FORMATS}, got {self.s3_format!r}")
        if self.write_path not in ("python", "spark"):
            raise ConfigError(f"write_path must be python or spark, got {self.write_path!r}")
        if self.write_path == "spark" and not (
            self.sinks == ("kafka",) or (self.sinks == ("s3",) and self.s3_format == "parquet")
        ):
            raise ConfigError(
                "write_path spark stages with a JVM writer in a run whose only sink it is: set sinks to "
                f"kafka, or to s3 with s3_format parquet (got {','.join(self.sinks)}, {self.s3_format})"
            )
        scheme = _SCHEMES[self.store]
        if self.checkpoint_uri and not self.checkpoint_uri.startswith(scheme):
            raise ConfigError(
                f"checkpoint_uri of a --store {self.store} run must be empty or {scheme}..., "
                f"got {self.checkpoint_uri!r}"
            )
        if self.delta_uri.startswith("gs://"):
            raise ConfigError(GCS_DELTA_REFUSED)
        if self.spark_checkpoint_uri and not self.spark_checkpoint_uri.startswith(("s3a://", "s3://")):
            raise ConfigError(
                "spark_checkpoint_uri must be empty or s3a://bucket/prefix, "
                f"got {self.spark_checkpoint_uri!r}"
            )
        if self.input_uri and not self.input_uri.startswith("s3://"):
            raise ConfigError(f"input_uri must be empty or s3://bucket/prefix, got {self.input_uri!r}")
        if not _JOB_ID.fullmatch(self.job_id):
            raise ConfigError(f"flights job id {self.job_id!r} must match [A-Za-z0-9][A-Za-z0-9_.]*")
        if not 1 <= self.days <= flights_data.DAYS:
            raise ConfigError(f"days must be within 1..{flights_data.DAYS}, got {self.days}")
        if self.shuffle_partitions < 0:
            raise ConfigError(f"shuffle_partitions must be >= 0, got {self.shuffle_partitions}")
        if self.files_per_trigger < 1:
            raise ConfigError(f"files_per_trigger must be >= 1, got {self.files_per_trigger}")
        object.__setattr__(self, "work_dir", str(Path(self.work_dir).resolve()))
        if not self.topic:
            object.__setattr__(self, "topic", f"flights.{self.job_id}")
        if not self.s3_prefix:
            object.__setattr__(self, "s3_prefix", f"flights/{self.job_id}")
        if not self.delta_uri:
            object.__setattr__(self, "delta_uri", str(Path(self.work_dir) / "delta"))

    def _store_sinks(self, sinks: tuple[str, ...]) -> tuple[str, ...]:
        """``sinks`` on this run's store: ``s3`` stands for the store's file sink; a file sink
        of another store, or an optional sink off S3, is refused."""
        if self.store != "s3":
            sinks = tuple(self.store if s == "s3" else s for s in sinks)
            off_store = [s for s in sinks if s in OPTIONAL_SINK_NAMES]
            if off_store:
                raise ConfigError(
                    f"sinks {','.join(off_store)} run on --store s3 only: on --store {self.store} "
                    f"choose from kafka,{self.store},delta"
                )
        wrong = [s for s in sinks if s in (*STORE_FILE_SINKS, "s3") and s != self.store]
        if wrong:
            raise ConfigError(
                f"file sink {','.join(wrong)} does not write to --store {self.store}: "
                f"use {self.store} (or --store {wrong[0]})"
            )
        return tuple(s for s in SINK_CHOICES if s in sinks)

    @property
    def file_sink(self) -> str:
        """The name of the run's file sink: its store's (``s3``, ``azure``, ``gcs``)."""
        return self.store

    @property
    def files_location(self) -> str:
        """Where the file sink writes: ``s3://bucket/prefix``,
        ``abfss://bucket@<account>.dfs.core.windows.net/prefix`` or ``gs://bucket/prefix``."""
        return f"{store_root(self.store, self.bucket)}/{self.s3_prefix.strip('/')}"

    @property
    def checkpoint_dir(self) -> str:
        """twophase's checkpoint storage: :attr:`checkpoint_uri`, else ``<work_dir>/checkpoints``."""
        return self.checkpoint_uri or str(Path(self.work_dir) / "checkpoints")

    @property
    def spark_checkpoint(self) -> str:
        """Spark's own checkpoint location (offsets and commit log): :attr:`spark_checkpoint_uri`
        as ``s3a://``, else ``<work_dir>/spark-checkpoint``."""
        if self.spark_checkpoint_uri:
            return s3a(self.spark_checkpoint_uri)
        return str(Path(self.work_dir) / "spark-checkpoint")

    @property
    def on_s3(self) -> bool:
        """Whether nothing of the run but its manifest is local: checkpoints, Spark's checkpoint,
        the Delta table and the input all on S3 (what a job on a cluster needs)."""
        return all(
            u.startswith(("s3://", "s3a://"))
            for u in (self.checkpoint_uri, self.spark_checkpoint_uri, self.delta_uri, self.input_uri)
        )

    @property
    def expected_batches(self) -> int:
        """Micro-batches the input makes: ``ceil(days / files_per_trigger)``."""
        return math.ceil(self.days / self.files_per_trigger)

    def save(self) -> Path:
        """Write the manifest into ``work_dir`` (created if needed); return its path."""
        path = Path(self.work_dir) / MANIFEST
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"format": "twophase.flights-job", "version": MANIFEST_VERSION, **asdict(self)}
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def on_s3_bucket(
        cls, job_id: str, work_dir: str | Path, bucket: str = "twophase-flights", **fields: Any
    ) -> FlightsJobSpec:
        """A run that keeps everything on S3, in ``bucket``: the input under ``input/`` (shared by
        runs), and per job ``checkpoints/<job_id>``, ``spark-checkpoints/<job_id>`` (s3a) and
        ``delta/<job_id>``; ``fields`` are the spec's other fields.

        Raises:
            ConfigError: as the constructor.
        """
        return cls(
            job_id=job_id,
            work_dir=str(work_dir),
            bucket=bucket,
            checkpoint_uri=f"s3://{bucket}/checkpoints/{job_id}",
            spark_checkpoint_uri=f"s3a://{bucket}/spark-checkpoints/{job_id}",
            delta_uri=f"s3://{bucket}/delta/{job_id}",
            input_uri=f"s3://{bucket}/input",
            **fields,
        )

    @classmethod
    def on_store(cls, store: str, job_id: str, work_dir: str | Path, **fields: Any) -> FlightsJobSpec:
        """A run whose checkpoints, files and Delta table live on ``store`` (:data:`STORES`): on
        ``s3`` the local defaults (the files on MinIO); on ``azure`` ``checkpoints/<job_id>`` and
        ``delta/<job_id>`` in the container ``bucket`` of :data:`AZURE_ACCOUNT` beside the files;
        on ``gcs`` ``checkpoints/<job_id>`` in the bucket ``bucket`` beside the files, and the
        Delta table in the work directory (:data:`GCS_DELTA_REFUSED` says why). Spark's checkpoint
        and the input stay local. ``fields`` are the spec's other fields.

        Raises:
            ConfigError: an unknown store, a Delta table on ``gs://`` (:data:`GCS_DELTA_REFUSED`),
                or as the constructor.
        """
        if store in STORE_FILE_SINKS:
            root = store_root(store, fields.get("bucket", cls.bucket))
            on_store = {"delta_uri": f"{root}/delta/{job_id}"} if store == "azure" else {}
            fields = {"checkpoint_uri": f"{root}/checkpoints/{job_id}", **on_store, **fields}
        return cls(job_id=job_id, work_dir=str(work_dir), store=store, **fields)

    @classmethod
    def load(cls, work_dir: str | Path) -> FlightsJobSpec:
        """Read the manifest of ``work_dir``.

        Raises:
            ConfigError: no manifest, or not a flights job manifest of a known version.
        """
        path = Path(work_dir) / MANIFEST
        try:
            body = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path} not found: not a flights job work directory") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not valid JSON: {e}") from None
        if body.get("format") != "twophase.flights-job" or body.get("version") != MANIFEST_VERSION:
            raise ConfigError(f"{path} is not a version-{MANIFEST_VERSION} flights job manifest")
        fields = {k: v for k, v in body.items() if k not in ("format", "version")}
        return cls(**fields)


def azure_root(container: str) -> str:
    """``abfss://<container>@<AZURE_ACCOUNT>.dfs.core.windows.net`` (no trailing ``/``)."""
    return f"abfss://{container}@{AZURE_ACCOUNT}.dfs.core.windows.net"


def store_root(store: str, bucket: str) -> str:
    """The root of ``bucket`` on ``store`` (:data:`STORES`), no trailing ``/``: ``s3://bucket``,
    :func:`azure_root` or ``gs://bucket``."""
    return azure_root(bucket) if store == "azure" else f"{_SCHEMES[store]}{bucket}"


def s3a(uri: str) -> str:
    """``s3://bucket/key`` as Hadoop's ``s3a://bucket/key``; other URIs unchanged."""
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri
