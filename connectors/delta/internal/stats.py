"""Per-file statistics of an Add action, computed from Arrow data (Delta PROTOCOL.md, "Per-file Statistics").

The ``stats`` JSON holds ``numRecords`` and, per top-level column, ``minValues``/``maxValues``
and ``nullCount``. Stats only ever *widen* what the file holds, because readers skip files by them:

- integers, dates and floats (no NaN) exactly; decimals of precision ≤ 15 as JSON numbers (exact
  through a double); larger decimals get no min/max (a rounded bound could skip matching rows);
- timestamps at millisecond precision as delta-spark writes them (``...T12:00:00.123Z``; without
  time zone ``...T12:00:00.123``): min floored, max ceiled to the millisecond;
- strings: the first ``prefix_length`` characters; a truncated max gets U+10FFFF appended, as
  delta-spark's tie-breaker, so it stays ≥ every value with that prefix;
- booleans, binary and nested columns: ``nullCount`` only (structs: nothing).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twophase.sinks.internal.arrow_compat import is_string_view

MAX_EXACT_DECIMAL_PRECISION = 15
"""Decimals of at most this precision survive a round trip through a JSON double exactly."""

_TIE_BREAKER = "\U0010ffff"
_EPOCH = dt.datetime(1970, 1, 1)
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


@dataclass
class _ColumnStats:
    kind: str  # "plain" | "decimal" | "timestamp" | "timestamp_ntz" | "string" | "count_only"
    null_count: int = 0
    min: Any = None
    max: Any = None
    has_nan: bool = False


@dataclass
class StatsCollector:
    """Accumulates one data file's stats over the tables (row groups) written into it.

    Args:
        schema: the file's Arrow schema (partition columns already removed).
        prefix_length: characters kept of string min/max (delta-spark's default is 32).
    """

    schema: pa.Schema
    prefix_length: int = 32
    num_records: int = 0
    _columns: dict[str, _ColumnStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in self.schema:
            kind = _kind(f.type)
            if kind is not None:
                self._columns[f.name] = _ColumnStats(kind)

    def update(self, table: pa.Table) -> None:
        """Fold the rows of ``table`` (same schema) into the stats."""
        self.num_records += table.num_rows
        for name, st in self._columns.items():
            col = table.column(name)
            st.null_count += col.null_count
            if st.kind == "count_only" or col.null_count == len(col):
                continue
            if st.kind == "plain" and pa.types.is_floating(col.type):
                st.has_nan = st.has_nan or bool(pc.any(pc.is_nan(col)).as_py())
                if st.has_nan:
                    continue
            lo, hi = _min_max(col, st.kind)
            if lo is None:
                continue
            st.min = lo if st.min is None else min(st.min, lo)
            st.max = hi if st.max is None else max(st.max, hi)

    def to_json(self) -> str:
        """The Add action's ``stats`` string."""
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, int] = {}
        for name, st in self._columns.items():
            nulls[name] = st.null_count
            if st.kind == "count_only" or st.min is None or st.has_nan:
                continue
            lo, hi = _format(st.kind, st.min, st.max, self.prefix_length)
            if lo is not None and hi is not None:
                mins[name] = lo
                maxs[name] = hi
        stats = {"numRecords": self.num_records, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
        return json.dumps(stats, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def file_stats(table: pa.Table, prefix_length: int = 32) -> str:
    """The ``stats`` JSON of a file holding exactly ``table``."""
    collector = StatsCollector(table.schema, prefix_length)
    collector.update(table)
    return collector.to_json()


def _kind(type_: pa.DataType) -> str | None:
    if pa.types.is_struct(type_):
        return None
    if pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_date(type_):
        return "plain"
    if pa.types.is_decimal(type_):
        return "decimal" if type_.precision <= MAX_EXACT_DECIMAL_PRECISION else "count_only"
    if pa.types.is_timestamp(type_):
        return "timestamp" if type_.tz is not None else "timestamp_ntz"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or is_string_view(type_):
        return "string"
    return "count_only"


def _min_max(col: pa.ChunkedArray, kind: str) -> tuple[Any, Any]:
    if kind in ("timestamp", "timestamp_ntz"):
        unit = col.type.unit
        ints = col.cast(pa.int64())
        mm = pc.min_max(ints)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        factor = _US_PER_UNIT[unit]
        if factor is None:  # ns → µs, floor/ceil so the bounds stay wide
            return lo // 1000, -((-hi) // 1000)
        return lo * factor, hi * factor
    mm = pc.min_max(col)
    return mm["min"].as_py(), mm["max"].as_py()


def _format(kind: str, lo: Any, hi: Any, prefix_length: int) -> tuple[Any, Any]:
    if kind == "plain":
        if isinstance(lo, dt.date):
            return lo.isoformat(), hi.isoformat()
        if isinstance(lo, float) and (math.isinf(lo) or math.isinf(hi)):
            return None, None  # JSON has no infinity
        return lo, hi
    if kind == "decimal":
        assert isinstance(lo, decimal.Decimal) and isinstance(hi, decimal.Decimal)
        return float(lo), float(hi)
    if kind in ("timestamp", "timestamp_ntz"):
        suffix = "Z" if kind == "timestamp" else ""
        lo_ms = lo // 1000
        hi_ms = -((-hi) // 1000)
        lo_s, hi_s = _format_ms(lo_ms, suffix), _format_ms(hi_ms, suffix)
        return (lo_s, hi_s) if lo_s is not None and hi_s is not None else (None, None)
    if kind == "string":
        lo_s = lo[:prefix_length]
        hi_s = hi if len(hi) <= prefix_length else hi[:prefix_length] + _TIE_BREAKER
        return lo_s, hi_s
    return None, None


def _format_ms(ms: int, suffix: str) -> str | None:
    try:
        t = _EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return None
    if not 1 <= t.year <= 9999:
        return None
    return f"{t.year:04d}-{t.strftime('%m-%dT%H:%M:%S')}.{t.microsecond // 1000:03d}{suffix}"
