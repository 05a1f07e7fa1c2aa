"""Every Arrow type the sink accepts, into every PostgreSQL type it may go into (schema.COMPATIBLE),
through pgpq's binary COPY: read back with plain psycopg, each value what Arrow's own Python value
(``to_pylist``) is, nulls included; nanoseconds truncated to PostgreSQL's microseconds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pytest

from twophase.connectors.postgres import PostgresSink
from twophase.connectors.postgres.internal.schema import COMPATIBLE, arrow_family
from twophase.sinks.context import WriterContext
from twophase.sinks.errors import SchemaError
from twophase.sinks.outcome import CommitOutcome

Conn = psycopg.Connection[tuple[Any, ...]]
MakeSink = Callable[..., PostgresSink]

UTC = dt.timezone.utc
WHEN = dt.datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC)
NAIVE = WHEN.replace(tzinfo=None)
D = Decimal


def _integer_cases() -> list[tuple[pa.Array, str, list[Any]]]:
    """The smallest and largest value of every integer type, into every column type it may go into."""
    cases = []
    for family, pg_types in COMPATIBLE.items():
        if not family.startswith(("int", "uint")):
            continue
        info = np.iinfo(family)
        values = [int(info.min), int(info.max)]
        for pg in sorted(pg_types):
            read = [D(v) for v in values] if pg == "numeric" else values
            cases.append((pa.array([*values, None], getattr(pa, family)()), pg, [*read, None]))
    return cases


def _half(values: list[float]) -> pa.Array:
    return pa.array(np.array([*values, 0], dtype=np.float16), mask=np.array([False] * len(values) + [True]))


# (an Arrow array with a null last, the PostgreSQL column type, the values read back)
CASES: list[tuple[pa.Array, str, list[Any]]] = [
    *_integer_cases(),
    (pa.array([True, False, None]), "bool", [True, False, None]),
    (_half([1.5, -0.25]), "float4", [1.5, -0.25, None]),
    (_half([1.5, -0.25]), "float8", [1.5, -0.25, None]),
    # psycopg reads a real as its shortest decimal text
    (pa.array([0.1, -3.5, None], pa.float32()), "float4", [0.1, -3.5, None]),
    (pa.array([0.1, -3.5, None], pa.float32()), "float8", [float(np.float32(0.1)), -3.5, None]),
    (pa.array([0.1, float("inf"), None]), "float8", [0.1, float("inf"), None]),
    (pa.array(["ä€", "", None]), "text", ["ä€", "", None]),
    (pa.array(["abc", "x", None], pa.large_string()), "varchar(5)", ["abc", "x", None]),
    (pa.array(["ab", "abc", None]), "bpchar(3)", ["ab ", "abc", None]),
    (pa.array(["a", "b", None]).dictionary_encode(), "text", ["a", "b", None]),
    (pa.array([b"\x00\xff", b"", None]), "bytea", [b"\x00\xff", b"", None]),
    (pa.array([b"xyz", b"", None], pa.large_binary()), "bytea", [b"xyz", b"", None]),
    (pa.array([b"ab", b"cd", None], pa.binary(2)), "bytea", [b"ab", b"cd", None]),
    (
        pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None]),
        "date",
        [dt.date(1, 1, 1), dt.date(9999, 12, 31), None],
    ),
    (
        pa.array([dt.date(1999, 12, 31), dt.date(2000, 1, 1), None], pa.date64()),
        "date",
        [dt.date(1999, 12, 31), dt.date(2000, 1, 1), None],
    ),
    (pa.array([WHEN, None], pa.timestamp("us", "UTC")), "timestamptz", [WHEN, None]),
    (
        pa.array([WHEN, None], pa.timestamp("ms", "America/New_York")),
        "timestamptz",
        [WHEN.replace(microsecond=123000), None],
    ),
    (pa.array([WHEN, None], pa.timestamp("s", "UTC")), "timestamptz", [WHEN.replace(microsecond=0), None]),
    (
        pa.array([1_000_000_999, None], pa.timestamp("ns", "UTC")),
        "timestamptz",
        [dt.datetime(1970, 1, 1, 0, 0, 1, 0, UTC), None],
    ),
    (pa.array([NAIVE, None], pa.timestamp("us")), "timestamp", [NAIVE, None]),
    (
        pa.array([dt.time(23, 59, 59, 999999), None], pa.time64("us")),
        "time",
        [dt.time(23, 59, 59, 999999), None],
    ),
    (
        pa.array([1_001, 86_399_999_999_999, None], pa.time64("ns")),
        "time",
        [dt.time(0, 0, 0, 1), dt.time(23, 59, 59, 999999), None],
    ),
    (pa.array([dt.time(1, 2, 3), None], pa.time32("s")), "time", [dt.time(1, 2, 3), None]),
    (
        pa.array([D("-12.34"), D("0.01"), None], pa.decimal128(10, 2)),
        "numeric(10,2)",
        [D("-12.34"), D("0.01"), None],
    ),
    (
        pa.array([D("1.00000001"), D("-0.00000001"), None], pa.decimal128(38, 8)),
        "numeric",
        [D("1.00000001"), D("-0.00000001"), None],
    ),
    (
        pa.array([D("0." + "9" * 38), None], pa.decimal128(38, 38)),
        "numeric",
        [D("0." + "9" * 38), None],
    ),
    (pa.array([D("123E2"), D(0), None], pa.decimal128(5, -2)), "numeric", [D(12300), D(0), None]),
    (pa.array([D("1.5"), D("-2"), None], pa.decimal256(20, 2)), "numeric", [D("1.50"), D("-2.00"), None]),
]


def test_every_compatible_pair_has_a_case() -> None:
    covered = {(arrow_family(array.type), pg.split("(")[0]) for array, pg, _ in CASES}
    assert {(family, pg) for family, pgs in COMPATIBLE.items() for pg in pgs} <= covered


def test_every_accepted_type_round_trips(make_sink: MakeSink, reader: Conn, table: str) -> None:
    rows = 3
    arrays = [array if len(array) == rows else pa.concat_arrays([array[:1], array]) for array, _, _ in CASES]
    expected = [read if len(read) == rows else read[:1] + read for _, _, read in CASES]
    names = [f"c{i}" for i in range(len(CASES))]
    columns = ", ".join(f"{name} {pg}" for name, (_, pg, _) in zip(names, CASES, strict=True))
    reader.execute(f"CREATE TABLE {table} (id integer, {columns})")
    batch = pa.RecordBatch.from_arrays([pa.array(range(rows), pa.int32()), *arrays], ["id", *names])
    sink = make_sink()
    sink.validate(batch.schema)
    txn = sink.begin_transaction(WriterContext("types", sink.name, 1, 0, 0, num_partitions=1))
    sink.write(txn, batch.slice(0, 1))
    sink.write(txn, batch.slice(1))
    committable = sink.pre_commit(txn)
    assert committable is not None and committable.record_count == rows
    assert sink.commit(committable) is CommitOutcome.COMMITTED
    reader.execute("SET TIME ZONE 'UTC'")
    read = reader.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY id").fetchall()
    for i, (array, pg, _) in enumerate(CASES):
        assert [row[i] for row in read] == expected[i], (array.type, pg)


def test_a_decimal_wider_than_38_digits_is_refused_before_anything_is_written(
    make_sink: MakeSink, reader: Conn, table: str
) -> None:
    reader.execute(f"CREATE TABLE {table} (n numeric)")
    with pytest.raises(SchemaError, match=r"n: data decimal256\(40, 0\) is wider than 38 digits"):
        make_sink().validate(pa.schema({"n": pa.decimal256(40, 0)}))
    assert reader.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
