"""Benchmark: the Azure and GCS file sinks' Parquet (through the Job API) against Spark's own
Parquet writer to the same emulator (issue #46).

Same data as :mod:`benchmarks.bench_s3` (``ROWS`` rows of id bigint, k int = id % 100, x double,
s string, made by Spark in ``PARTITIONS`` partitions and recomputed by every writer), one
``local[2]`` Spark session, one Azurite and one fake-gcs-server, measured side by side in one run;
rounds rotate which writer goes first. Writers, per store:

- ``twophase_azure``: ``Job(spark, name, checkpoint_dir).sink(AzureBlobSink(...)).write(df)`` to
  ``abfss://<container>@<account>.dfs.core.windows.net/<prefix>``, the sink's defaults: each task
  streams its Parquet file (snappy, 32 MiB row groups) into 8 MiB staged blocks (Put Block); the
  checkpoint is published (a local checkpoint directory); the driver commits each file with one
  Put Block List; then the final checkpoint. The job is FINISHED when it returns.
- ``spark_abfs``: ``df.write.mode("overwrite").parquet("abfs://…")`` through hadoop-azure's ABFS
  driver with Spark's own commit protocol over Hadoop's ``FileOutputCommitter``, algorithm 1
  (:data:`~benchmarks.common.SPARK_DEFAULT_COMMITTER`): what a Spark job gets untuned.
- ``spark_abfs_manifest``: the same through the manifest committer
  (:data:`~benchmarks.common.MANIFEST_COMMITTER`, hadoop-azure's ``AzureManifestCommitterFactory``
  under Spark's ``PathOutputCommitProtocol``, with a fresh :data:`WRITE_JOB_UUID` per write): the
  committer Hadoop and Spark's cloud-integration guide name for ABFS, the tuned baseline.
- ``twophase_gcs``: the same Job with ``GcsFileSink`` to ``gs://<bucket>/<prefix>``, the sink's
  defaults: each task streams its file into a resumable upload in 8 MiB chunks; the driver
  finalizes each upload after the checkpoint.
- ``spark_gs`` / ``spark_gs_manifest``: ``df.write.parquet("gs://…")`` through Google's Cloud
  Storage connector for Hadoop, with Spark's defaults and with the manifest committer.

The Spark writers' file-system settings are the session's, the same for both committers (a file
system is created once per bucket and cached): :data:`ABFS_WRITE` and :data:`GCS_WRITE`, stated
(one of GCS's is forced by the emulator: renames are copies there, see :data:`GCS_WRITE`). Spark
writes Parquet with its defaults: snappy, 128 MiB row groups (``parquet.block.size``), no
``maxRecordsPerFile``: one file per task, four in all, as the sinks write;
the emulators' endpoints as in :mod:`twophase.integration.jobs.flights_azure` and
:mod:`~twophase.integration.jobs.flights_gcs`. Each Spark run's ``_SUCCESS`` is checked to name the
committer it was meant to use, and no ``_temporary`` object may be left.

Every run is read back exactly by a reader that is not its writer: Spark's files with the store's
SDK (azure-storage-blob, google-cloud-storage: list and download) decoded by pyarrow; twophase's
files with Spark (the same ABFS driver and GCS connector as the Spark writers). Exactly: the ids are
0..ROWS-1, each once, and ``k`` and ``s`` match them (:func:`check_exact`). Then the prefix is
deleted.

Measured per call: wall clock; CPU seconds per process tree (:class:`~benchmarks.common.CpuMeter`:
``driver`` = this process's tree without the emulators — the driver, Spark's JVM with its tasks,
the Python workers —, ``azurite`` and ``gcs`` = each emulator's own process, when it runs here;
``driver_thread`` = the calling thread's CPU); Parquet objects and bytes as stored. Reported:
per round and median, every writer's ratio over each Spark writer of its store (> 1: faster), and
the machine's load at start and end.

Emulators: ``TWOPHASE_AZURE_CONNECTION_STRING`` / ``TWOPHASE_GCS_ENDPOINT``, or the ones
``twophase services up --azure --gcs`` recorded, or native ones started for the run (then their CPU
is measured). ``python -m benchmarks.bench_object_stores`` prints the result.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common
from benchmarks.bench_s3 import PARTITIONS, ROWS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from twophase.integration.services.azurite import AzureBlobEndpoint
    from twophase.integration.services.gcs_server import GcsEndpoint
    from twophase.sinks.api import TwoPhaseCommitSink as Sink

ROUNDS = 3
CONTAINER = "twophase-bench"
"""The Azurite container (created when missing) and the fake-gcs-server bucket of the runs."""

ABFS_WRITE = {
    "fs.azure.write.request.size": str(8 * 1024 * 1024),
    "fs.azure.data.blocks.buffer": "bytebuffer",
    "fs.azure.block.upload.active.blocks": "20",
}
"""ABFS's upload settings, stated (hadoop-azure 3.5's defaults): 8 MiB per appended block, the
size of the sink's staged blocks; blocks buffered in memory, not on disk; up to 20 blocks queued
per stream."""

GCS_WRITE = {
    "fs.gs.outputstream.upload.chunk.size": str(24 * 1024 * 1024),
    "fs.gs.client.upload.type": "CHUNK_UPLOAD",
    "fs.gs.operation.move.enable": "false",
}
"""The GCS connector's upload settings, stated (4.0.4's defaults): a resumable upload per file in
24 MiB chunks (each ~18 MB file of the run goes in one chunk; the sink sends 8 MiB ones). One is
the emulator's, not a tuning: fake-gcs-server has no ``objects.move`` (``moveTo``), which 4.0.4
renames with by default, so a rename is a copy (``rewriteTo``) and a delete, as in connectors
before 3.1."""

WRITE_JOB_UUID = "spark.sql.sources.writeJobUUID"
"""Set to a fresh UUID for each manifest-committer write: Spark 4's ``FileFormatWriter`` no longer
sets it, and without it the manifest committer's ``setupJob`` takes the id of a job context that
has none (``NullPointerException`` in ``ManifestCommitterSupport.buildJobUUID``)."""

WRITERS = ("twophase", "spark", "spark_manifest")
"""Each store's writers, as ``<writer>_<store>`` / ``spark_<scheme>[_manifest]``."""


