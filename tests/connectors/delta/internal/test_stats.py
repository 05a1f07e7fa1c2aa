"""Add-action stats computed from Arrow data."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa

from twophase.connectors.delta.internal.stats import StatsCollector, file_stats

UTC = dt.timezone.utc


def stats_of(table: pa.Table, prefix: int = 32) -> dict[str, object]:
    return dict(json.loads(file_stats(table, prefix)))


def test_ints_with_nulls() -> None:
    s = stats_of(
        pa.table({"i": pa.array([3, None, -5, 7], pa.int32()), "l": pa.array([1, 2, 3, 4], pa.int64())})
    )
    assert s["numRecords"] == 4
    assert s["minValues"] == {"i": -5, "l": 1}
    assert s["maxValues"] == {"i": 7, "l": 4}
    assert s["nullCount"] == {"i": 1, "l": 0}


def test_all_null_column_has_null_count_only() -> None:
    s = stats_of(pa.table({"x": pa.array([None, None], pa.int64())}))
    assert s == {"numRecords": 2, "minValues": {}, "maxValues": {}, "nullCount": {"x": 2}}


def test_strings_unicode_and_truncation() -> None:
    long = "ü" * 40
    s = stats_of(pa.table({"s": ["zeta", "Älpha", None, "alpha", long]}))
    # byte-wise (UTF-8) order = code point order: "Älpha" (U+00C4) sorts after lowercase ASCII
    assert s["minValues"] == {"s": "alpha"}
    assert s["maxValues"] == {"s": "ü" * 32 + "\U0010ffff"}
    assert s["nullCount"] == {"s": 1}
    s = stats_of(pa.table({"s": ["ab", long]}), prefix=4)
    assert s["minValues"] == {"s": "ab"}
    assert s["maxValues"] == {"s": "üüüü\U0010ffff"}


def test_decimals_exact_up_to_precision_15_and_omitted_beyond() -> None:
    small = pa.array(
        [decimal.Decimal("-1.50"), decimal.Decimal("123456789012.34"), None], pa.decimal128(15, 2)
    )
    big = pa.array(
        [decimal.Decimal("12345678901234567890.12"), decimal.Decimal("1.00"), None], pa.decimal128(22, 2)
    )
    s = stats_of(pa.table({"small": small, "big": big}))
    assert s["minValues"] == {"small": -1.5}
    assert s["maxValues"] == {"small": 123456789012.34}
    assert s["nullCount"] == {"small": 1, "big": 1}
    assert decimal.Decimal(repr(s["maxValues"]["small"])) == decimal.Decimal("123456789012.34")


def test_timestamps_microseconds_widened_to_milliseconds() -> None:
    ts = pa.array(
        [
            dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
            None,
            dt.datetime(2023, 6, 1, 0, 0, 0, 999, tzinfo=UTC),
        ],
        pa.timestamp("us", "UTC"),
    )
    ntz = pa.array(
        [dt.datetime(2024, 1, 1, 12, 0, 0, 1000), dt.datetime(1999, 12, 31, 23, 59, 59, 999999)],
        pa.timestamp("us"),
    )
    s = stats_of(pa.table({"ts": ts, "ntz": pa.concat_arrays([ntz, pa.nulls(1, pa.timestamp("us"))])}))
    assert s["minValues"] == {"ts": "2023-06-01T00:00:00.000Z", "ntz": "1999-12-31T23:59:59.999"}
    # max ceiled: .123456 → .124; an exact millisecond stays
    assert s["maxValues"] == {"ts": "2024-01-01T12:00:00.124Z", "ntz": "2024-01-01T12:00:00.001"}
    assert s["nullCount"] == {"ts": 1, "ntz": 1}


def test_dates_floats_booleans_binary() -> None:
    s = stats_of(
        pa.table(
            {
                "d": pa.array([dt.date(2024, 2, 29), dt.date(2000, 1, 1)], pa.date32()),
                "f": [1.5, -0.25],
                "nan": [1.0, float("nan")],
                "b": [True, None],
                "bin": pa.array([b"\x00", None], pa.binary()),
            }
        )
    )
    assert s["minValues"] == {"d": "2000-01-01", "f": -0.25}
    assert s["maxValues"] == {"d": "2024-02-29", "f": 1.5}
    assert s["nullCount"] == {"d": 0, "f": 0, "nan": 0, "b": 1, "bin": 1}


def test_collector_merges_row_groups() -> None:
    schema = pa.schema([("x", pa.int64()), ("s", pa.string())])
    c = StatsCollector(schema)
    c.update(pa.table({"x": [5, None], "s": ["m", "n"]}, schema=schema))
    c.update(pa.table({"x": [1, 9], "s": [None, "a"]}, schema=schema))
    assert json.loads(c.to_json()) == {
        "numRecords": 4,
        "minValues": {"x": 1, "s": "a"},
        "maxValues": {"x": 9, "s": "n"},
        "nullCount": {"x": 1, "s": 1},
    }


def test_struct_columns_get_no_stats() -> None:
    s = stats_of(pa.table({"st": pa.array([{"a": 1}, None], pa.struct([("a", pa.int64())])), "x": [1, 2]}))
    assert s["nullCount"] == {"x": 0}
