"""The flights job on PyFlink with Flink's own exactly-once sinks (issue #29 item 1).

Runs under the Flink venv's Python (``apache-flink``), never the project's: it imports nothing of
twophase. :mod:`benchmarks.bench_flink` starts it once per benchmark run as a server, so that
Flink's JVM (the PyFlink gateway, in which each job's MiniCluster runs) is warmed up once, as the
Spark session of the twophase side is: one JSON request per line on stdin, one reply line
``FLINKBENCH {json}`` on stdout per job.

The job, in Flink SQL (streaming mode, checkpointing on, parallelism 2), is the work of
``twophase.integration.jobs.flights.flights_stream``:

- source: the landed day files (``flights-*.parquet``) with the ``filesystem`` connector, Parquet
  format, bounded (no monitor interval): the job ends with FLIP-147's final checkpoint;
- the three lookups (airline by ``carrier``, origin and destination airport by ``faa``): Spark
  broadcasts the two small tables (16 and 1,458 rows) to every task. Flink SQL has no broadcast
  join in streaming mode and no lookup join over a file table; a streaming regular ``LEFT JOIN``
  would emit retractions (which neither sink takes) and hold every flight in join state, and the
  small tables inlined as ``MAP`` constants are rebuilt per record by the generated code (tried:
  30 rows/s). So each lookup is a vectorized (pandas) Python function: every Python worker reads
  the two small tables once and maps whole Arrow batches (a missing code gives NULL, as the left
  join does). Only the three code columns go to the Python workers (the other columns stay in
  the JVM); twophase's Python workers see every record, to write it;
- ``delay_class`` and ``sched_dep_at`` (the scheduled departure, local time of the origin airport,
  as UTC) as in Spark;
- sinks, each only when asked: ``kafka`` (``KafkaSink`` with ``DeliveryGuarantee.EXACTLY_ONCE``
  through the SQL connector: key ``flight_id`` raw, value JSON of every column, transactional id
  prefix per job) and ``s3`` (the ``filesystem`` sink, Parquet bulk format: files roll on every
  checkpoint and are committed when it completes, through the S3 plugin's recoverable multipart
  writer; Hive partitions ``origin``/``month``).

Request fields: ``job`` (name), ``sinks``, ``flights_dir``, ``airlines``, ``airports`` (Parquet
paths), ``topic``, ``bootstrap``, ``txn_prefix``, ``s3_path`` (``s3://bucket/prefix``),
``checkpoint_interval_ms``, ``checkpoint_dir``, ``parallelism``, ``kafka`` (producer properties),
``parquet`` (format options), ``python`` (``python.*`` options). S3 endpoint and keys come from
the environment (``TWOPHASE_S3_ENDPOINT``, ``..._ACCESS_KEY``, ``..._SECRET_KEY``,
``..._REGION``), never a request.
Reply: ``job``, ``job_id``, ``wall_s`` (planning + execution until FINISHED), ``plan_s``,
``ended_at`` (``time.time()`` when the job finished), or ``error``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from typing import Any

log = logging.getLogger("flights_flink")

REPLY_PREFIX = "FLINKBENCH "

TYPED_COLUMNS = (
    ("flight_id", "STRING"),
    ("year", "INT"),
    ("month", "INT"),
    ("day", "INT"),
    ("dep_time", "INT"),
    ("sched_dep_time", "INT"),
    ("dep_delay", "DOUBLE"),
    ("arr_time", "INT"),
    ("sched_arr_time", "INT"),
    ("arr_delay", "DOUBLE"),
    ("carrier", "STRING"),
    ("airline", "STRING"),
    ("flight", "INT"),
    ("tailnum", "STRING"),
    ("origin", "STRING"),
    ("origin_name", "STRING"),
    ("origin_tzone", "STRING"),
    ("dest", "STRING"),
    ("dest_name", "STRING"),
    ("dest_tzone", "STRING"),
    ("air_time", "DOUBLE"),
    ("distance", "INT"),
    ("delay_class", "STRING"),
    ("sched_dep_at", "TIMESTAMP_LTZ(3)"),
)
"""The enriched record, as ``twophase.integration.jobs.flights.TYPED_COLUMNS`` (same order)."""

INPUT_COLUMNS = (
    ("flight_id", "STRING"),
    ("year", "INT"),
    ("month", "INT"),
    ("day", "INT"),
    ("dep_time", "INT"),
    ("sched_dep_time", "INT"),
    ("dep_delay", "DOUBLE"),
    ("arr_time", "INT"),
    ("sched_arr_time", "INT"),
    ("arr_delay", "DOUBLE"),
    ("carrier", "STRING"),
    ("flight", "INT"),
    ("tailnum", "STRING"),
    ("origin", "STRING"),
    ("dest", "STRING"),
    ("air_time", "DOUBLE"),
    ("distance", "INT"),
    ("hour", "INT"),
    ("minute", "INT"),
)
"""The landed day files' schema (``flights_data.FLIGHT_SCHEMA``)."""