@dataclass
class Store:
    """One emulated store: its writers' locations, its SDK (the reader of Spark's files) and its
    sink (the twophase writer).

    Attributes:
        name: ``azure`` or ``gcs``.
        scheme: the Hadoop file system Spark writes and reads through (``abfs``, ``gs``).
        spark_root: the container's or bucket's root as Spark names it.
        sink_root: the same as the sink's ``location`` names it.
        sink: makes the sink for a location.
        client: the SDK's container or bucket client.
        pid: the emulator's process when it runs here (its CPU is measured), else None.
    """

    name: str
    scheme: str
    spark_root: str
    sink_root: str
    sink: Callable[[str], Sink[Any, Any]]
    client: Any
    pid: int | None = None

    @property
    def emulator(self) -> str:
        """The emulator's name in the CPU figures (``azurite``, ``gcs``)."""
        return "azurite" if self.name == "azure" else "gcs"

    def objects(self, prefix: str) -> list[tuple[str, int]]:
        """(name, bytes) of every object under ``prefix/``."""
        if self.name == "azure":
            return [(b.name, int(b.size)) for b in self.client.list_blobs(name_starts_with=prefix + "/")]
        return [(b.name, int(b.size)) for b in self.client.list_blobs(prefix=prefix + "/")]

    def download(self, name: str) -> bytes:
        """One object's bytes, through the SDK."""
        if self.name == "azure":
            return bytes(self.client.download_blob(name).readall())
        return bytes(self.client.blob(name).download_as_bytes())

    def delete(self, prefix: str) -> None:
        """Delete every object under ``prefix/`` (deepest first: ABFS's folder markers last)."""
        for name, _ in sorted(self.objects(prefix), key=lambda o: -o[0].count("/")):
            if self.name == "azure":
                self.client.delete_blob(name)
            else:
                self.client.blob(name).delete()


