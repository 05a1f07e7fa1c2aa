"""The one seam between twophase and the pyspark versions it runs on (Spark 3.5.0 to 4.3).

Everything else in the Spark adapter uses public pyspark APIs. Where a version differs, the
difference is handled here, once, by feature and not by copying code paths: the Arrow schema of a
Spark schema (an internal helper that gained a time-zone parameter in Spark 4.2), collecting a
DataFrame as Arrow (public from Spark 4.0), what Spark's ``mapInArrow`` needs of the Python it runs
in (pandas on every release; distutils on Spark 3.5), and the Python Data Source API (Spark 4.0;
its Arrow stream writer, which the ``twophase`` data source uses, 4.1).
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from twophase.sinks.errors import UnsupportedSparkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

DATA_SOURCE_SPARK = (4, 1)
"""The first Spark whose Python Data Source API has the Arrow stream writer ``format("twophase")``
runs on (``pyspark.sql.datasource.DataSourceStreamArrowWriter``)."""


def spark_version() -> tuple[int, int]:
    """(major, minor) of the installed pyspark, e.g. ``(3, 5)``."""
    import pyspark

    major, minor = pyspark.__version__.split(".")[:2]
    return int(major), int(minor)


def spark_release() -> tuple[int, int, int]:
    """(major, minor, patch) of the installed pyspark, e.g. ``(3, 5, 0)``; a suffix such as
    ``.dev0`` or a vendor's ``+databricks`` is ignored, a missing patch reads as 0."""
    import pyspark

    numbers = [re.match(r"\d+", part) for part in pyspark.__version__.split(".")[:3]]
    major, minor, patch = ([int(n.group()) if n else 0 for n in numbers] + [0, 0])[:3]
    return major, minor, patch


def require_map_in_arrow() -> None:
    """Refuse a Python in which Spark's ``mapInArrow`` (every epoch's write) cannot start.

    pyspark checks for pandas and pyarrow when ``mapInArrow`` builds its function (on every release
    up to 4.3, pandas although the batches stay in Arrow), and pyspark 3.5 imports ``distutils`` for
    that check, which Python 3.12 no longer has (setuptools provides it). Run here, before a job
    opens its checkpoints, the same check turns a failure of the first epoch (retried by the restart
    strategy) into one line.

    Raises:
        UnsupportedSparkError: pandas, pyarrow or distutils is missing or too old for this pyspark;
            the message names the module and what to install.
    """
    release = ".".join(map(str, spark_release()))
    try:
        from pyspark.sql.pandas import utils

        utils.require_minimum_pandas_version()
        utils.require_minimum_pyarrow_version()
    except ImportError as e:
        if e.name == "distutils":
            fix = "install setuptools (it provides distutils, which Python 3.12 removed)"
            what = f"needs distutils, which this Python {sys.version_info[0]}.{sys.version_info[1]} lacks"
        elif e.name == "pandas" or "pandas" in str(e).lower():
            fix = "install pandas>=1.5.3 beside the platform's Spark (or pip install 'twophase[spark]')"
            what = "needs pandas"
        else:
            fix = "install the versions pyspark names"
            what = "cannot start"
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UnsupportedSparkError(
            f"Spark {release}'s mapInArrow, which twophase writes with, {what} ({detail}): {fix}"
        ) from None


def arrow_schema(schema: StructType, time_zone: str) -> pa.Schema:
    """The Arrow schema of the batches Spark hands a task for ``schema`` (``mapInArrow``).

    Spark labels ``TimestampType`` columns with the session time zone ``time_zone`` (an IANA name
    such as ``"UTC"``); pyspark before 4.2 has no ``timezone`` parameter on its converter and
    labels them UTC, so they are relabelled here, nested fields included. An internal pyspark
    helper, since pyspark has no public converter.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone=time_zone)
    converted = to_arrow_schema(schema)
    return pa.schema([f.with_type(_in_zone(f.type, time_zone)) for f in converted], converted.metadata)


def _in_zone(t: pa.DataType, time_zone: str) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz=time_zone)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_in_zone(f.type, time_zone)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_in_zone(t.key_type, time_zone), _in_zone(t.item_type, time_zone))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_in_zone(t.value_type, time_zone)))
    return t


def collect_arrow(df: DataFrame) -> pa.Table:
    """``df``'s rows as one Arrow table, types kept (``DataFrame.toArrow``, public from Spark 4.0;
    on 3.5 the same collection through its internal ``_collect_as_arrow``)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    collect: Any = getattr(df, "_collect_as_arrow")  # noqa: B009 - DataFrame.__getattr__ types it a Column
    batches = collect()
    schema = arrow_schema(df.schema, df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC")
    return pa.Table.from_batches(batches, schema=schema if not batches else None)


def require_data_source_api() -> None:
    """Refuse ``format("twophase")`` on a Spark without the Python Data Source API it runs on.

    Raises:
        UnsupportedSparkError: pyspark is older than :data:`DATA_SOURCE_SPARK`; the message names the
            installed and the needed version and points at ``twophase.Job``.
    """
    have = spark_version()
    if have < DATA_SOURCE_SPARK:
        need = ".".join(map(str, DATA_SOURCE_SPARK))
        raise UnsupportedSparkError(
            f'format("twophase") needs Spark {need} or later (its Python Data Source API); this is Spark '
            f"{'.'.join(map(str, have))}: write with twophase.Job instead, which runs on Spark 3.5 and later"
        )


def refusing_data_source() -> type | None:
    """A ``twophase`` data source for a Spark that has the Python Data Source API but not the Arrow
    stream writer (Spark 4.0): Spark's lookup imports every ``pyspark_*`` module, so the format is
    found and a write with it fails with :func:`require_data_source_api`'s error instead of "data
    source not found" (an import error would break every Python data source's lookup). ``None`` on
    Spark 3.5, which has no such lookup.
    """
    try:
        from pyspark.sql.datasource import DataSource
    except ImportError:
        return None

    class RefusingDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "twophase"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            require_data_source_api()

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            require_data_source_api()

    return RefusingDataSource
