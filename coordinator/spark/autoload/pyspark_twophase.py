"""Installed as the top-level module ``pyspark_twophase``: Spark's Python data source lookup
imports every installed ``pyspark_*`` module and registers its ``DefaultSource`` by name, so
``.format("twophase")`` works with no ``spark.dataSource.register`` call.

On a Spark whose Data Source API lacks what the source needs (4.0), ``DefaultSource`` is a source
that refuses a write by naming the Spark version it needs; the module must import cleanly there,
since one failing import breaks Spark's lookup of every Python data source.

This folder has no ``__init__.py`` on purpose: it is not a package of ``twophase``; setup.cfg
installs this one file at the top level (``py_modules``).
"""

from typing import Any

from twophase.coordinator.spark.compat import DATA_SOURCE_SPARK, refusing_data_source, spark_version

DefaultSource: Any
if spark_version() >= DATA_SOURCE_SPARK:
    from twophase.coordinator.spark.default_source import TwophaseDataSource

    DefaultSource = TwophaseDataSource
else:
    DefaultSource = refusing_data_source()

__all__ = ["DefaultSource"]