def azure_store(endpoint: AzureBlobEndpoint, pid: int | None) -> Store:
    """The Azurite store: the container :data:`CONTAINER`, the sink with a connection string."""
    from twophase.connectors.azure import AzureBlobSink, AzureBlobSinkConfig
    from twophase.coordinator.storage import AzureStorageOptions

    endpoint.ensure_container(CONTAINER)
    options = AzureStorageOptions(connection_string=endpoint.connection_string())
    authority = f"{CONTAINER}@{endpoint.account_name}.dfs.core.windows.net"

    def sink(location: str) -> Sink[Any, Any]:
        return AzureBlobSink(
            "azure", AzureBlobSinkConfig(location=location, format="parquet", storage_options=options)
        )

    from twophase.integration.jobs.flights_azure import spark_location

    return Store(
        name="azure",
        scheme="abfs",
        spark_root=spark_location(f"abfss://{authority}", endpoint),
        sink_root=f"abfss://{authority}",
        sink=sink,
        client=endpoint.service_client(timeout_s=60.0).get_container_client(CONTAINER),
        pid=pid,
    )


def gcs_store(endpoint: GcsEndpoint, pid: int | None) -> Store:
    """The fake-gcs-server store: the bucket :data:`CONTAINER`, the sink on the emulator."""
    from twophase.connectors.gcs import GcsFileSink, GcsFileSinkConfig
    from twophase.coordinator.storage import GcsStorageOptions
    from twophase.integration.services.gcs_server import PROJECT

    endpoint.ensure_bucket(CONTAINER)
    options = GcsStorageOptions(project=PROJECT, emulator_host=endpoint.url)

    def sink(location: str) -> Sink[Any, Any]:
        return GcsFileSink(
            "gcs", GcsFileSinkConfig(location=location, format="parquet", storage_options=options)
        )

    return Store(
        name="gcs",
        scheme="gs",
        spark_root=f"gs://{CONTAINER}",
        sink_root=f"gs://{CONTAINER}",
        sink=sink,
        client=endpoint.client().bucket(CONTAINER),
        pid=pid,
    )


def writer_name(store: Store, writer: str) -> str:
    """``twophase_<store>``, ``spark_<scheme>`` or ``spark_<scheme>_manifest``."""
    return (
        f"twophase_{store.name}" if writer == "twophase" else writer.replace("spark", f"spark_{store.scheme}")
    )


def check_exact(table: pa.Table, rows: int) -> None:
    """``table`` holds exactly the input: ids 0..rows-1 each once, ``k`` = id % 100, ``s`` = ``row-<id>``.

    Raises:
        AssertionError: naming what differs (rows, missing or repeated ids, a wrong column).
    """
    import numpy as np
    import pyarrow.compute as pc

    if table.num_rows != rows:
        raise AssertionError(f"{table.num_rows} rows read back, {rows} written")
    ids = np.sort(table.column("id").to_numpy())
    if not np.array_equal(ids, np.arange(rows, dtype=ids.dtype)):
        raise AssertionError(f"ids are not 0..{rows - 1} each once ({len(np.unique(ids))} distinct)")
    k_ok = pc.all(pc.equal(table.column("k"), pc.cast(pc.remainder(table.column("id"), 100), "int32")))
    s_ok = pc.all(
        pc.equal(
            table.column("s"), pc.binary_join_element_wise("row-", pc.cast(table.column("id"), "string"), "")
        )
    )
    if not (k_ok.as_py() and s_ok.as_py()):
        raise AssertionError("columns k or s do not match the ids")