def sql_string(value: str) -> str:
    """A Flink SQL string literal (quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def register_lookups(t_env: Any, airlines_path: str, airports_path: str) -> None:
    """The lookups as vectorized (pandas) Python functions over small in-memory tables.

    Each Python worker reads the two small tables once (the broadcast of Spark's plan) and maps
    whole Arrow batches of codes with ``Series.map``; a missing code gives NULL (the left join).
    """
    import pandas as pd
    from pyflink.table import DataTypes
    from pyflink.table.udf import ScalarFunction, udf

    class Lookup(ScalarFunction):  # type: ignore[misc]
        def __init__(self, path: str, key: str, value: str) -> None:
            self.path, self.key, self.value = path, key, value
            self.table: dict[str, str | None] = {}

        def open(self, function_context: Any) -> None:
            import pyarrow.parquet as pq

            rows = pq.read_table(self.path, columns=[self.key, self.value]).to_pylist()
            self.table = {r[self.key]: r[self.value] for r in rows}

        def eval(self, codes: pd.Series) -> pd.Series:
            return codes.map(self.table)

    for name, path, key, value in (
        ("airline_of", airlines_path, "carrier", "name"),
        ("airport_name_of", airports_path, "faa", "name"),
        ("airport_tzone_of", airports_path, "faa", "tzone"),
    ):
        function = udf(Lookup(path, key, value), result_type=DataTypes.STRING(), func_type="pandas")
        t_env.create_temporary_function(name, function)


def columns_ddl(columns: tuple[tuple[str, str], ...]) -> str:
    """``name TYPE, ...`` with quoted names."""
    return ", ".join(f"`{n}` {t}" for n, t in columns)


def with_options(options: dict[str, str]) -> str:
    """A ``WITH (...)`` clause."""
    return "WITH (" + ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in options.items()) + ")"


def enriched_select() -> str:
    """The SELECT of :data:`TYPED_COLUMNS` from the ``flights`` source (see the module docstring)."""
    local = (
        "CONCAT(CAST(`year` AS STRING), '-', LPAD(CAST(`month` AS STRING), 2, '0'), '-', "
        "LPAD(CAST(`day` AS STRING), 2, '0'), ' ', LPAD(CAST(`hour` AS STRING), 2, '0'), ':', "
        "LPAD(CAST(`minute` AS STRING), 2, '0'), ':00')"
    )
    return f"""
        SELECT flight_id, `year`, `month`, `day`, dep_time, sched_dep_time, dep_delay, arr_time,
            sched_arr_time, arr_delay, carrier, airline, flight, tailnum, origin, origin_name,
            origin_tzone, dest, dest_name, dest_tzone, air_time, distance,
            CASE WHEN dep_time IS NULL OR dep_delay IS NULL THEN 'cancelled'
                 WHEN dep_delay < 15 THEN 'on_time'
                 WHEN dep_delay < 60 THEN 'minor'
                 WHEN dep_delay < 180 THEN 'moderate'
                 ELSE 'severe' END AS delay_class,
            CAST(TO_TIMESTAMP(CONVERT_TZ({local}, origin_tzone, 'UTC')) AS TIMESTAMP_LTZ(3)) AS sched_dep_at
        FROM (
            SELECT f.*,
                airline_of(carrier) AS airline,
                airport_name_of(origin) AS origin_name,
                airport_tzone_of(origin) AS origin_tzone,
                airport_name_of(dest) AS dest_name,
                airport_tzone_of(dest) AS dest_tzone
            FROM flights AS f
        )
    """


def configuration(req: dict[str, Any]) -> Any:
    """The job's Flink configuration: parallelism, checkpointing, state backend, S3 plugin."""
    from pyflink.common import Configuration

    conf = Configuration()
    settings = {
        "parallelism.default": str(req["parallelism"]),
        "pipeline.name": req["job"],
        "execution.runtime-mode": "STREAMING",
        "execution.checkpointing.interval": f"{int(req['checkpoint_interval_ms'])} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.checkpoints-after-tasks-finish": "true",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": "file://" + req["checkpoint_dir"],
        "state.backend.type": "hashmap",
        "table.local-time-zone": "UTC",
        "restart-strategy.type": "none",
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        **{f"python.{k}": str(v) for k, v in req.get("python", {}).items()},
        "s3.endpoint": os.environ["TWOPHASE_S3_ENDPOINT"],
        "s3.path.style.access": "true",
        "s3.access-key": os.environ["TWOPHASE_S3_ACCESS_KEY"],
        "s3.secret-key": os.environ["TWOPHASE_S3_SECRET_KEY"],
        "s3.endpoint.region": os.environ.get("TWOPHASE_S3_REGION", "us-east-1"),
    }
    for key, value in settings.items():
        conf.set_string(key, value)
    return conf


def initialize_file_systems(conf: Any) -> None:
    """Load the plugins of ``FLINK_PLUGINS_DIR`` (the S3 file system) with ``conf``'s settings.

    A Flink cluster's entry points do this; PyFlink's local executor (a MiniCluster in the gateway
    JVM) does not, so ``s3://`` would be unknown.
    """
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    j_conf = conf._j_configuration
    plugins = jvm.org.apache.flink.core.plugin.PluginUtils.createPluginManagerFromRootFolder(j_conf)
    jvm.org.apache.flink.core.fs.FileSystem.initialize(j_conf, plugins)


def run_job(req: dict[str, Any]) -> dict[str, Any]:
    """Plan and run one job to FINISHED; see the module docstring."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    started = time.perf_counter()
    conf = configuration(req)
    initialize_file_systems(conf)
    t_env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    )
    source = {"connector": "filesystem", "path": "file://" + req["flights_dir"], "format": "parquet"}
    t_env.execute_sql(f"CREATE TABLE flights ({columns_ddl(INPUT_COLUMNS)}) {with_options(source)}")
    register_lookups(t_env, req["airlines"], req["airports"])
    t_env.create_temporary_view("enriched", t_env.sql_query(enriched_select()))
    statements = t_env.create_statement_set()
    if "kafka" in req["sinks"]:
        kafka = {
            "connector": "kafka",
            "topic": req["topic"],
            "properties.bootstrap.servers": req["bootstrap"],
            "key.format": "raw",
            "key.fields": "flight_id",
            "value.format": "json",
            "value.fields-include": "ALL",
            "value.json.timestamp-format.standard": "ISO-8601",
            "value.json.encode.ignore-null-fields": "true",
            "sink.delivery-guarantee": "exactly-once",
            "sink.transactional-id-prefix": req["txn_prefix"],
            "sink.parallelism": str(req["parallelism"]),
            **{f"properties.{k}": str(v) for k, v in req["kafka"].items()},
        }
        t_env.execute_sql(f"CREATE TABLE kafka_out ({columns_ddl(TYPED_COLUMNS)}) {with_options(kafka)}")
        statements.add_insert_sql("INSERT INTO kafka_out SELECT * FROM enriched")
    if "s3" in req["sinks"]:
        files = {
            "connector": "filesystem",
            "path": req["s3_path"],
            "format": "parquet",
            "sink.parallelism": str(req["parallelism"]),
            **{f"parquet.{k}": str(v) for k, v in req["parquet"].items()},
        }
        t_env.execute_sql(
            f"CREATE TABLE s3_out ({columns_ddl(TYPED_COLUMNS)}) PARTITIONED BY (origin, `month`) "
            f"{with_options(files)}"
        )
        statements.add_insert_sql("INSERT INTO s3_out SELECT * FROM enriched")
    result = statements.execute()
    planned = time.perf_counter()
    job_id = str(result.get_job_client().get_job_id())
    result.wait()
    ended = time.perf_counter()
    return {
        "job": req["job"],
        "job_id": job_id,
        "wall_s": round(ended - started, 3),
        "plan_s": round(planned - started, 3),
        "ended_at": time.time(),
    }


def serve() -> None:
    """Run one job per request line on stdin until stdin closes; a reply line per job."""
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            reply = run_job(req)
        except Exception as e:  # reported to the benchmark, which fails the round
            reply = {
                "job": req.get("job"),
                "error": f"{type(e).__name__}: {e}",
                "trace": traceback.format_exc(),
            }
        print(REPLY_PREFIX + json.dumps(reply), flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    serve()