def read_with_sdk(store: Store, prefix: str) -> pa.Table:
    """Every Parquet object under ``prefix/``, downloaded with the store's SDK and decoded by
    pyarrow, as one table (``id``, ``k``, ``s``)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n for n, _ in store.objects(prefix) if n.endswith(".parquet")]
    tables = [pq.read_table(io.BytesIO(store.download(n)), columns=["id", "k", "s"]) for n in names]
    return pa.concat_tables(tables) if tables else pa.table({"id": pa.array([], pa.int64())})


def read_with_spark(spark: SparkSession, location: str) -> pa.Table:
    """The Parquet files under ``location`` read by Spark (``id``, ``k``, ``s``), collected as Arrow."""
    df = spark.read.parquet(location).select("id", "k", "s")
    return df.toArrow()


def spark_conf(kind: str) -> dict[str, str]:
    """The session settings of one Spark write: ``spark`` (:data:`~benchmarks.common.SPARK_DEFAULT_COMMITTER`)
    or ``spark_manifest`` (:data:`~benchmarks.common.MANIFEST_COMMITTER` with a fresh
    :data:`WRITE_JOB_UUID`)."""
    if kind == "spark_manifest":
        return {**common.MANIFEST_COMMITTER, WRITE_JOB_UUID: uuid.uuid4().hex}
    return dict(common.SPARK_DEFAULT_COMMITTER)


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring for what is measured."""
    from benchmarks.flink.watcher import children_of
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.jobs.flights_azure import configure_abfs, hadoop_azure_jars
    from twophase.integration.jobs.flights_gcs import configure_gcs, gcs_connector_jars
    from twophase.integration.services.azurite import azure_service
    from twophase.integration.services.gcs_server import gcs_service

    rows_n = common.scaled(ROWS)
    rounds = common.runs(ROUNDS)
    env = common.machine()
    mine = set(children_of(os.getpid()))
    with azure_service() as azure_endpoint:
        azurite = sorted(set(children_of(os.getpid())) - mine)  # started for the run: measured
        with gcs_service() as gcs_endpoint:
            fake_gcs = sorted(set(children_of(os.getpid())) - mine - set(azurite))
            stores = [
                azure_store(azure_endpoint, azurite[0] if azurite else None),
                gcs_store(gcs_endpoint, fake_gcs[0] if fake_gcs else None),
            ]
            spark = common.spark_session(
                "twophase-bench-object-stores",
                magic_committer=True,
                extra_jars=[*hadoop_azure_jars(), *gcs_connector_jars()],
            )
            configure_abfs(spark, azure_endpoint)
            configure_gcs(spark, gcs_endpoint)
            hadoop = spark.sparkContext._jsc.hadoopConfiguration()
            for key, value in {**ABFS_WRITE, **GCS_WRITE}.items():
                hadoop.set(key, value)
            try:
                return {**_measure(spark, stores, rows_n, rounds, Job, JobState), **env, **_load_end()}
            finally:
                spark.stop()


def _load_end() -> dict[str, Any]:
    load1, load5, _ = os.getloadavg()
    return {"load_1m_at_end": round(load1, 2), "load_5m_at_end": round(load5, 2)}


def _measure(
    spark: SparkSession, stores: list[Store], rows_n: int, rounds: int, job_cls: Any, finished: Any
) -> dict[str, Any]:
    """Warm up, then every writer of every store ``rounds`` times side by side (see the module
    docstring); the result's ``writers``, ``ratios``, ``per_round`` and settings."""
    run_id = uuid.uuid4().hex[:8]
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-object-stores-"))
    meter = common.CpuMeter({store.emulator: store.pid for store in stores})
    df = common.generated_rows(spark, rows_n, PARTITIONS)
    cpu: dict[str, list[dict[str, float | None]]] = {}
    sizes: dict[str, list[tuple[int, int]]] = {}
    committers: dict[str, str | None] = {}
    epochs: dict[str, list[Any]] = {}
    store_of: dict[str, Store] = {}

    def prefix(name: str, r: int) -> str:
        return f"{name}-{run_id}-{r}"

    def writer(store: Store, kind: str) -> tuple[str, Callable[[int], object]]:
        name = writer_name(store, kind)
        store_of[name] = store

        def write(r: int) -> object:
            if kind == "twophase":
                sink = store.sink(f"{store.sink_root}/{prefix(name, r)}")
                job = job_cls(spark, f"bench-{name}-{run_id}-{r}", str(scratch / "chk"))
                result = job.sink(sink).write(df)
                assert result.state is finished.FINISHED, result.state
                assert result.epochs[0].records == rows_n
                epochs.setdefault(name, []).append(result.epochs[0])
                return result
            with common.session_conf(spark, spark_conf(kind)):
                df.write.mode("overwrite").parquet(f"{store.spark_root}/{prefix(name, r)}")
            return None

        def measured(r: int) -> object:
            result, spent = meter.measured(lambda: write(r))
            cpu.setdefault(name, []).append(spent)
            return result

        return name, measured

    def check(name: str, r: int, _: object) -> None:
        store, place = store_of[name], prefix(name, r)
        objects = store.objects(place)
        parquet = [size for n, size in objects if n.endswith(".parquet")]
        sizes.setdefault(name, []).append((sum(parquet), len(parquet)))
        left = [n for n, _ in objects if "/_temporary" in n or "__magic" in n]
        assert not left, f"{name}: {len(left)} staging objects left, e.g. {left[0]}"
        if name.startswith("twophase"):
            table = read_with_spark(spark, f"{store.spark_root}/{place}")
        else:
            success = next((n for n, _ in objects if n.endswith("/_SUCCESS")), None)
            assert success is not None, f"{name}: no _SUCCESS"
            committer = common.success_committer(store.download(success))
            assert (committer is not None) is name.endswith("_manifest"), (name, committer)
            committers[name] = committer
            table = read_with_sdk(store, place)
        check_exact(table, rows_n)
        store.delete(place)

    try:
        # warm up every path untimed (JVM, file systems, Python workers, SDK clients)
        small = common.generated_rows(spark, 1000, 2)
        for store in stores:
            for kind in WRITERS:
                place = prefix(f"warmup-{store.name}-{kind}", 0)
                if kind == "twophase":
                    job_cls(spark, f"bench-warmup-{store.name}-{run_id}", str(scratch / "chk")).sink(
                        store.sink(f"{store.sink_root}/{place}")
                    ).write(small)
                else:
                    with common.session_conf(spark, spark_conf(kind)):
                        small.write.mode("overwrite").parquet(f"{store.spark_root}/{place}")
                store.delete(place)
        writers = dict(writer(store, kind) for store in stores for kind in WRITERS)
        times = common.side_by_side(writers, rounds, check)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def figures(name: str) -> dict[str, Any]:
        bytes_n = {b for b, _ in sizes[name]}
        return {
            **common.summary(times[name], rows_n),
            "rounds_s": [round(t, 2) for t in times[name]],
            **common.cpu_medians(cpu[name]),
            "cpu_s_driver_rounds": [round(c["driver"] or 0.0, 2) for c in cpu[name]],
            "parquet_objects": sorted({n for _, n in sizes[name]}),
            "parquet_bytes": min(bytes_n) if len(bytes_n) == 1 else sorted(bytes_n),
        }

    ratios = {}
    for store in stores:
        ours = writer_name(store, "twophase")
        for kind in ("spark", "spark_manifest"):
            theirs = writer_name(store, kind)
            ratios[f"{ours} / {theirs}"] = common.ratio(times, ours, theirs)
    return {
        "rows": rows_n,
        "spark_partitions": PARTITIONS,
        "rounds": rounds,
        "writers": {name: figures(name) for name in times},
        "ratios": ratios,
        "committers": committers,
        "spark_settings": {
            "spark": common.SPARK_DEFAULT_COMMITTER,
            "spark_manifest": common.MANIFEST_COMMITTER,
            "abfs": ABFS_WRITE,
            "gs": GCS_WRITE,
        },
        "twophase_epoch_median": {name: common.epoch_summary(e) for name, e in epochs.items()},
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
